"""funcs.py's problems against their near misses and their training set (issue 38): every problem's tests
reject every plausible near miss of its reference that differs from it somewhere; no held-out problem is a
training problem under other constants; whole templates are held out as their own benchmark.

The near misses and the dense inputs are made HERE, from the reference's syntax tree (ast), not by
funcs.py's own (text) mutation and candidate inputs, so a gap in how funcs.make chooses its asserts shows.

    python -m pytest -q test_funcs.py
"""
import ast
import collections
import copy
import functools
import random

import envs
import funcs
import rollout

SPLITS = ("train", "val", "test")
# each comparison flipped, widened or narrowed, negated
CMP = {ast.Gt: (ast.GtE, ast.Lt, ast.LtE), ast.GtE: (ast.Gt, ast.LtE, ast.Lt), ast.Lt: (ast.LtE, ast.Gt, ast.GtE),
       ast.LtE: (ast.Lt, ast.GtE, ast.Gt), ast.Eq: (ast.NotEq,), ast.NotEq: (ast.Eq,)}
CONSTANT_RETURNS = ("0", "[]", "''", "None")


def battery(arg):
    """Dense inputs of an argument kind: every small integer, every single-element list over the constants'
    ranges and random lists around them, every run of one letter and random strings."""
    rng = random.Random(f"test_funcs/{arg}")
    if arg == "n":
        return list(range(-60, 140))
    if arg == "s":
        return ([ch * k for ch in "abcdexyz" for k in range(16)] +
                ["".join(rng.choice("abcdexyz ABZ-,") for _ in range(rng.randint(1, 24))) for _ in range(200)])
    return ([[]] + [[v] for v in range(-40, 100)] + [[v, v] for v in range(-5, 60)] +
            [[rng.randint(-40, 100) for _ in range(rng.randint(2, 14))] for _ in range(250)])


def mutants(reference, arg, short):
    """Near misses of a reference `def f(arg): return ...` as source texts: each comparison changed (CMP),
    each integer literal (a constant, a slice bound or step) +-1, a constant return, the argument returned
    unchanged, and the template's body one step short."""
    tree = ast.parse(reference)
    head = reference.split("\n")[0]
    out = [f"{head}\n    return {c}\n" for c in CONSTANT_RETURNS + (arg,)] + [f"{head}\n    {short}\n"]
    for i, node in enumerate(ast.walk(tree)):
        edits = []
        if isinstance(node, ast.Compare):
            edits = [(k, new) for k, op in enumerate(node.ops) for new in CMP[type(op)]]
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            edits = [(None, d) for d in (-1, 1)]
        for k, new in edits:
            t = copy.deepcopy(tree)
            m = list(ast.walk(t))[i]  # the same node in the copy (same walk order)
            if k is None:
                m.value += new
            else:
                m.ops[k] = new()
            out.append(ast.unparse(t))
    return out


def function(src, name):
    scope = {}
    exec(src, scope)  # noqa: S102 (our own text, mutated here)
    return scope[name]


def outputs(f, inputs):
    """f on each input; an exception is an output too (a type that no value equals)."""
    out = []
    for x in inputs:
        try:
            out.append(f(copy.deepcopy(x)))
        except Exception as e:  # noqa: BLE001 (a near miss may divide by zero, index out of range, ...)
            out.append(type(e))
    return out


def asserts(p):
    """[(input, expected)] of a problem's `assert f(x) == y` tests."""
    pairs = []
    for t in p["tests"]:
        cmp = ast.parse(t).body[0].test
        pairs.append((ast.literal_eval(cmp.left.args[0]), ast.literal_eval(cmp.comparators[0])))
    return pairs


@functools.lru_cache(maxsize=None)
def constants():
    """{problem name: (template index, its constants)} (a name is funcs/TEMPLATE/k=v,...)."""
    return {f"funcs/{tpl[0]}/" + ",".join(f"{k}={v}" for k, v in c.items()): (t, c)
            for t, tpl in enumerate(funcs.TEMPLATES) for c in funcs._consts(t)}


def surviving(p):
    """The near misses of p that pass all of its tests yet differ from its reference on the battery."""
    t, consts = constants()[p["name"]]
    name, arg, _, _, short, _ = funcs.TEMPLATES[t]
    tests = asserts(p)
    inputs = [x for x, _ in tests]
    assert outputs(function(p["reference"], name), inputs) == [y for _, y in tests], p["name"]
    dense = battery(arg)
    ref = outputs(function(p["reference"], name), dense)
    out = []
    for src in mutants(p["reference"], arg, short.format(**consts)):
        f = function(src, name)
        if outputs(f, inputs) == [y for _, y in tests] and outputs(f, dense) != ref:
            out.append(src.split("\n", 1)[1].strip())
    return out


def test_every_problems_tests_reject_every_near_miss():
    """Printed per split. Before issue 38 (five asserts redrawn only until the body one step short failed)
    train 350 of 980 problems passed at least one near miss, val 30 of 102, test 38 of 118."""
    bad = {s: {p["name"]: m for p in funcs.problems(s) if (m := surviving(p))} for s in SPLITS}
    print({s: f"{len(b)} of {len(funcs.problems(s))}" for s, b in bad.items()})
    assert not any(bad.values()), {s: (len(b), list(b.items())[:3]) for s, b in bad.items()}


def fingerprint(p):
    """What a problem's reference does on the battery: the same for the same function, whatever its text."""
    arg = funcs.TEMPLATES[constants()[p["name"]][0]][1]
    return arg, repr(outputs(function(p["reference"], p["entry_point"]), battery(arg)))


def test_no_held_out_problem_is_a_training_function():
    """Other constants, the same function (count_multiples_above of 2 above 10 and above 11: the same on
    every integer) is not held out: before issue 38, 11 of the 118 test problems were training ones (and 9
    of the 102 val problems)."""
    train = {fingerprint(p) for p in funcs.problems("train")}
    for split in ("val", "test"):
        prints = {p["name"]: fingerprint(p) for p in funcs.problems(split)}
        same = [name for name, f in prints.items() if f in train]
        print(split, len(same), "of", len(prints))
        assert not same, (split, same[:5])
        assert len(set(prints.values())) == len(prints), split  # nor twice within a split


def test_unseen_templates_are_their_own_benchmark():
    """At least two templates are never trained on (no train or val problem) and give >= 30 test problems,
    reported apart (their records' `source`) from the seen templates' new constants."""
    seen = {p["entry_point"] for s in ("train", "val") for p in funcs.problems(s)}
    test = funcs.problems("test")
    unseen = collections.Counter(p["entry_point"] for p in test if p["entry_point"] not in seen)
    assert len(unseen) >= 2 and sum(unseen.values()) >= 30, unseen
    for s in SPLITS:
        for p in funcs.problems(s):
            assert p["source"] == ("funcs-unseen" if p["entry_point"] in unseen else "funcs-seen"), p["name"]
    n = envs.count("code", "test", data="funcs")
    played = rollout.eval_problems(lambda i: envs.make("code", "test", i, data="funcs"), n, n)
    assert collections.Counter(s for _, s in played) == {"funcs-unseen": sum(unseen.values()),
                                                         "funcs-seen": n - sum(unseen.values())}
