"""funcs: procedural short function problems for the code task (`--data funcs`), where a small real model
(SmolLM2-135M-Instruct, `--preset cpu-real`) has a signal that HumanEval and contest sets do not give it.
A problem is a template (the sum above a bound times k, the multiples of k above a bound, a quadratic on
even n, ...) with its constants: one sentence, one example, a reference solution, and five `assert` tests
whose expected values come from running the reference here (our own trusted text, never model output).
Most templates take one step beyond a literal expression, and each names its answer one step short, which
every problem's tests fail (inputs are redrawn until they do). Every template gives at most CAP problems,
so the templates weigh alike in every split (not by how many constants they have).

Splits by content, like arith: a problem belongs to the split that a hash of its VALUE (template name,
constants) names, so no held-out problem is a training one. The set is finite (~1,200 problems: about 80%
train, 10% val, 10% test) and each split is listed once, in a fixed shuffled order (so the first N
problems, e.g. --eval_n's, mix every template); the task's index wraps around.

    python -m pytest -q test_envs.py -k funcs
"""
import random
from functools import lru_cache

from task import split_of

# (entry point, argument, what it returns (format fields: the constants), reference body, the body one step
# short (a plausible wrong answer: every problem's tests fail it, see make), constants' ranges).
# Most need one step beyond a literal expression (a filter AND a scale, a prefix, a case change, a branch):
# SmolLM2-135M solved a literal one (the quadratic itself) every time and a two-clause range check never, so
# the set sits between (issue 33: a start near 10% leaves room for both +10 points and 2x)
TEMPLATES = [
    ("scale", "xs", "a new list with every number of the list xs multiplied by {a} and then increased by {b}",
     "return [x * {a} + {b} for x in xs]", "return [x * {a} for x in xs]", {"a": range(2, 10), "b": range(1, 21)}),
    ("quadratic_even", "n", "{a} * n * n + {b} * n + {c} when the integer n is even, and {d} when n is odd",
     "return {a} * n * n + {b} * n + {c} if n % 2 == 0 else {d}", "return {a} * n * n + {b} * n + {c}",
     {"a": range(1, 6), "b": range(0, 10), "c": range(0, 10), "d": range(0, 10)}),
    ("sum_above_times", "xs", "the sum of the numbers in the list xs that are greater than {a}, multiplied by {b}",
     "return {b} * sum(x for x in xs if x > {a})", "return sum(x for x in xs if x > {a})", {"a": range(-5, 21), "b": range(2, 7)}),
    ("count_multiples_above", "xs", "how many numbers in the list xs are divisible by {a} and greater than {b}",
     "return sum(1 for x in xs if x % {a} == 0 and x > {b})", "return sum(1 for x in xs if x % {a} == 0)", {"a": range(2, 8), "b": range(10, 31)}),
    ("count_char_prefix", "s", "how many times the character '{c}' occurs in the first {a} characters of the string s",
     "return s[:{a}].count('{c}')", "return s.count('{c}')", {"a": range(2, 10), "c": "abcdexyz"}),
    ("repeat_join_upper", "s", "the string s in upper case, repeated {a} times, with '{c}' between the copies",
     "return '{c}'.join([s.upper()] * {a})", "return '{c}'.join([s] * {a})", {"a": range(2, 7), "c": "-,+*:;|/.#=_"}),
    ("every_kth_times", "xs", "a new list of every {a}-th element of the list xs, starting with the first, "
     "each multiplied by {b}", "return [x * {b} for x in xs[::{a}]]", "return xs[::{a}]", {"a": range(2, 6), "b": range(2, 31)}),
    ("replace_below", "xs", "a new list where every number of the list xs below {a} becomes {b} (the others stay)",
     "return [{b} if x < {a} else x for x in xs]", "return [x for x in xs if x >= {a}]",
     {"a": range(10, 31), "b": range(0, 10)}),
    ("max_above", "xs", "the largest number in the list xs that is greater than {a}, or {b} when there is none",
     "return max([x for x in xs if x > {a}], default={b})", "return max(xs, default={b})", {"a": range(12, 31), "b": range(-9, 0)}),
    ("sum_squares_plus", "xs", "the sum of the squares of the numbers in the list xs, plus {a}",
     "return sum(x * x for x in xs) + {a}", "return sum(x * x for x in xs)", {"a": range(1, 121)}),
    ("count_between", "xs", "how many numbers in the list xs are between {a} and {b}, both included",
     "return sum(1 for x in xs if {a} <= x <= {b})", "return sum(1 for x in xs if {a} < x < {b})", {"a": range(0, 21), "w": range(1, 31)}),
]
CAP = 120  # problems per template at most (a fixed draw of its constants): the templates weigh alike, not by range


def _consts(t):
    """Template t's constants: at most CAP combinations, a fixed draw from all of them; "w" is a width: b = a + w."""
    name, spec = TEMPLATES[t][0], TEMPLATES[t][5]
    combos = [{}]
    for k, vals in spec.items():
        combos = [dict(c, **{k: v}) for c in combos for v in vals]
    combos = [{"a": c["a"], "b": c["a"] + c["w"]} if "w" in c else c for c in combos]
    return random.Random(f"funcs/{name}").sample(combos, min(CAP, len(combos)))


def _input(arg, rng, consts, i):
    """Input i of a problem. The constants themselves (and their neighbours, their characters) are mixed in,
    and n alternates parity: so the tests tell `> a` from `>= a`, the prefix from the whole string, the
    branch from no branch (test_envs: each template's one-step-short answer fails every problem)."""
    edges = [v + d for v in consts.values() if isinstance(v, int) for d in (-1, 0, 1)]
    if arg == "xs":
        lo, hi = ((-20, 50), (-5, 12))[i % 2]  # every other list small: all of it below a bound, at times
        return [rng.choice(edges) if edges and rng.random() < 0.4 else rng.randint(lo, hi)
                for _ in range(rng.randint(1, 8))]
    if arg == "s":
        pool = "abcdeab xyz" + "".join(3 * v for v in consts.values() if isinstance(v, str))
        return "".join(rng.choice(pool) for _ in range(rng.randint(1, 14)))
    n = rng.randint(-10, 30)
    return n | 1 if i % 2 else n & ~1


def make(t, consts):
    """The code task's record of template t with its constants (function kind, tests run in the judge)."""
    name, arg, says, body, short, _ = TEMPLATES[t]
    reference = f"def {name}({arg}):\n    {body.format(**consts)}\n"
    scope, wrong = {}, {}
    exec(reference, scope)  # noqa: S102 (our own text: the expected values are the reference's)
    exec(f"def {name}({arg}):\n    {short.format(**consts)}\n", wrong)  # noqa: S102 (ours too)
    rng = random.Random(f"funcs/{name}/{sorted(consts.items())}")
    for _ in range(100):  # redraw until the tests tell the answer that skips the step (a few tries at most)
        inputs = [_input(arg, rng, consts, i) for i in range(6)]
        if arg == "xs":
            inputs[1] = []  # the empty list, every time
        example, tests = inputs[0], inputs[1:]
        if any(scope[name](x) != wrong[name](x) for x in tests):
            break
    else:
        raise AssertionError(f"{name} {consts}: no tests tell the reference from the answer one step short")
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
    # keyed by the template's NAME (not its place in the list): editing the list moves no problem across splits
    rows = [make(t, c) for t, tpl in enumerate(TEMPLATES) for c in _consts(t)
            if split_of(("funcs", tpl[0], tuple(sorted(c.items())))) == split]
    random.Random(f"funcs/{split}").shuffle(rows)  # template order would make a prefix one template
    return rows
