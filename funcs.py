"""funcs: procedural short function problems for the code task (`--data funcs`), where a small real model
(SmolLM2-135M-Instruct, `--preset cpu-real`) has a signal that HumanEval and contest sets do not give it.
A problem is a template (sum the numbers above a bound, count the multiples of k, a quadratic, ...) with
its constants: one sentence, one example, a reference solution, and five `assert` tests whose expected
values come from running the reference here (our own trusted text, never model output).

Splits by content, like arith: a problem belongs to the split that a hash of its VALUE (template,
constants) names, so no held-out problem is a training one. The set is finite (~1,700 problems: about 80%
train, 10% val, 10% test) and each split is listed once, in a fixed shuffled order (so the first N
problems, e.g. --eval_n's, mix every template); the task's index wraps around.

    python -m pytest -q test_envs.py -k funcs
"""
import random
from functools import lru_cache

from task import split_of

# (entry point, argument, what it returns (format fields: the constants), reference body, constants' ranges)
TEMPLATES = [
    ("sum_above", "xs", "the sum of the numbers in the list xs that are greater than {a}",
     "return sum(x for x in xs if x > {a})", {"a": range(-5, 31)}),
    ("count_multiples", "xs", "how many numbers in the list xs are divisible by {a}",
     "return sum(1 for x in xs if x % {a} == 0)", {"a": range(2, 13)}),
    ("scale", "xs", "a new list with every number of the list xs multiplied by {a} and then increased by {b}",
     "return [x * {a} + {b} for x in xs]", {"a": range(2, 10), "b": range(0, 21)}),
    ("count_char", "s", "how many times the character '{c}' occurs in the string s",
     "return s.count('{c}')", {"c": "abcdefghijklmnopqrstuvwxyz"}),
    ("repeat_join", "s", "the string s repeated {a} times, with '{c}' between the copies",
     "return '{c}'.join([s] * {a})", {"a": range(2, 6), "c": "-,+*"}),
    ("clamp", "xs", "a new list where every number of the list xs below {a} becomes {a} and every number "
     "above {b} becomes {b}", "return [min(max(x, {a}), {b}) for x in xs]", {"a": range(0, 11), "w": range(5, 31)}),
    ("count_between", "xs", "how many numbers in the list xs are between {a} and {b}, both included",
     "return sum(1 for x in xs if {a} <= x <= {b})", {"a": range(0, 21), "w": range(1, 31)}),
    ("quadratic", "n", "{a} * n * n + {b} * n + {c} for the integer n",
     "return {a} * n * n + {b} * n + {c}", {"a": range(1, 6), "b": range(0, 10), "c": range(0, 10)}),
    ("every_kth", "xs", "every {a}-th element of the list xs, starting with the first (a new list)",
     "return xs[::{a}]", {"a": range(2, 6)}),
]


def _consts(spec):
    """Every combination of a template's constants, in order; "w" is a width: b = a + w."""
    combos = [{}]
    for k, vals in spec.items():
        combos = [dict(c, **{k: v}) for c in combos for v in vals]
    return [{"a": c["a"], "b": c["a"] + c["w"]} if "w" in c else c for c in combos]


def _input(arg, rng):
    if arg == "xs":
        return [rng.randint(-20, 50) for _ in range(rng.randint(1, 8))]
    if arg == "s":
        return "".join(rng.choice("abcdeab xyz") for _ in range(rng.randint(1, 10)))
    return rng.randint(-10, 30)


def make(t, consts):
    """The code task's record of template t with its constants (function kind, tests run in the judge)."""
    name, arg, says, body, _ = TEMPLATES[t]
    reference = f"def {name}({arg}):\n    {body.format(**consts)}\n"
    scope = {}
    exec(reference, scope)  # noqa: S102 (our own text: the expected values are the reference's)
    rng = random.Random(f"funcs/{t}/{sorted(consts.items())}")
    inputs = [_input(arg, rng) for _ in range(6)]
    if arg == "xs":
        inputs[1] = []  # the empty list, every time
    example, tests = inputs[0], inputs[1:]
    text = (f"Write a Python function `{name}({arg})` that returns {says.format(**consts)}.\n"
            f"Example: {name}({example!r}) == {scope[name](example)!r}")
    return {"name": f"funcs/{name}/" + ",".join(f"{k}={v}" for k, v in consts.items()), "problem": text,
            "kind": "function", "entry_point": name, "reference": reference, "setup": "",
            "tests": [f"assert {name}({x!r}) == {scope[name](x)!r}" for x in tests]}


@lru_cache(maxsize=None)
def problems(split):
    """Every problem of a split (its value's hash names it), in a fixed shuffled order: cached, read-only."""
    if split not in ("train", "val", "test"):
        raise ValueError(f"unknown split {split!r}; choose from train, val, test")
    rows = [make(t, c) for t, tpl in enumerate(TEMPLATES) for c in _consts(tpl[4])
            if split_of(("funcs", t, tuple(sorted(c.items())))) == split]
    random.Random(f"funcs/{split}").shuffle(rows)  # template order would make a prefix one template
    return rows
