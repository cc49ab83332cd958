"""Tests for mathcheck.py: math_equal (exact numbers, math_verify in helper processes, threads) and
extract_boxed.

    python -m pytest -q test_mathcheck.py
"""
import threading
from concurrent.futures import ThreadPoolExecutor

import data
import mathcheck

EQUAL = [("0.5", "1/2"), (r"\frac{1}{2}", "0.5"), (r"\dfrac{1}{2}", "1/2"), ("1,000", "1000"), ("42", "$42$"),
         (r"\boxed{7}", "7"), (r"\frac{2}{4}", r"\frac{1}{2}"), ("-3", "-3.0"), (r"\frac{\sqrt{2}}{2}", r"\sqrt{2}/2"),
         ("(x+1)^2", "x^2+2x+1"), (r"2\pi", r"\pi \cdot 2")]
WRONG = [("0.5", "1/3"), ("3", "4"), (r"\frac{1}{2}", "2"), ("1,001", "1000"), ("x+1", "x-1"), (r"\pi", "3.14159"),
         ("", "1"), ("7", "")]
GARBAGE = [(None, "1"), ("1", None), (object(), 5), (r"\frac{", "}}}"), ("1e99999999", "1"), ("(" * 300, "1"),
           ("x" * 10_000, "x"), (b"1", "1"), ([1], "1")]


def test_math_equal_accepts_equivalent_and_rejects_wrong():
    for p, g in EQUAL:
        assert mathcheck.math_equal(p, g), (p, g)
    for p, g in WRONG:
        assert not mathcheck.math_equal(p, g), (p, g)


def test_math_equal_never_raises_on_garbage():
    for p, g in GARBAGE:
        assert mathcheck.math_equal(p, g) is False


def test_math_equal_from_a_worker_thread():
    mathcheck._verified.cache_clear()
    out = {}

    def work():
        out["eq"] = [mathcheck.math_equal(p, g) for p, g in EQUAL]
        out["wrong"] = [mathcheck.math_equal(p, g) for p, g in WRONG + GARBAGE]
    t = threading.Thread(target=work)
    t.start()
    t.join(120)
    assert out["eq"] == [True] * len(EQUAL) and not any(out["wrong"])
    # an overrunning call is answered False and its helper process replaced, not waited for
    v = mathcheck._Verifier()
    try:
        assert v.equal("x+1", "1+x") is True
        assert v.equal("x+1", "1+x", limit=1e-4) is False
        assert v.proc is None
        assert v.equal("x+1", "1+x") is True
    finally:
        v.close()
    # the same through the pool: the overrun helper goes back to it and restarts on its next use
    assert mathcheck._VERIFIER.equal("x+1", "1+x", limit=1e-4) is False
    assert mathcheck._VERIFIER.equal("x+1", "1+x") is True


def test_math_equal_from_threads_runs_in_several_helpers_at_once(monkeypatch):
    """Threads verify at once, each in a helper of the pool (not one after another behind one lock), and
    get the answers of one-at-a-time calls."""
    pairs = [("(x+1)^2", "x^2+2x+1"), (r"2\pi", r"\pi \cdot 2"), ("x+1", "x-1"), (r"\frac{\sqrt{2}}{2}", r"\sqrt{2}/2"),
             ("a+b", "b+a"), ("x^2", "x^3")]
    mathcheck._verified.cache_clear()
    want = [mathcheck.math_equal(p, g) for p, g in pairs]
    assert want == [True, True, False, True, True, False]
    pool = mathcheck._VerifierPool(size=3)
    monkeypatch.setattr(mathcheck, "_VERIFIER", pool)
    mathcheck._verified.cache_clear()
    start = threading.Barrier(len(pairs))

    def one(pair):
        start.wait()
        return mathcheck.math_equal(*pair)
    try:
        with ThreadPoolExecutor(len(pairs)) as ex:
            got = list(ex.map(one, pairs))
        assert got == want
        # a second helper is made only while every other one is busy: calls overlapped; never over the cap
        assert 1 < len(pool.helpers) <= 3
        assert len(pool.free) == len(pool.helpers)  # all given back
    finally:
        for h in pool.helpers:
            h.close()
        mathcheck._verified.cache_clear()


def test_extract_boxed():
    assert mathcheck.extract_boxed(r"so \boxed{1} then \boxed{\frac{a}{b^{2}}}.") == r"\frac{a}{b^{2}}"
    assert mathcheck.extract_boxed(r"\boxed{\{1, 2\}}") == r"\{1, 2\}"
    assert mathcheck.extract_boxed(r"answer: \boxed 5$") == "5"
    assert mathcheck.extract_boxed(r"\fbox{x}") == "x"
    for bad in ["no box", r"\boxed{unclosed", r"\boxed", None, 3]:
        assert mathcheck.extract_boxed(bad) is None


def test_data_reexports_the_checker():  # callers (task_math, tests) still say data.math_equal
    assert data.math_equal is mathcheck.math_equal and data.extract_boxed is mathcheck.extract_boxed
