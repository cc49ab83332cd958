"""House rules a reader relies on (README, style): the project's modules import one another without a
circle, and each file stays readable top to bottom (at most 600 lines; tests are exempt).

    python -m pytest -q test_shape.py
"""
import ast
import glob
import os

HERE = os.path.dirname(os.path.abspath(__file__))
MODULES = sorted(os.path.basename(f)[:-3] for f in glob.glob(os.path.join(HERE, "*.py"))
                 if not os.path.basename(f).startswith(("test_", "conftest")))


def imports(name):
    """The project modules `name` imports anywhere in its file (a function-level import counts too)."""
    out = set()
    for n in ast.walk(ast.parse(open(os.path.join(HERE, name + ".py")).read())):
        if isinstance(n, ast.Import):
            out |= {a.name.split(".")[0] for a in n.names}
        elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
            out.add(n.module.split(".")[0])
    return out & set(MODULES) - {name}


def test_no_import_circle():
    graph = {m: imports(m) for m in MODULES}
    state = {}  # 1: on the current path, 2: done

    def visit(m, path):
        state[m] = 1
        for d in sorted(graph[m]):
            assert state.get(d) != 1, "import circle: " + " -> ".join(path[path.index(d):] + [d])
            if d not in state:
                visit(d, path + [d])
        state[m] = 2
    for m in MODULES:
        if m not in state:
            visit(m, [m])


def test_every_module_is_at_most_600_lines():
    long = {m: n for m in MODULES if (n := sum(1 for _ in open(os.path.join(HERE, m + ".py")))) > 600}
    assert not long, f"over 600 lines (move code to where it belongs): {long}"
