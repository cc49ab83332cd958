"""Math answer checking: is a model's answer the same value as the gold answer?

extract_boxed(text) -> the content of the last \\boxed{...} in a completion, or None.
math_equal(pred, gold) -> bool. An answer is ONE value: `x = 7` is the value 7, but a chain `1233 = 1234`
or numbers side by side `1 2 3 4` are not the gold's value (math_verify alone would take the last side or
sum the list). The forms the usual graders (MATH's, Qwen's) accept count: a percent `25%` is 25 or 0.25
(not 2500); a short name `AB = 5`, `x_1 = 5`, `\\angle A = 30^\\circ` (1-4 letters), `\\overline{AB} = 5`,
`|AB| = 5`, `\\text{Area} = 12` names the value (`|AB|` and `\\overline{AB}` are the name AB, a length);
`n = 2 \\text{ or } n = 3` is `2, 3`; `\\$` and `$` are dropped; `1\\,000` and `1{,}000` are 1000, after a
name too (`x = 1\\,000`). Plain numbers (0.5, 1/2, \\frac{1}{2}, 1,000, 50%) compare exactly in-process;
anything else goes to math_verify in a helper process with a hard limit on its CPU time (safe from any
thread, cannot hang a caller, and the same verdict on a loaded machine as on an idle one); a pool of
helpers serves threads at once.
Verdicts are cached, and so is a request that ran out of its CPU budget (as wrong: CPU time is the same on
every machine, so it would run out again); a helper that stalls past the wall bound or dies gives no
verdict: that call says False, and the pair is asked again next time.

    python -m pytest -q test_mathcheck.py
"""
import atexit
import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
from fractions import Fraction
from functools import lru_cache

import sandbox

HERE = os.path.dirname(os.path.abspath(__file__))
# CPU seconds per math_verify step (parse gold, parse answer, compare): a request has 3 of them. CPU time,
# not wall time, so that a verdict is the same on an idle machine and a loaded one (a reward must not
# depend on what else runs); a pathological parse burns CPU and is cut all the same.
VERIFY_TIMEOUT = 3
VERIFY_LIMIT = 60  # wall seconds a caller waits for a helper: only for a hang in C code, where no signal lands
# math_verify helper processes at most (made on demand; each holds sympy, ~100 MB): one per core, up to 8
VERIFY_HELPERS = min(8, sandbox.CORES)
MAX_ANSWER = 500  # characters: an "answer" longer than this is not one (data.py skips such records)


def extract_boxed(text):
    """Content of the last \\boxed{...} (nested braces allowed; also `\\boxed 5`), or None."""
    if not isinstance(text, str):
        return None
    m = None
    for m in re.finditer(r"\\(?:boxed|fbox)", text):
        pass
    if m is None:
        return None
    j = m.end()
    while j < len(text) and text[j].isspace():
        j += 1
    if j < len(text) and text[j] != "{":
        tok = re.match(r"[^\s$]+", text[j:])
        return tok.group(0) if j > m.end() and tok else None  # \boxed 5, but not \boxedfoo
    depth = 0
    for k in range(j, len(text)):
        depth += {"{": 1, "}": -1}.get(text[k], 0)
        if depth == 0:
            return text[j + 1:k].strip()
    return None  # unbalanced, or nothing after it


def _clean(s):
    if isinstance(s, (int, float, Fraction)) and not isinstance(s, bool):
        s = str(s)
    if not isinstance(s, str):
        return ""
    s = s.strip()
    inner = extract_boxed(s) if s.startswith("\\boxed") else None
    s = (inner if inner is not None else s).replace("\\$", "").replace("$", "").strip()  # \$18.90 is 18.90; and
    # no math mode left for math_verify to pick one value out of (`$5$ and $6$` would read as 6)
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("\\!", "").replace("\\%", "%")
    s = re.sub(r"\^\s*(\{\s*\\circ\s*\}|\\circ)$", "", s)  # 30^\circ is 30 (as MATH's grader reads it)
    s = re.sub(rf"(?:{SPACE})?(?:\\(?:text|textrm|mbox|mathrm)\{{\s*or\s*\}}|\bor\b)(?:{SPACE})?", ", ", s)  # 2 or 3: 2, 3
    # the value of each `name = value` part is read as a bare answer is: `x = 1\,000, y = 2\,000` is x = 1000, y = 2000
    return ", ".join(_thousands(_segment(part)) for part in re.split(rf",\s*(?={NAME}\s*{EQ})", s))


def _segment(s):
    """`|AB| = 5` and `\\overline{AB} = 5` are `AB = 5`: bars or a bar over 2-4 capitals, as a name, spell
    the length of segment (or polygon) AB, which the bare letters name too; an equation against an equation
    keeps its names, so one spelling must not be another name. Not one letter: |x| = 5 is x = 5 or -5.
    The name may stand on either side: `5 = |AB|` is `5 = AB`."""
    seg = r"(?:\|\s*([A-Z]{2,4})\s*\||\\overline\{\s*([A-Z]{2,4})\s*\})"
    s = re.sub(rf"^\s*{seg}(?=\s*{EQ})", lambda m: m.group(1) or m.group(2), s)
    return re.sub(rf"({EQ}\s*){seg}\s*$", lambda m: m.group(1) + (m.group(2) or m.group(3)), s)


def _thousands(s):
    """1,000, 1\\,000 and 1{,}000 are 1000 (a thousands separator, not a tuple), also after `name =`;
    anything else as it was."""
    name, value = re.fullmatch(rf"((?:{NAME}\s*{EQ}\s*)?)(.*)", s, re.S).groups()
    t = re.sub(r"\\,|\{,\}", ",", value)  # 1\,000 and 1{,}000 are LaTeX's 1,000
    return name + t.replace(",", "") if re.fullmatch(r"[-+]?\d{1,3}(,\d{3})+(\.\d+)?%?", t) else s


def _number(s):
    """(exact value, is a percent) of a plain number, a/b or \\frac{a}{b}, each maybe a percent (`50%`: 50,
    True); None for anything else."""
    percent = s.endswith("%")
    s = s[:-1].rstrip() if percent else s
    m = re.fullmatch(r"([-+]?)\\frac\{(\d+)\}\{(\d+)\}", s)
    if m:
        s = f"{m.group(1)}{m.group(2)}/{m.group(3)}"
    if len(s) > 60 or not re.fullmatch(r"[-+]?(\d+(\.\d*)?|\.\d+)(/\d+)?", s):
        return None
    try:
        return Fraction(s), percent
    except (ValueError, ZeroDivisionError):
        return None


# what `NAME = value` may name: x, x_1, \theta, f(x), a segment or polygon AB, ABCD (1-4 letters), \angle A,
# a segment's length \overline{AB} or |AB|, a word \text{Area} (also \textrm, \mathrm, \mbox)
NAME = (r"(?:(?:m\s*)?\\angle\s*[A-Za-z]{1,3}|\\overline\{\s*[A-Za-z]{1,4}\s*\}|\|\s*[A-Za-z]{1,4}\s*\|"
        r"|\\(?:text|textrm|mathrm|mbox)\{\s*[A-Za-z][A-Za-z ]{0,19}\}|[A-Za-z]{1,4}|\\[A-Za-z]+)(?:_\{?\w+\}?)?(?:\([^()=]*\))?")
EQ = r"(?<![<>!=])=(?!=)"  # an equals sign (not <=, >=, !=, ==)
SPACE = r"(?:\s|~|\\[ ,;:]|\\q?quad)+"  # plain and LaTeX spacing


def _several(s):
    """Does `s` state more than one value: numbers side by side (`1 2 3 4`) or a chain `x = 1233 = 1234`?"""
    return bool(re.search(rf"\d{SPACE}\d", s)) or any(len(re.findall(EQ, part)) > 1 for part in s.split(","))


def _unnamed(s):
    """`x = 7` states the value 7 (and `x = 3, y = 4` the values 3, 4): the names dropped."""
    return re.sub(rf"(^|,)\s*{NAME}\s*{EQ}", r"\1", s).strip()


def _verify_here(pred, gold):
    """math_verify, with its own timeouts off: the helper's one CPU timer per request bounds it (_serve)."""
    from math_verify import parse, verify
    wrap = lambda s: s if ("$" in s or "\\boxed" in s) else f"${s}$"
    g = parse(wrap(gold), parsing_timeout=None)
    p = parse(wrap(pred), parsing_timeout=None)
    return bool(g and p and verify(g, p, timeout_seconds=None))


class _OutOfTime(BaseException):  # not an Exception: math_verify catches those and answers "not equal"
    pass


def _out_of_time(signum, frame):
    raise _OutOfTime


def _serve(budget=None):
    """The helper process: one JSON [pred, gold] per stdin line, one line back: 1 (equal), 0 (not equal)
    or ? (the request ran out of its CPU time, 3 x `budget` seconds, default VERIFY_TIMEOUT)."""
    budget = VERIFY_TIMEOUT if budget is None else budget
    out, sys.stdout = sys.stdout, sys.stderr  # stray prints must not corrupt the protocol
    _verify_here("1", "1")  # import and warm up before "ready": startup is not a timeout
    signal.signal(signal.SIGPROF, _out_of_time)  # signals land on the main thread: this one
    print("ready", file=out, flush=True)
    for line in sys.stdin:
        try:
            signal.setitimer(signal.ITIMER_PROF, 3 * budget)  # this process's CPU time (user + system)
            reply = int(_verify_here(*json.loads(line)))
        except _OutOfTime:
            reply = "?"
        except Exception:  # math_verify could not read it: that is an answer, not a stall
            reply = 0
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
        print(reply, file=out, flush=True)


class _Verifier:
    """math_verify in a helper process: its CPU timer works there (on that process's main thread), whichever
    thread calls us, and a parse that hangs inside C code (where no signal lands) is bounded too: past
    `limit` there is no verdict and the helper is killed, to be restarted on next use. One request at a
    time (its lock); _VerifierPool spreads threads over several."""

    def __init__(self):
        self.lock, self.proc, self.pid = threading.Lock(), None, None
        atexit.register(self.close)

    def close(self):
        if self.proc is not None and self.pid == os.getpid():
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def _read(self, limit):
        if not select.select([self.proc.stdout], [], [], limit)[0]:
            raise TimeoutError
        return self.proc.stdout.readline().strip()

    def equal(self, pred, gold, limit=None):
        return self.verdict(pred, gold, limit) is True

    def verdict(self, pred, gold, limit=None):
        """True or False (also when the request ran out of its CPU budget: the same on every machine, so
        the same next time), or None for no verdict: stalled past `limit`, dead, or not started."""
        with self.lock:  # one request at a time on the one pipe
            try:
                if self.proc is None or self.pid != os.getpid() or self.proc.poll() is not None:
                    self.proc, self.pid = None, os.getpid()  # a forked child never talks to its parent's helper
                    self.proc = subprocess.Popen(
                        [sys.executable, "-c", f"import sys; sys.path.insert(0, {HERE!r}); import mathcheck; mathcheck._serve({VERIFY_TIMEOUT!r})"],
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                    if self._read(120) != "ready":
                        raise RuntimeError("math_verify helper did not start")
                self.proc.stdin.write(json.dumps([pred, gold]) + "\n")
                self.proc.stdin.flush()
                reply = self._read(VERIFY_LIMIT if limit is None else limit)
                if reply not in ("1", "0", "?"):  # "": it died mid-request
                    raise RuntimeError(f"math_verify helper said {reply!r}")
                return reply == "1"
            except Exception:
                self.close()
                return None


class _VerifierPool:
    """Up to `size` _Verifier helpers, so that threads verify at once: a call takes a free one (the last
    given back: warm), else makes one while fewer than `size` exist, else waits, and gives it back after.
    A helper that died or overran restarts its process on next use (_Verifier.verdict); each one closes its
    process at exit. A forked child starts with an empty pool (and never talks to its parent's helpers)."""

    def __init__(self, size=VERIFY_HELPERS):
        self.size = max(1, size)
        self._reset()
        os.register_at_fork(after_in_child=self._reset)  # the child lacks the threads holding lock/helpers

    def _reset(self):
        self.cond, self.helpers, self.free = threading.Condition(), [], []

    def equal(self, pred, gold, **kw):
        return self.verdict(pred, gold, **kw) is True

    def verdict(self, pred, gold, **kw):
        with self.cond:
            while not self.free and len(self.helpers) >= self.size:
                self.cond.wait()
            if not self.free:  # every helper is busy: a new one (so len(helpers) > 1 means calls overlapped)
                self.helpers.append(_Verifier())
                self.free.append(self.helpers[-1])
            h = self.free.pop()
        try:
            return h.verdict(pred, gold, **kw)  # never raises
        finally:
            with self.cond:
                if any(h is x for x in self.helpers):  # not one taken before a fork
                    self.free.append(h)
                    self.cond.notify()


_VERIFIER = _VerifierPool()


class _NoVerdict(Exception):
    pass


@lru_cache(maxsize=1 << 16)  # K samples of one problem often give the same answer
def _verified(pred, gold):
    v = _VERIFIER.verdict(pred, gold)
    if v is None:  # raised, not returned: lru_cache keeps no exception, so the pair is asked again next time
        raise _NoVerdict
    return v


def math_equal(pred, gold):
    """Is `pred` the same value as `gold`? Each must state one value (see the module docstring). Plain
    numbers (0.5, 1/2, \\frac{1}{2}, 1,000, 50%) compare exactly here; anything else goes to math_verify in
    a helper process (see _Verifier; up to VERIFY_HELPERS threads at once, see _VerifierPool). Safe from
    any thread; never raises; at most 9 s of the helper's CPU time for a pathological input (VERIFY_LIMIT,
    60 s of wall time, for one that hangs in C code; plus any wait for a free helper); False when the
    helper gives no verdict (stalled or dead), without caching it; out of CPU is wrong, and cached."""
    try:  # far past MAX_ANSWER is no answer, before any search (_clean's are quadratic on whitespace runs)
        if any(isinstance(x, str) and len(x.strip()) > 2 * MAX_ANSWER for x in (pred, gold)):
            return False
        p, g = _clean(pred), _clean(gold)
        if not p or not g or len(p) > MAX_ANSWER or len(g) > MAX_ANSWER:  # an "answer" that long is not one
            return False
        if p == g:
            return True
        if _several(p) or _several(g):
            return False
        if bool(re.search(EQ, p)) != bool(re.search(EQ, g)):  # an equation against a value: only `x = 7` is one
            p, g = _unnamed(p), _unnamed(g)
            if re.search(EQ, p) or re.search(EQ, g):
                return False
        a, b = _number(p), _number(g)
        if a is not None and b is not None:
            (x, x_pct), (y, y_pct) = a, b
            if x_pct == y_pct:
                return x == y
            x, y = (x, y) if x_pct else (y, x)  # x%: the percent side
            return y in (x, x / 100)  # 25% is 25 or 0.25, as MATH's and Qwen's graders take it; not 2500
        if ("%" in p) != ("%" in g):  # a percent of a non-number: math_verify would just drop the sign
            return False
        return _verified(p, g)
    except Exception:
        return False
