"""funcs: procedural short function problems for the code task (`--data funcs`), where a small real model
(SmolLM2-135M-Instruct, `--preset cpu-real`) has a signal that HumanEval and contest sets do not give it.
A problem is a template (the sum above a bound times k, the multiples of k above a bound, a quadratic on
even n, ...) with its constants: one sentence, one example, a reference solution, and `assert` tests
whose expected values come from running the reference here (our own trusted text, never model output).
Most templates take one step beyond a literal expression. The tests are five drawn inputs plus, where
those let one through, inputs that reject every near miss of the reference (near_misses: each comparison
changed, each integer literal +-1, a constant return, the body one step short) that differs from it on a
dense battery of inputs; the record lists the near misses its tests reject (`near_misses`, one program
per function: the wrong programs of the code task's discriminating tester reward). Every template gives at
most CAP problems, so the templates weigh alike in every split (not by how many constants they have).

Splits by content, like arith: a problem belongs to the split that a hash of its VALUE (template name,
constants) names, so no held-out problem is a training one; a held-out problem that behaves as a training
one on the battery (other constants, the same function) is dropped. The UNSEEN templates are never trained
on: all their problems are test problems, reported as their own benchmark (`source` funcs-unseen, beside
funcs-seen: eval.py's per-benchmark lines), so the test split measures transfer to new templates apart from
new constants. The set is finite (~1,200 problems: about 80% train, 10% val, 10% test plus the unseen) and
each split is listed once, in a fixed shuffled order (so the first N problems mix every template); the
task's index wraps around.

    python -m pytest -q test_funcs.py test_envs.py -k funcs
"""
import io
import random
import tokenize
from functools import lru_cache

from task import split_of

# (entry point, argument, what it returns (format fields: the constants), reference body, the body one step
# short (a plausible wrong answer, one of the near misses every problem's tests fail), constants' ranges).
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
    # the UNSEEN templates, test problems only: SmolLM2-135M's base success 0-8% each (docs/measurements.md;
    # count_two_chars, s.count(c) + s.count(d), measured 33% and was left out)
    ("positions_above", "xs", "the list of the positions (0-based indices) of the numbers in the list xs that are "
     "greater than {a}", "return [i for i, x in enumerate(xs) if x > {a}]", "return [x for x in xs if x > {a}]",
     {"a": range(-5, 31)}),
    ("distance_sum", "xs", "the sum of the distances of the numbers in the list xs from {a} (a distance is the "
     "absolute difference)", "return sum(abs(x - {a}) for x in xs)", "return sum(x - {a} for x in xs)", {"a": range(-10, 31)}),
    ("sign_scale", "n", "n multiplied by {a} when the integer n is positive, and n multiplied by {b} otherwise",
     "return n * {a} if n > 0 else n * {b}", "return n * {a}", {"a": range(2, 10), "b": range(-6, 0)}),
    ("upper_prefix", "s", "the string s with its first {a} characters in upper case (the others unchanged)",
     "return s[:{a}].upper() + s[{a}:]", "return s.upper()", {"a": range(1, 13)}),
]
# never trained on (no train or val problem): the test split's funcs-unseen benchmark, transfer to a new template
UNSEEN = ("positions_above", "distance_sum", "sign_scale", "upper_prefix")
CAP = 120  # problems per template at most (a fixed draw of its constants): the templates weigh alike, not by range
UNSEEN_CAP = 12  # all in test: about a seen template's share of the test split (~10% of CAP)


def _consts(t):
    """Template t's constants: at most CAP combinations, a fixed draw from all of them; "w" is a width: b = a + w."""
    name, spec = TEMPLATES[t][0], TEMPLATES[t][5]
    combos = [{}]
    for k, vals in spec.items():
        combos = [dict(c, **{k: v}) for c in combos for v in vals]
    combos = [{"a": c["a"], "b": c["a"] + c["w"]} if "w" in c else c for c in combos]
    return random.Random(f"funcs/{name}").sample(combos, min(UNSEEN_CAP if name in UNSEEN else CAP, len(combos)))


@lru_cache(maxsize=None)
def battery(arg):
    """Dense inputs of an argument kind, the same for every problem: every small integer, every one-element
    list over the constants' ranges and short lists around them, runs of one letter and mixed strings.
    They are the candidates make draws extra tests from, and say which problems are the same function."""
    rng = random.Random(f"funcs/battery/{arg}")
    if arg == "n":
        return tuple(range(-40, 160))
    if arg == "s":
        return tuple([ch * k for ch in "abcdexyz" for k in range(1, 15)] + ["".join(
            rng.choice("abcdexyz abxy.") for _ in range(rng.randint(0, 20))) for _ in range(120)])
    return tuple([[v] for v in range(-30, 95)] + [sorted(rng.sample(range(-30, 95), rng.randint(2, 4))) for _ in range(60)]
                 + [[rng.randint(-25, 60) for _ in range(rng.randint(5, 13))] for _ in range(120)])


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


CMPS = ("<", "<=", ">", ">=", "==", "!=")


def near_misses(body, arg, short):
    """Bodies one edit from `body` (a `return ...` line), by its tokens: each comparison replaced by each
    other one, each integer literal (a constant, a slice bound or step) +-1; a constant or the argument
    returned; the template's body one step short."""
    out = [f"return {v}" for v in ("0", "[]", "''", arg)] + [short]
    for tok in tokenize.generate_tokens(io.StringIO(body).readline):
        if tok.type == tokenize.OP and tok.string in CMPS:
            subs = [c for c in CMPS if c != tok.string]
        elif tok.type == tokenize.NUMBER and tok.string.isdigit():
            subs = [str(int(tok.string) + d) for d in (-1, 1)]
        else:
            continue
        out += [body[:tok.start[1]] + sub + body[tok.end[1]:] for sub in subs]
    return out


def _define(name, arg, body):
    scope = {}
    exec(f"def {name}({arg}):\n    {body}\n", scope)  # noqa: S102 (our own text, or one edit of it)
    return scope[name]


def _fails(f, x, want):
    """Whether f's value on input x is not `want` (raising counts): the assert of x would fail f. (x is not
    copied: a one-line body of these templates builds new values, never changes its argument.)"""
    try:
        return f(x) != want
    except Exception:  # noqa: BLE001 (a near miss may divide by zero, index past the end, ...)
        return True


def _value(f, x):
    """f's value on input x as repr spells it, or "raises"."""
    try:
        return repr(f(x))
    except Exception:  # noqa: BLE001
        return "raises"


def rejecting(ref, misses, tests, pool):
    """Inputs from pool to test besides `tests` so that every near miss fails one: greedily the input that
    the most still passing fail (the first in pool on ties). A near miss that no input of the pool tells
    from the reference is the same function on it: no near miss."""
    alive = [f for f in misses if not any(_fails(f, x, ref(x)) for x in tests)]
    if not alive:
        return []
    want = [ref(x) for x in pool]
    kills = [k for f in alive if (k := {j for j, x in enumerate(pool) if _fails(f, x, want[j])})]
    added = []
    while kills:
        counts = {}
        for k in kills:
            for j in k:
                counts[j] = counts.get(j, 0) + 1
        j = min(counts, key=lambda j: (-counts[j], j))
        added.append(pool[j])
        kills = [k for k in kills if j not in k]
    return added


def make(t, consts):
    """The code task's record of template t with its constants (function kind, tests run in the judge)."""
    name, arg, says, body, short, _ = TEMPLATES[t]
    body, short = body.format(**consts), short.format(**consts)
    ref = _define(name, arg, body)
    rng = random.Random(f"funcs/{name}/{sorted(consts.items())}")
    inputs = [_input(arg, rng, consts, i) for i in range(6)]
    if arg == "xs":
        inputs[1] = []  # the empty list, every time
    example, tests = inputs[0], inputs[1:]
    # the near misses these five let through fail an input added from the pool: the problem's own inputs
    # first (its constants' neighbours, a few drawn), then the battery
    pool = [_input(arg, rng, consts, i) for i in range(20)] + list(battery(arg))
    misses = [(b, _define(name, arg, b)) for b in near_misses(body, arg, short)]
    tests += rejecting(ref, [f for _, f in misses], tests, pool)
    # the wrong programs a tester's test is paid for failing where the coder's branches do not disagree
    # (task_code's Code.wrong_programs): the near misses that fail a test, one per function (by their values)
    wrong = {}
    for b, f in misses:
        if any(_fails(f, x, ref(x)) for x in tests):
            wrong.setdefault(tuple(_value(f, x) for x in tests), f"def {name}({arg}):\n    {b}\n")
    text = (f"Write a Python function `{name}({arg})` that returns {says.format(**consts)}.\n"
            f"Example: {name}({example!r}) == {ref(example)!r}")
    return {"name": f"funcs/{name}/" + ",".join(f"{k}={v}" for k, v in consts.items()), "problem": text,
            "kind": "function", "entry_point": name, "reference": f"def {name}({arg}):\n    {body}\n", "setup": "",
            "source": "funcs-unseen" if name in UNSEEN else "funcs-seen",
            "tests": [f"assert {name}({x!r}) == {ref(x)!r}" for x in tests], "near_misses": list(wrong.values())}


@lru_cache(maxsize=None)
def _splits():
    """{split: its problems}. A held-out problem that does what an earlier one does on the battery (a
    training one, or one before it held out) is dropped: count_multiples_above of 2 above 10 and above 11
    are the same function on every integer."""
    rows = {"train": [], "val": [], "test": []}
    # keyed by the template's NAME (not its place in the list): editing the list moves no problem across splits
    for t, (name, arg, _, body, *_rest) in enumerate(TEMPLATES):
        for c in _consts(t):
            split = "test" if name in UNSEEN else split_of(("funcs", name, tuple(sorted(c.items()))))
            ref = _define(name, arg, body.format(**c))
            rows[split].append((make(t, c), (arg, repr([ref(x) for x in battery(arg)]))))
    seen = set()
    for split in ("train", "val", "test"):
        kept = []
        for r, does in rows[split]:
            if split == "train" or does not in seen:
                kept.append(r)
            seen.add(does)
        random.Random(f"funcs/{split}").shuffle(kept)  # template order would make a prefix one template
        rows[split] = kept
    return rows


def problems(split):
    """Every problem of a split, in a fixed shuffled order: cached, read-only."""
    if split not in ("train", "val", "test"):
        raise ValueError(f"unknown split {split!r}; choose from train, val, test")
    return _splits()[split]
