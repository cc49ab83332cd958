"""arith: procedural arithmetic word problems for the math task (`--data arith`), the CPU miniature of
the paper's math workflow. A few sentence templates, two or three operations on 1-3 digit integers,
an integer answer. Multi-digit products keep a tiny model from computing the answer in its head, while
writing the expression (copying the numbers, picking the operators the template implies) is learnable:
the tool agent's job; the reasoner's is to trust a right tool output.

Each instance is seeded by (split, index), and like the games a problem belongs to the split that a
hash of its content names, where content means its VALUE (`canonical`: the expression with commuted
operands sorted, so 93 * 87 + 482, 87 * 93 + 482 and another template's 482 + 87 * 93 are one problem)
as well as its spelling (template, numbers): no held-out problem is ever a training one, whatever the
order of its numbers and the names and items around them. Within val and test no value repeats either
(index i is the i-th new one).

`--data graded` (the real model's set, `--preset cpu-real-math`) adds three one-operation templates
(ONE_OP: a sum, a difference, a product) before the five: graded difficulty, where a 135M model's
programs are right often enough for GRPO to start (docs/measurements.md). Its problems have their own
draws; a value is in the same split in both sets (the value key is shared).

    python -m pytest -q test_envs.py -k arith
"""
import ast
import random
import threading
from functools import lru_cache

from task import MAX_INDEX, SPLIT_SEED, split_of

NAMES = ("Ann", "Ben", "Cara", "Dev", "Eli", "Fay", "Gus", "Hana")
ITEMS = ("pens", "cards", "eggs", "coins", "books", "apples", "shells", "stamps")
TEMPLATES = [  # (text, the expression as a program writes it, ranges of a, b, c[, d])
    ("{n} buys {a} boxes of {b} {i} and gives away {c} {i}. How many {i} are left?",
     "{a} * {b} - {c}", ((11, 99), (11, 99), (1, 99))),
    ("{n} has {a} {i} and buys {b} bags of {c} {i}. How many {i} does {n} have now?",
     "{a} + {b} * {c}", ((1, 999), (11, 99), (11, 99))),
    ("A shop sells {a} {i} a day for {b} days and {c} more on Sunday. How many {i} does it sell?",
     "{a} * {b} + {c}", ((11, 99), (11, 99), (1, 999))),
    ("{n} had {a} {i}, lost {b} of them, then the rest grew {c} times. How many {i} are there now?",
     "({a} - {b}) * {c}", ((100, 999), (1, 99), (2, 9))),
    ("{n} fills {a} rows of {b} {i} and {c} rows of {d} {i}. How many {i} in all?",
     "{a} * {b} + {c} * {d}", ((11, 99), (11, 99), (2, 9), (11, 99))),
]

ONE_OP = [  # graded's easy third: one operation, numbers a 135M model cannot add or multiply in its head
    ("{n} has {a} {i} and buys {b} more. How many {i} does {n} have now?", "{a} + {b}", ((100, 999), (100, 999))),
    ("{n} had {a} {i} and gave away {b} of them. How many {i} are left?", "{a} - {b}", ((500, 999), (100, 499))),
    ("{n} buys {a} boxes of {b} {i}. How many {i} does {n} buy?", "{a} * {b}", ((11, 99), (11, 99))),
]
SETS = {"arith": TEMPLATES, "graded": ONE_OP + TEMPLATES}


def expression(t, nums, kind="arith"):
    """The template's expression with its numbers: what a right tool program prints."""
    return SETS[kind][t][1].format(**nums)


def value(expr):
    """The integer an expression of ours evaluates to (templates, the warm-up's misreadings): our own text
    over ints, never model output, so eval with no names is exact integer arithmetic."""
    return int(eval(expr, {"__builtins__": {}}))  # noqa: S307 (trusted text)


def answer(t, nums, kind="arith"):
    return value(expression(t, nums, kind))


@lru_cache(maxsize=None)
def _tree(expr):
    return ast.parse(expr.replace("{", "").replace("}", ""), mode="eval").body


def canonical(t, nums, kind="arith"):
    """The value form of a problem: its expression as nested sums of signed terms and products of
    factors, operands of + and * flattened and sorted. Two problems with one value form are one problem
    to whoever writes the program (the order of factors or terms, the template's words aside)."""
    def form(node):
        if isinstance(node, ast.Name):
            return ("n", nums[node.id])
        if isinstance(node.op, ast.Mult):
            return ("*", tuple(sorted(form(x) for x in flat(node, ast.Mult))))
        return ("+", tuple(sorted(terms(node, 1))))

    def flat(node, op):  # the operands of a chain of `op`
        if isinstance(node, ast.BinOp) and isinstance(node.op, op):
            return flat(node.left, op) + flat(node.right, op)
        return [node]

    def terms(node, sign):  # (sign, form) of every term of a chain of + and -
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            return terms(node.left, sign) + terms(node.right, -sign if isinstance(node.op, ast.Sub) else sign)
        return [(sign, form(node))]

    return form(_tree(SETS[kind][t][1]))


HELD_OUT = 100_000  # val and test indices below this are distinct by value (index i: the i-th new value)
_held_out = {}  # (kind, split) -> ([draw of index 0, 1, ...], {their canonical forms})
_lock = threading.Lock()  # envs may be made from several threads


def draw(split, index, kind="arith"):
    """(template index, numbers {a, b, c[, d]}, name, item) of instance `index` of `split` of set `kind`."""
    if split not in SPLIT_SEED:
        raise ValueError(f"unknown split {split!r}; choose from {', '.join(SPLIT_SEED)}")
    limit = MAX_INDEX if split == "train" else HELD_OUT
    if not 0 <= index < limit:
        raise ValueError(f"index {index} out of range [0, {limit:_}) for {split}")
    if split == "train":  # training may meet a value twice; held-out sets may not, so they are made in order
        return _draw(split, index, (), kind)
    with _lock:
        made, seen = _held_out.setdefault((kind, split), ([], set()))
        while len(made) <= index:
            t, nums, name, item = _draw(split, len(made), seen, kind)
            seen.add(canonical(t, nums, kind))
            made.append((t, dict(nums), name, item))
        t, nums, name, item = made[index]
    return t, dict(nums), name, item


def _draw(split, index, taken, kind="arith"):
    rng = random.Random(f"{kind}/{SPLIT_SEED[split] + index}")
    templates = SETS[kind]
    while True:  # redraw until value and spelling belong to this split (1 draw in ~1.6 for train, ~100 held out)
        t = rng.randrange(len(templates))
        nums = {k: rng.randint(lo, hi) for k, (lo, hi) in zip("abcd", templates[t][2])}
        if split_of((kind, t, tuple(nums.values()))) == split:
            v = canonical(t, nums, kind)
            if split_of(("arith", v)) == split and v not in taken:
                return t, nums, rng.choice(NAMES), rng.choice(ITEMS)


def problem(split, index, kind="arith"):
    """{"problem", "answer", "template", "numbers"}: the math task's record, plus what made it."""
    t, nums, name, item = draw(split, index, kind)
    return {"problem": SETS[kind][t][0].format(n=name, i=item, **nums), "answer": str(answer(t, nums, kind)),
            "template": t, "numbers": nums}
