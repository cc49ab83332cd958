"""Tests for mathcheck.py: math_equal (exact numbers, math_verify in helper processes, threads) and
extract_boxed.

    python -m pytest -q test_mathcheck.py
"""
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

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


def stall(helper):
    """Stop a helper's process (SIGSTOP) and wait until it is stopped: whatever its speed or the machine's
    load, it cannot answer now, so any limit is overrun (a test's verdict must not ride on timing)."""
    os.kill(helper.proc.pid, signal.SIGSTOP)
    while open(f"/proc/{helper.proc.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "T":
        time.sleep(0.01)


def test_math_equal_from_a_worker_thread(monkeypatch):
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
        stall(v)  # (it used to be a 0.1 ms limit, which a warm helper sometimes met)
        assert v.equal("x+1", "1+x", limit=0.2) is False
        assert v.proc is None
        assert v.equal("x+1", "1+x") is True
    finally:
        v.close()
    # the same through the pool: the overrun helper goes back to it and restarts on its next use
    monkeypatch.setattr(mathcheck, "_VERIFIER", mathcheck._VerifierPool(size=1))  # one helper: the one stalled
    assert mathcheck._VERIFIER.equal("x+1", "1+x") is True
    stall(mathcheck._VERIFIER.helpers[0])
    assert mathcheck._VERIFIER.equal("x+1", "1+x", limit=0.2) is False
    assert mathcheck._VERIFIER.equal("x+1", "1+x") is True
    mathcheck._VERIFIER.helpers[0].close()


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


# ---- an answer is ONE value (issue 23) ------------------------------------------------------------
# Each of these was accepted: math_verify reads the last side of an equation, drops a percent sign and
# sums numbers that stand side by side. Checked both ways round (the tool-vs-reasoner check is symmetric).
# (`1234%` against 1234 was here too: since issue 31 a percent is x or x/100, as MATH's and Qwen's graders read it)
NOT_ONE_VALUE = [("1233 = 1234", "1234"), ("x = 1233 = 1234", "1234"), ("x = 1233 = 1234", "x = 1234"), ("2x+1 = 7", "7"),
                 ("1 2 3 4", "10"), ("4 6", "10"), (r"1\ 2\ 3\ 4", "10"), (r"1\quad 2\quad 3\quad 4", "10"), (r"1 \; 2 \; 3 \; 4", "10")]
# ... while every form of the right value stays right (all accepted before; `x = 7` is the value 7)
ONE_VALUE = [("x = 7", "7"), ("x=7", "x = 7"), ("x_{1} = 7", "7"), ("x = -7", "-7"), ("f(x) = x^2", "x^2"), (r"\theta = 7", "7"),
             ("x = 3, y = 4", "(3,4)"), ("y - 2x = 1", "y = 2x+1"), ("y^2+x^2=1", "x^2+y^2=1"),
             ("50%", r"50\%"), ("0.5", r"50\%"), ("1+2+3+4", "10"), (r"\boxed{x = 7}", "7"), ("1 2 3 4", "1 2 3 4")]


@pytest.mark.parametrize("pred, gold", NOT_ONE_VALUE)
def test_an_answer_is_one_value_not_a_chain_a_percent_or_a_list(pred, gold):
    mathcheck._verified.cache_clear()
    assert mathcheck.math_equal(pred, gold) is False and mathcheck.math_equal(gold, pred) is False


def test_every_form_of_the_right_value_still_counts():
    mathcheck._verified.cache_clear()
    for p, g in EQUAL + ONE_VALUE:
        assert mathcheck.math_equal(p, g) and mathcheck.math_equal(g, p), (p, g)


# ---- no verdict is not a wrong verdict (issue 23) --------------------------------------------------

def test_a_stalled_helper_is_not_remembered_as_wrong(monkeypatch):
    """A helper that stalls gives no verdict: that call says False, but the pair is asked again next time
    (it used to be cached as wrong for the rest of the run)."""
    pool = mathcheck._VerifierPool(size=1)
    monkeypatch.setattr(mathcheck, "_VERIFIER", pool)
    mathcheck._verified.cache_clear()
    try:
        assert mathcheck.math_equal("a+b", "b+a") is True  # starts the one helper
        stall(pool.helpers[0])
        with monkeypatch.context() as m:
            m.setattr(mathcheck, "VERIFY_LIMIT", 0.2, raising=False)  # (so the stalled call ends soon)
            assert mathcheck.math_equal("x+1", "1+x") is False  # no verdict in time: not right, this once
        assert mathcheck.math_equal("x+1", "1+x") is True  # a fresh helper answers; nothing was cached
        assert mathcheck.math_equal("x+1", "x-1") is False  # a definite "no" ...
        monkeypatch.setattr(pool, "verdict", lambda *a, **k: pytest.fail("asked again"), raising=False)
        monkeypatch.setattr(pool, "equal", lambda *a, **k: pytest.fail("asked again"))
        assert mathcheck.math_equal("x+1", "x-1") is False  # ... is cached
        assert mathcheck.math_equal("x+1", "1+x") is True  # and so is a definite "yes"
    finally:
        for h in pool.helpers:
            h.close()
        mathcheck._verified.cache_clear()


def helper_reply(verify):
    """The reply of a helper (mathcheck._serve, CPU budget 0.3 s a request) whose math_verify is `verify`
    (Python source of a function of (pred, gold)), to one request."""
    here = os.path.dirname(os.path.abspath(mathcheck.__file__))
    code = (f"import sys, time; sys.path.insert(0, {here!r}); import mathcheck as M; M.VERIFY_TIMEOUT = 0.1; "
            f"fast = M._verify_here; slow = {verify}; M._verify_here = lambda p, g: fast(p, g) if p == '1' else slow(p, g); "
            "M._serve()")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.stdin.write('["x+1", "1+x"]\n')
        proc.stdin.flush()
        reply = []
        t = threading.Thread(target=lambda: reply.append(proc.stdout.readline().strip()), daemon=True)
        t.start()
        t.join(120)  # a bound for a broken helper only: every case here answers in seconds
        return reply
    finally:
        proc.kill()
        proc.wait()


def test_a_helper_out_of_time_says_no_verdict_rather_than_no():
    """math_verify's own timeouts used to come back as 0 ("not equal"): under load a slow parse would be
    cached as a wrong answer. The helper's time per request is one CPU timer; running out of it (a parse
    that burns CPU without end) is its own reply, '?' (the caller caches it as wrong: CPU time is the
    same on every machine; test_out_of_cpu_is_cached_as_wrong)."""
    assert helper_reply("lambda p, g: [0 for _ in iter(int, 1)]") == ["?"]


def test_a_loaded_machine_is_not_a_slow_answer():
    """The limit counts the helper's CPU time, not wall time: a request that waits (as one does on a loaded
    machine, where the helper gets a sliver of a core) 4x its CPU budget and then answers keeps its verdict.
    A wall-clock alarm (ITIMER_REAL, as before) says '?' here: the reward would depend on the machine."""
    assert helper_reply("lambda p, g: (time.sleep(1.2), True)[1]") == ["1"]


# ---- right answers the usual graders accept (issue 31) --------------------------------------------
# Each of these was scored wrong: a percent against its number, a segment or angle named by more than one
# letter, two values joined by "or", a dollar sign, LaTeX thousands separators. Checked both ways round.
GRADERS_ACCEPT = [(r"25\%", "25"), ("25%", "25"), ("50", r"50\%"), (r"1234 \%", "1234"), (r"12.5\%", "0.125"),
                  (r"\frac{1}{2}\%", "0.005"), ("AB = 5", "5"), ("BC=12", "12"), ("x_1 = 3", "3"), ("ABCD = 20", "20"),
                  (r"\angle A = 30^\circ", "30"), (r"\angle ABC = 30^{\circ}", "30"), (r"m\angle A = 30", "30^\circ"),
                  (r"n = 2 \text{ or } n = 3", "2, 3"), ("n = 2 or n = 3", "2, 3"), (r"2 \text{ or } 3", "2, 3"),
                  (r"\$18.90", "18.90"), (r"$\$18.90$", "18.9"), (r"\$1{,}000", "1000"),
                  (r"1\,000", "1000"), (r"1{,}000", "1000"), (r"1\,234\,567.5", "1234567.5"), (r"-1{,}000", "-1000")]
# ... while each of their near misses stays wrong: a chain, a different value, numbers side by side,
# a percent that is neither x nor x/100, a separator that does not group by thousands
GRADERS_REJECT = [("AB = 5 = 6", "6"), ("AB = 5 = 6", "5"), ("AB = 5", "6"), ("BC=12", "13"), ("x = 7 = 8", "8"),
                  (r"\angle A = 30^\circ", "60"), (r"\angle A = 30 = 60", "60"), ("ABCDEFG = 20", "20"),
                  (r"25\%", "26"), (r"25\%", "0.26"), (r"25\%", "2500"), ("25%", r"0.25\%"), (r"50\%", "5"), ("50%%", "50"),
                  (r"1\,000", "1"), (r"1{,}000", "1"), (r"1\,00", "100"), (r"1{,}00", "100"), (r"1\,0000", "10000"),
                  (r"\$18.90", "18.9 0"), (r"\$18.90", "18.91"), (r"\$18 90", "1890"), ("$5$ and $6$", "6"),
                  (r"n = 2 \text{ or } n = 3", "2"), (r"n = 2 \text{ or } n = 3", "3"), (r"2 \text{ or } 3", "2, 4"),
                  (r"1233 \text{ or } 1234", "1234"), ("1233 or 1234", "1234")]

# The forms compose (issue 39): each was right alone (`1\,000`, `AB = 5`), but these, a name with another
# form, were all scored wrong. Checked both ways round.
COMPOSED_ACCEPT = [(r"x = 1\,000", "1000"), (r"n = 12\,345", "12345"), (r"x = 1{,}000", "1000"), ("x = 1,000", "1000"),
                   (r"x = -1\,234\,567.5", "-1234567.5"), (r"x = 1\,000", "x = 1000"), (r"\overline{AB} = 5", "5"),
                   ("|AB| = 5", "5"), (r"\text{Area} = 12", "12"), (r"\mathrm{Area}=12", "12"),
                   (r"\text{Area} = 1\,200", "1200"), (r"\overline{AB} = \frac{1}{2}", "0.5"), (r"|AB| = 25\%", "0.25"),
                   (r"x = 1\,000, y = 2\,000", "(1000, 2000)")]
# ... while their near misses stay wrong: a chain, a different value, a separator that does not group by
# thousands, two different values for one answer
COMPOSED_REJECT = [(r"x = 1\,00", "100"), (r"x = 1{,}0000", "10000"), (r"x = 1\,000", "1"), (r"x = 1\,000", "1001"),
                   (r"n = 12\,345", "12346"), (r"\overline{AB} = 5 = 6", "6"), (r"\overline{AB} = 5", "6"),
                   ("|AB| = 6", "5"), ("|AB| = 5 = 6", "5"), (r"\text{Area} = 12", "120"), (r"\text{Area} = 12 = 13", "13"),
                   (r"x = 1\,000, y = 2\,000", "1000"), (r"\overline{AB} = 5, |AB| = 6", "5"), ("AB = 5, AB = 6", "6"),
                   (r"x = 1\,000 \, 2", "1000"), (r"\overline{ABCDEFG} = 5", "5"), (r"\text{Area} = 12\,3", "123")]


@pytest.mark.parametrize("pred, gold", GRADERS_ACCEPT + COMPOSED_ACCEPT)
def test_the_graders_forms_of_the_right_value_count(pred, gold):
    assert mathcheck.math_equal(pred, gold) is True and mathcheck.math_equal(gold, pred) is True


@pytest.mark.parametrize("pred, gold", GRADERS_REJECT + COMPOSED_REJECT)
def test_near_misses_of_the_graders_forms_stay_wrong(pred, gold):
    assert mathcheck.math_equal(pred, gold) is False and mathcheck.math_equal(gold, pred) is False


def test_out_of_cpu_is_cached_as_wrong(monkeypatch):
    """Running out of the helper's CPU budget is deterministic (CPU time, not wall time: issue 31), so that
    answer is cached as wrong: the K samples of a group that repeat it do not each pay the budget again (it
    was asked again on every call, 13-15 s each for 9^{9^{9}}). A stall or a dead helper stays uncached
    (test_a_stalled_helper_is_not_remembered_as_wrong). The budget is the caller's VERIFY_TIMEOUT, here 0.02
    CPU-s a step, which this power tower (seconds of CPU) overruns on any machine."""
    monkeypatch.setattr(mathcheck, "VERIFY_TIMEOUT", 0.02)
    pool = mathcheck._VerifierPool(size=1)
    monkeypatch.setattr(mathcheck, "_VERIFIER", pool)
    mathcheck._verified.cache_clear()
    asked, real = [], pool.verdict
    monkeypatch.setattr(pool, "verdict", lambda *a, **k: asked.append(a) or real(*a, **k))
    try:
        assert mathcheck.math_equal("9^{9^{9}}", "5") is False
        assert mathcheck.math_equal("9^{9^{9}}", "5") is False
        assert len(asked) == 1  # the helper was asked once
        assert pool.helpers[0].proc.poll() is None  # and ran out of CPU, answering '?': it was not killed
    finally:
        for h in pool.helpers:
            h.close()
        mathcheck._verified.cache_clear()


def test_a_degenerate_answer_is_judged_in_linear_time():
    """RL collapses into repetition: an answer of thousands of spaces or `or`s reached _clean's searches,
    which started over at every position of a whitespace run (quadratic: 0.8 CPU-s at 5,000 characters,
    in the trainer's process, holding the GIL for every env thread). An answer far past MAX_ANSWER is no
    answer before any search. CPU time, not wall time, with a margin of ~100x: load does not change it."""
    for junk in ("a" + " " * 40000 + "=", "1" + " or" * 20000, "x" + "\\quad " * 8000 + "=", "$" * 40000 + "7"):
        t = time.process_time()
        assert mathcheck.math_equal(junk, "7") is False and mathcheck.math_equal("7", junk) is False
        assert time.process_time() - t < 2.0, junk[:20]


# ---- a segment's name has three spellings (issue 48) ----------------------------------------------
# `|AB| = 5` against the gold `AB = 5` was wrong: an equation against an equation keeps its names (`x = 5`
# is not `y = 5`), and math_verify read |AB| as Abs(A*B), another name than AB. Bars or a bar over 2-4
# capitals are the length of segment (or polygon) AB, which `AB = 5` names as well: one name, three
# spellings. Checked both ways round.
SAME_NAME = [("|AB| = 5", "AB = 5"), ("|AB|=5", "AB=5"), ("| AB | = 5", "AB = 5"), (r"\overline{AB} = 5", "AB = 5"),
             (r"\overline{AB} = 5", "|AB| = 5"), ("|AB| = 5", r"AB = \frac{10}{2}"), ("|ABCD| = 20", "ABCD = 20"),
             ("|AB| = 5, |CD| = 6", "AB = 5, CD = 6"), ("|AB| = 5", "5"),  # (the last: as before, the name dropped)
             ("5 = |AB|", "AB = 5"), (r"5 = \overline{AB}", "AB = 5"), ("5 = |AB|", "|AB| = 5")]  # the name on the right
# ... while another value, or another name, stays wrong (each as before): |x| = 5 is x = 5 or -5, and |A| may
# be a set's size, so bars around one letter are not a length
OTHER_NAME = [("|AB| = 6", "AB = 5"), ("|AB| = 5", "AB = 6"), (r"\overline{AB} = 6", "|AB| = 5"), ("|AB| = 5", "CD = 5"),
              ("|AB| = 5", "|CD| = 5"), (r"\overline{AB} = 5", "CD = 5"), ("AB = 5", "CD = 5"), ("|AB| = 5", "x = 5"),
              ("|x| = 5", "x = 5"), ("|A| = 5", "A = 5"), ("|AB| = 5, |CD| = 6", "AB = 5, CD = 7"),
              ("|AB| = 5 = 6", "AB = 6"), ("5 = |AB|", "AB = 6"), ("5 = |AB|", "CD = 5"), ("5 = |x|", "x = 5")]


@pytest.mark.parametrize("pred, gold", SAME_NAME)
def test_bars_and_overline_spell_the_segments_name(pred, gold):
    assert mathcheck.math_equal(pred, gold) is True and mathcheck.math_equal(gold, pred) is True


@pytest.mark.parametrize("pred, gold", OTHER_NAME)
def test_another_value_or_another_name_stays_wrong(pred, gold):
    assert mathcheck.math_equal(pred, gold) is False and mathcheck.math_equal(gold, pred) is False
