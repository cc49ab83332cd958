"""The trusted judge of ONE function-style code test: data.run_tests runs this file's source in the
sandbox, after three constants (PROGRAM, ENTRY, PRELUDE), with the secrets (nonce, setup, test) on stdin.

Threat: the program is written by the policy under RL, which will find any way to pass a test without
solving it: read the expected values or the verdict token, print a fake verdict and exit, return an
object whose __eq__/__bool__/__abs__ lie, patch json/builtins/sys in the process that checks, kill it.
So the program and the check never share a process, and the program never holds a secret:
  * each test is one sandbox run of this file (trusted) with the program embedded in its source (not
    a secret). The judge makes itself non-dumpable (a same-uid process can then neither ptrace it nor
    open its /proc/<pid>/mem|fd|environ), then forks BEFORE it reads anything secret.
  * the child closes stdin, points stdout/stderr at /dev/null, keeps only its two pipes, waits until
    the judge has drained stdin (so it cannot race the judge for the test), then runs the program (as
    module "solution", after PRELUDE if the problem's setup starts with it) and serves calls: (args,
    kwargs) in, the return value or the exception's type name and message out, as tagged JSON.
  * the judge reads {nonce, setup, test} from stdin, runs setup + CHECK_HELPERS + the test with the
    entry point (and Solution().<entry point>) bound to proxies that call the child. Replies decode to
    exact builtin types only: None/bool/int/float/str/bytes/complex/list/tuple/dict/set/frozenset;
    anything else (a subclass too) becomes an Opaque, equal to nothing and with no truth value; an
    exception re-raises as its nearest builtin Exception class (else RuntimeError), its message kept.
    So ==, abs, < ... run on plain data in a process the program cannot touch. A call that never
    returns is ended by the sandbox's wall clock, which kills the whole namespace.
  * the judge kills the child (and, in its own PID namespace, every other process it can) and only then
    writes "<nonce> PASS" or "<nonce> FAIL <reason>" as the last line of its stdout; no such line
    (killed, timed out, crashed) is a fail. The nonce stops anything that reaches the host's pipe some
    other way (e.g. /proc/1/fd where the sandbox's init shares our uid) from forging a verdict.
Known limits: arguments are copies, so in-place mutation does not propagate back to the test;
arguments the encoder refuses (a function, an object) fail that test; a generator the program returns
is opaque (not iterable by the test). The setup and the test are trusted data, except tests written by
the tester role: such a test runs in the judge and could forge its own verdict, which gains it nothing
over a test that is trivially true.

    python -m pytest -q test_data.py -k function
"""
import builtins, json, os, sys
SEQ = {list: "l", tuple: "t", set: "s", frozenset: "F"}
MAKE = {"l": list, "t": tuple, "s": set, "F": frozenset}


def enc(v, strict, d=0):
    # JSON for None/bool/str/float/small int; a list [tag, ...] for the rest. strict (the judge's
    # arguments): refuse other types; else (the child's replies) mark them ["?", type name].
    t = type(v)
    if v is None or t is bool or t is str or t is float or t is int and -2 ** 62 < v < 2 ** 62:
        return v
    if t is int:
        return ["i", hex(v)]  # no int/str digit limit for hex
    if d > 200:
        raise ValueError("nested too deeply")
    if t in SEQ:
        return [SEQ[t]] + [enc(x, strict, d + 1) for x in v]
    if t is dict:
        return ["d"] + [enc(x, strict, d + 1) for kv in v.items() for x in kv]
    if t is bytes:
        return ["y", v.hex()]
    if t is complex:
        return ["c", v.real, v.imag]
    if strict:
        raise TypeError(f"a {t.__name__} cannot be passed to the program")
    return ["?", t.__name__[:40]]


class Opaque:
    # a value of a type the judge does not take from the program: equal to nothing, no truth value
    def __init__(self, name):
        self.name = name
    __hash__ = object.__hash__
    def __eq__(self, other):
        return False
    def __ne__(self, other):
        return True
    def __bool__(self):
        raise TypeError(f"a {self.name} returned by the program has no truth value here")
    def __repr__(self):
        return f"<unsupported {self.name}>"


def dec(x, d=0):
    # plain JSON (exact types) -> exact builtin values; anything malformed raises
    t = type(x)
    if x is None or t in (bool, str, int, float):
        return x
    if t is not list or not x or type(x[0]) is not str or d > 200:
        raise ValueError("malformed")
    tag, rest = x[0], x[1:]
    if tag in ("i", "y", "?") and (len(rest) != 1 or type(rest[0]) is not str):
        raise ValueError("malformed")
    if tag == "i":
        return int(rest[0], 16)
    if tag == "y":
        return bytes.fromhex(rest[0])
    if tag == "?":
        return Opaque(rest[0][:40])
    if tag == "c" and len(rest) == 2 and all(type(p) in (int, float) for p in rest):
        return complex(rest[0], rest[1])
    vals = [dec(y, d + 1) for y in rest]
    if tag in MAKE:
        return MAKE[tag](vals)
    if tag == "d" and len(vals) % 2 == 0:
        return dict(zip(vals[::2], vals[1::2]))
    raise ValueError("malformed")


def send(f, obj, dumps=json.dumps):  # bound now: a program that patches json still gets its replies sent
    f.write(dumps(obj).encode() + b"\n")
    f.flush()


def failed(e):
    try:  # its name, and its nearest builtin class: what a test's `except ValueError` sees
        base = next(c for c in type(e).__mro__ if c.__module__ == "builtins")
        return ["err", type(e).__name__, str(e)[:300], base.__name__]
    except BaseException:
        return ["err", "Exception", "?", "Exception"]


def child(rf, wf):
    # runs the program; it holds nothing secret and no way to the host but these two pipes
    if not rf.readline():  # "go": the judge has read all of its stdin
        os._exit(0)
    g, loads = {"__name__": "solution", "__builtins__": builtins}, json.loads
    try:
        if PRELUDE:
            exec(compile(PRELUDE, "prelude.py", "exec"), g)
        exec(compile(PROGRAM, "solution.py", "exec"), g)
        send(wf, ["ok"])
    except BaseException as e:
        send(wf, failed(e))
        os._exit(0)
    while True:
        line = rf.readline()
        if not line:
            os._exit(0)
        try:
            kind, args, kwargs = loads(line)
            fn, cls = g.get(ENTRY), g.get("Solution")
            if (kind == "method" or not callable(fn)) and isinstance(cls, type) and hasattr(cls, ENTRY):
                fn = getattr(cls(), ENTRY)  # LeetCode style: a fresh Solution() per call
            elif not callable(fn):
                raise NameError(f"name {ENTRY!r} is not defined")
            out = ["ok", enc(fn(*dec(args), **dec(kwargs)), False)]
        except BaseException as e:  # SystemExit too: a call that exits is an error, not the end
            out = failed(e)
        send(wf, out)


class Gone(BaseException):  # not an Exception: a test's `except Exception` does not swallow it
    pass


def judge(pid, rf, wf):
    job = json.loads(sys.stdin.buffer.read())
    os.close(0)
    nonce, state = job["nonce"], {"got": None, "gone": False}

    def reply():
        try:
            line = rf.readline()
        except OSError:
            line = b""
        if not line.endswith(b"\n"):
            state["gone"] = True
            raise Gone()
        try:
            rep = json.loads(line)
            if rep[0] == "ok":
                return dec(rep[1]) if len(rep) > 1 else None
            if rep[0] == "err" and all(type(x) is str for x in rep[1:]):
                name, msg, base = rep[1][:60], rep[2][:300], rep[-1]
            else:
                raise ValueError("malformed")
        except Exception:
            raise RuntimeError("the program's reply could not be read") from None
        kind = getattr(builtins, base, None)
        try:
            err = kind(msg) if isinstance(kind, type) and issubclass(kind, Exception) else None
        except Exception:
            err = None
        err = err or RuntimeError(f"{name}: {msg}")
        err.shown = f"{name}: {msg}" if msg else name
        raise err

    def proxy(kind):
        def call(*args, **kwargs):
            if state["gone"]:
                raise Gone()
            req = json.dumps([kind, enc(list(args), True), enc(dict(kwargs), True)])
            try:
                wf.write(req.encode() + b"\n")
                wf.flush()
            except OSError:
                state["gone"] = True
                raise Gone() from None
            state["got"] = [reply()]
            return state["got"][0]
        return call

    class Solution:  # what the test sees: Solution().<entry point> calls the program's
        def __init__(self, *args, **kwargs):
            pass
    if isinstance(ENTRY, str) and ENTRY.isidentifier():
        setattr(Solution, ENTRY, staticmethod(proxy("method")))
    sys.stdout = sys.stderr  # the setup's or test's prints cannot displace the verdict
    reason = None
    try:
        send(wf, "go")
        ns = {"__name__": "__main__", "__builtins__": builtins}
        exec(compile(job["setup"], "setup.py", "exec"), ns)
        if ENTRY is not None:
            ns[ENTRY] = proxy("function")
        ns["Solution"] = Solution
        try:
            reply()  # the program loaded, or why not
        except Gone:
            reason = "the program exited before the test ran"
        except BaseException as e:
            reason = getattr(e, "shown", f"{type(e).__name__}: {e}")
        if reason is None:
            exec(compile(job["test"], "test.py", "exec"), ns)
            if state["gone"]:  # the test swallowed the program's death
                raise Gone()
    except Gone:
        reason = "the program exited during the test"
    except BaseException as e:
        reason = getattr(e, "shown", None) or f"{type(e).__name__}: {e}".rstrip(": ")
        if isinstance(e, AssertionError) and state["got"] is not None:
            try:
                reason += f"; got: {state['got'][0]!r}"[:160]
            except Exception:
                pass
    try:  # nothing of the program may outlive the test: it could read the verdict and write its own
        os.kill(pid, 9)
        if os.getpid() <= 2:  # our own PID namespace (bwrap: 2, unshare: 1): end everything else too
            os.kill(-1, 9)
    except OSError:
        pass
    verdict = "PASS" if reason is None else "FAIL " + " ".join(str(reason).split())[:300]
    os.write(1, f"{nonce} {verdict}\n".encode())
    os._exit(0)


if __name__ == "__main__":  # only as data.run_tests runs it (PROGRAM, ENTRY, PRELUDE defined above it)
    try:
        import ctypes
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0; where it fails, the rest still holds
    except Exception:
        pass
    if PRELUDE:
        exec(PRELUDE, {})  # imported before the fork: both processes get the modules for free
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    pid = os.fork()
    if pid == 0:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        keep = sorted({r1, w2})
        os.closerange(3, keep[0])  # every other inherited descriptor, the judge's pipe ends too
        os.closerange(keep[0] + 1, keep[1])
        os.closerange(keep[1] + 1, 1 << 16)
        child(os.fdopen(r1, "rb"), os.fdopen(w2, "wb"))
    else:
        os.close(r1)
        os.close(w2)
        judge(pid, os.fdopen(r2, "rb"), os.fdopen(w1, "wb"))
