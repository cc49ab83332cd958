"""The task registry: TASKS maps a name to its Task class (task.py: the contract every env keeps). A new
task is one file with a Task subclass and one line here. make() builds a problem instance, count() says
how many a split holds, add_task_args() / task_options() turn the tasks' OPTIONS into flags and back.

    python -m pytest -q test_envs.py
"""
from task_code import Code
from task_games import PlanPath, Sokoban, Sudoku, random_floor  # noqa: F401 (random_floor: envs' API)
from task_math import Math

TASKS = {"plan_path": PlanPath, "sudoku": Sudoku, "sokoban": Sokoban, "math": Math, "code": Code}


def task_class(task):
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose from {', '.join(TASKS)}")
    return TASKS[task]


def make(task, split="train", index=0, **options):
    """Problem `index` of a split of a task; options: the task's OPTIONS (unknown names are an error)."""
    return task_class(task)(split, index, **options)


def count(task, split="train", **options):
    """Distinct problems of a split (None for procedural tasks: unlimited)."""
    cls = task_class(task)
    cls.resolve(options)  # the same option errors as make()
    return cls.count(split, **options)


def add_task_args(parser):
    """--task, and one flag per option of any task. An option whose default differs between tasks gets
    None (the task's own default applies: task_options drops None) and its help lists the defaults."""
    parser.add_argument("--task", default="plan_path", choices=list(TASKS), help="task name")
    specs = {}  # option name -> {task: spec}, in registry order
    for name, cls in TASKS.items():
        for opt, spec in cls.OPTIONS.items():
            specs.setdefault(opt, {})[name] = spec
    for opt, by_task in specs.items():
        first = next(iter(by_task.values()))
        kw = {k: v for k, v in first.items() if k != "default"}
        choices = list(dict.fromkeys(c for spec in by_task.values() for c in spec.get("choices", ())))
        if "choices" in kw and choices != list(kw["choices"]):  # every task's values (math's mas3), with the
            kw["choices"] = choices  # help of the task that lists them all; a task refuses what it lacks
            kw["help"] = next(s.get("help", opt) for s in by_task.values() if len(s.get("choices", ())) == len(choices))
        defaults = {name: spec.get("default") for name, spec in by_task.items()}
        if len(set(map(repr, defaults.values()))) == 1:
            kw["default"] = first.get("default")
        else:
            listed = ", ".join(f"{name} {d}" for name, d in defaults.items())
            kw["default"], kw["help"] = None, f"{kw.get('help', opt)} (default: {listed})"
        parser.add_argument(f"--{opt}", **kw)


def task_options(task, namespace):
    """The options of `task` set in an argparse namespace (None: unset, the task's default applies)."""
    return {k: getattr(namespace, k) for k in task_class(task).OPTIONS if getattr(namespace, k, None) is not None}
