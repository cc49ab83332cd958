"""arith: procedural arithmetic word problems for the math task (`--data arith`), the CPU miniature of
the paper's math workflow. A few sentence templates, two or three operations on 1-3 digit integers,
an integer answer. Multi-digit products keep a tiny model from computing the answer in its head, while
writing the expression (copying the numbers, picking the operators the template implies) is learnable:
the tool agent's job; the reasoner's is to trust a right tool output.

Each instance is seeded by (split, index), and like the games a problem belongs to the split that a
hash of its content (template, numbers) names: no held-out problem is ever a training one, whatever the
names and items around its numbers.

    python -m pytest -q test_envs.py -k arith
"""
import random

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


def expression(t, nums):
    """The template's expression with its numbers: what a right tool program prints."""
    return TEMPLATES[t][1].format(**nums)


def value(expr):
    """The integer an expression of ours evaluates to (templates, the warm-up's misreadings): our own text
    over ints, never model output, so eval with no names is exact integer arithmetic."""
    return int(eval(expr, {"__builtins__": {}}))  # noqa: S307 (trusted text)


def answer(t, nums):
    return value(expression(t, nums))


def draw(split, index):
    """(template index, numbers {a, b, c[, d]}, name, item) of instance `index` of `split`."""
    if split not in SPLIT_SEED:
        raise ValueError(f"unknown split {split!r}; choose from {', '.join(SPLIT_SEED)}")
    if not 0 <= index < MAX_INDEX:
        raise ValueError(f"index {index} out of range [0, {MAX_INDEX:_})")
    rng = random.Random(f"arith/{SPLIT_SEED[split] + index}")
    while True:  # redraw until the content belongs to this split (about 1 draw in 10 for val and test)
        t = rng.randrange(len(TEMPLATES))
        nums = {k: rng.randint(lo, hi) for k, (lo, hi) in zip("abcd", TEMPLATES[t][2])}
        if split_of(("arith", t, tuple(nums.values()))) == split:
            return t, nums, rng.choice(NAMES), rng.choice(ITEMS)


def problem(split, index):
    """{"problem", "answer", "template", "numbers"}: the math task's record, plus what made it."""
    t, nums, name, item = draw(split, index)
    return {"problem": TEMPLATES[t][0].format(n=name, i=item, **nums), "answer": str(answer(t, nums)),
            "template": t, "numbers": nums}
