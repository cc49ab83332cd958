"""Run untrusted, model-written Python with limits. Nothing model-written runs anywhere else.

Always (Linux): `timeout` is CPU time (RLIMIT_CPU, whole seconds rounded up: the kernel's SIGXCPU, then
SIGKILL), so a verdict is the same on a loaded machine as on an idle one (a reward must not depend on
what else runs); a wall-clock cap of WALL_FACTOR x timeout + WALL_SLACK s stops a program that sleeps or
blocks: the process group (and namespace) is SIGKILLed and run() returns. Either way Result.timed_out is
set. Also rlimits on address space, file size (1 MiB), open files, processes, core dumps; stdout capped
at `out_bytes` (default MAX_OUTPUT; Result.truncated says it was cut) and stderr at
MAX_OUTPUT while read; a stripped environment; Python isolated mode (-I).

Preferred, bubblewrap (`bwrap` on PATH and passing a probe): no network (own netns, only its own
loopback); own PID namespace (it sees and can signal only its own processes, and the kernel kills them
all when it ends or is killed); own IPC/UTS namespaces; a filesystem of read-only /usr, /etc and the
Python prefixes only (no /home, /root, repo, host /tmp); a fresh 64 MiB tmpfs at /tmp, its working
directory, as the only writable place. A root caller's program runs as a random unprivileged uid with
no capabilities and no_new_privs: it cannot read root-only files, and RLIMIT_NPROC (which never binds
uid 0) applies.
Fallback (no usable bwrap; warned once): `unshare [-r] -n -p -f --kill-child --mount-proc` where that
works, else `unshare -n`, else nothing, in a fresh host temp dir removed afterwards. There the program
sees the host filesystem and can write wherever its user can; as root (the interpreter must be
reachable by other uids to drop it) nothing limits its process count.
Default, the worker pool (bubblewrap as above, plus Linux rights to make nested namespaces; probed once,
warned and skipped where it fails): one namespace per worker, one worker per core, each holding a warm
interpreter that forks every job into fresh PID, mount and IPC namespaces of its own (own /tmp tmpfs,
own /proc, the program is their PID 1: whatever it leaves dies with it), same limits and uid drop.
Every property above holds per job; see the comment above _SERVER. run_many and concurrent run()
calls share one queue, so all the programs of a training step keep every core busy. Workers are started
by one long-lived thread: they outlive the callers' threads and die with the process.
On every path a program behaves as under plain `python -I -c` (same returncode and stdout; the PLAIN
programs of test_sandbox.py check it), whether the caller is root, SANDBOX_POOL is set, or Python lives
under /tmp.
Never enforced: syscall filtering (no seccomp); disk use in the fallback beyond 1 MiB per file.
Cost: `python bench.py --sandbox` prints runs/s of the pool vs one namespace per run.

    python -m pytest -q test_sandbox.py
"""
import atexit
import json
import os
import resource
import secrets
import select
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from functools import lru_cache

MAX_OUTPUT = 1 << 16  # bytes kept of stderr, and of stdout unless run(out_bytes=) says otherwise
TMPFS_BYTES = 64 << 20  # all a bwrap-sandboxed program may write
ROOT = os.geteuid() == 0
PATH = {"PATH": "/usr/bin:/bin"}
CORES = len(os.sched_getaffinity(0)) or 1
# wall-clock cap = WALL_FACTOR x timeout + WALL_SLACK: room for a program near its CPU limit on a machine
# loaded ~4x, and for start-up; only programs that sleep or block (or fork CPU hogs) ever reach it
WALL_FACTOR, WALL_SLACK = 4, 5.0
POOL = os.environ.get("SANDBOX_POOL", "1") != "0"  # 0: one bubblewrap namespace per run (the slow path, for comparison)
PYTHON_DIRS = sorted({d for d in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                                  os.path.dirname(os.path.realpath(sys.executable)))  # a venv and its Python
                      if d.split("/")[1] not in ("usr", "etc")}, key=len)  # read-only in every namespace


@dataclass
class Result:
    stdout: str
    stderr: str
    returncode: int
    timed_out: bool
    truncated: bool = False  # stdout was longer than out_bytes: only its first out_bytes are kept


def _works(argv):
    """Does `argv python` run our interpreter with its own stdlib? (A uid that cannot reach the prefix
    still starts Python 3.11+ from frozen modules, then silently picks up another stdlib.)"""
    code = "import json, socket, sys; print(sys.prefix, sys.base_prefix)"
    try:
        p = subprocess.run([*argv, sys.executable, "-I", "-c", code], capture_output=True, text=True,
                           timeout=20, env=PATH, cwd="/")
    except (OSError, subprocess.SubprocessError):
        return False
    return p.returncode == 0 and p.stdout.split() == [sys.prefix, sys.base_prefix]


def _drop(uid):
    """Root only: become an unprivileged uid with no capabilities and no way back (util-linux)."""
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
            "--bounding-set=-all", "--no-new-privs", "--"] if ROOT else []


@lru_cache(maxsize=1)
def _bwrap():
    """bwrap argv up to the command, or None (with a warning, once) if bwrap is missing or broken."""
    a = [shutil.which("bwrap") or "bwrap", "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
         "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--clearenv", "--proc", "/proc",
         "--dev", "/dev", "--size", str(TMPFS_BYTES), "--perms", "1777", "--tmpfs", "/tmp",  # before binds:
         "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]  # a venv under /tmp stays visible
    for d in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):  # merged-/usr symlinks, or real dirs
        a += ["--symlink", os.readlink(d), d] if os.path.islink(d) else ["--ro-bind", d, d] if os.path.isdir(d) else []
    ups = set()  # bwrap makes missing parents 0700, untraversable for the dropped uid: make them 0755
    for d in PYTHON_DIRS:
        while (d := os.path.dirname(d)) not in ("/", "/tmp", ""):
            ups.add(d)
    for d in sorted(ups, key=len):
        a += ["--perms", "0755", "--dir", d]
    for d in PYTHON_DIRS:
        a += ["--ro-bind", d, d]
    a += ["--chdir", "/tmp", "--setenv", "PATH", PATH["PATH"], "--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp",
          "--setenv", "LANG", "C.UTF-8"]
    if ROOT:  # for setpriv, which drops them all with the uid
        a += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
    if shutil.which("bwrap") and _works([*a, "--", *_drop(65534)]):
        return a
    pre, drop = _fallback()
    warnings.warn(f"sandbox: bubblewrap missing or not working; falling back to {' '.join(pre) or 'no namespaces'}"
                  f" + rlimits{' as root' if ROOT and not drop else ''}, without filesystem isolation",
                  RuntimeWarning, stacklevel=3)
    return None


@lru_cache(maxsize=1)
def _fallback():
    """(most isolated `unshare` prefix that works here, whether setpriv can drop root too)."""
    exe, r = shutil.which("unshare"), [] if ROOT else ["-r"]  # -r: a user namespace lets non-root unshare
    for pre in [[exe, *r, "-n", "-p", "-f", "--kill-child", "--mount-proc"], [exe, *r, "-n"], []] if exe else [[]]:
        for drop in [_drop(65534), []] if ROOT else [[]]:
            if not pre and not drop or _works(pre + drop):
                return pre, bool(drop)


def _limits(cpu_s, mem_bytes, nproc):
    def apply():
        os.setsid()  # own process group: a timeout kills every child too
        for lim, n in ((resource.RLIMIT_AS, mem_bytes), (resource.RLIMIT_FSIZE, 1 << 20), (resource.RLIMIT_NOFILE, 64),
                       (resource.RLIMIT_NPROC, nproc), (resource.RLIMIT_CORE, 0)):
            resource.setrlimit(lim, (n, n))
        # SIGXCPU at the limit kills the program (under bwrap its exit status says so: 152); SIGKILL a second
        # later, for one that is PID 1 (unshare's fallback: it ignores SIGXCPU) or catches it
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    return apply


def run(code, stdin="", timeout=5.0, mem_mb=512, nproc=64, bwrap=True, pool=None, out_bytes=MAX_OUTPUT):
    """Run `code` with `stdin`; returns Result(stdout, stderr, returncode, timed_out). `timeout`: CPU
    seconds (see the module docstring); never raises for anything the program does; returns at most ~2 s
    after the wall-clock cap, _wall(timeout). bwrap=False forces the fallback;
    pool=False one bubblewrap namespace per run (default: the worker pool when it works, see Pool).
    out_bytes: stdout bytes kept (a long expected output needs more than the default)."""
    if bwrap and (POOL if pool is None else pool) and _bwrap() is not None and _pool() is not None:
        try:
            return _pool().run(code, stdin, timeout, mem_mb, nproc, out_bytes)
        except RuntimeError:  # no worker would start (out of processes, say): this run gets its own namespace
            pass
    return _run_once(code, stdin, timeout, mem_mb, nproc, bwrap, out_bytes)


def _run_once(code, stdin, timeout, mem_mb, nproc, bwrap, out_bytes):
    """One namespace (or fallback process) per run: started, used once, torn down."""
    uid = (1 << 20) + secrets.randbelow(1 << 29)  # a uid per run: RLIMIT_NPROC counts per uid
    box, work = _bwrap() if bwrap else None, None
    if box is not None:
        cmd, cwd, env = [*box, "--", *_drop(uid)], "/", PATH
    else:
        pre, drop = _fallback()
        cwd = work = tempfile.mkdtemp(prefix="sbx-")
        if drop:
            os.chown(work, uid, uid)
        cmd, env = [*pre, *(_drop(uid) if drop else [])], {**PATH, "HOME": work, "TMPDIR": work, "LANG": "C.UTF-8"}
    cmd += [sys.executable, "-I", "-c", code]
    timed_out, out, err, fds = False, b"", b"", []
    try:
        (in_r, in_w), (out_r, out_w), (err_r, err_w) = (_pipe(fds) for _ in range(3))
        p = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=in_r, stdout=out_w, stderr=err_w,
                             preexec_fn=_limits(_cpu(timeout), mem_mb << 20, nproc))
        _close(fds, in_r, out_w, err_w)
        try:
            end = time.monotonic() + _wall(timeout)
            out, err, closed = _pump(fds, {in_w: stdin.encode("utf-8", "replace")}, out_r, err_r, end, out_bytes)
            if not closed or (reaped := _reap(p, end)) is None:  # it may have closed its pipes and kept running
                raise subprocess.TimeoutExpired(cmd, timeout)
            rc, cpu = reaped
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill(p)
            rc, cpu = _reap(p)
            # the namespace's teardown ends with the pipes' EOF (~0.5 s for 64 busy processes on 2 loaded cores)
            o2, e2, _ = _pump(fds, {}, out_r, err_r, time.monotonic() + 2.0, out_bytes)
            out, err = out + o2, err + e2
        finally:
            _kill(p)  # leftovers in a fallback without PID namespace (pgid stays reserved while in use)
        timed_out = timed_out or _out_of_cpu(rc, cpu, timeout)
    except (OSError, subprocess.SubprocessError, ValueError) as e:  # ValueError: NUL bytes / surrogates in code
        out, err, rc = b"", f"sandbox: {e}".encode(), -1
    finally:
        _close(fds, *fds)
        if work:
            shutil.rmtree(work, ignore_errors=True)
    return _result(out, err, rc, timed_out, out_bytes)


def _reap(p, deadline=None):
    """Wait for Popen `p` (until `deadline`, then None): (returncode, CPU seconds of p and of every process
    it waited for; bwrap and unshare wait for the program, so its time is in there)."""
    delay = 0.0005
    while True:
        pid, status, ru = os.wait4(p.pid, 0 if deadline is None else os.WNOHANG)
        if pid:
            p.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait for it again
            return p.returncode, ru.ru_utime + ru.ru_stime
        if time.monotonic() >= deadline:
            return None
        time.sleep(delay)
        delay = min(2 * delay, 0.05)


def _out_of_cpu(rc, cpu, timeout):
    """Was the program stopped by its CPU limit: killed by SIGXCPU, or a failure after ~the limit's CPU time
    (wait4's count reads up to a few % under the kernel's own)? A program that kills itself did not time
    out. (Under bwrap, wait4 does not see the program's time, but its SIGXCPU status.)"""
    return rc in (128 + signal.SIGXCPU, -signal.SIGXCPU) or rc != 0 and cpu >= 0.9 * _cpu(timeout)


def _cpu(timeout):
    return max(1, -int(-timeout // 1))  # whole CPU seconds, rounded up (RLIMIT_CPU's unit)


def _wall(timeout):
    return WALL_FACTOR * timeout + WALL_SLACK


def _result(out, err, rc, timed_out, out_bytes):
    dec = lambda b, n: b[:n].decode("utf-8", "replace")
    return Result(dec(out, out_bytes), dec(err, MAX_OUTPUT), rc, timed_out, len(out) > out_bytes)


def _pipe(fds):
    r, w = os.pipe()
    fds += [r, w]
    return r, w


def _close(fds, *which):
    for fd in which:
        if fd in fds:
            fds.remove(fd)
            os.close(fd)


def _pump(fds, writes, out_fd, err_fd, deadline, out_bytes):
    """Feed the `writes` ({fd: bytes}), read out_fd/err_fd until both close or the deadline: (out, err,
    closed). Keeps the first out_bytes + 1 bytes of out (the 1 says it was cut) and MAX_OUTPUT of err, and
    drains the rest, so a chatty program neither blocks nor fills us. Closes each written fd when its data is all written (the reader's EOF)."""
    bufs, cap = {out_fd: bytearray(), err_fd: bytearray()}, {out_fd: out_bytes + 1, err_fd: MAX_OUTPUT}
    with selectors.DefaultSelector() as sel:
        for fd in bufs:
            if fd in fds:
                sel.register(fd, selectors.EVENT_READ)
        for fd, data in writes.items():
            if data and fd in fds:
                sel.register(fd, selectors.EVENT_WRITE, memoryview(data))
            else:
                _close(fds, fd)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(bufs[out_fd]), bytes(bufs[err_fd]), False
            for key, _ in sel.select(left):
                fd = key.fd
                if fd not in bufs:
                    try:  # writable means PIPE_BUF bytes of room: this cannot block
                        left_data = key.data[os.write(fd, key.data[:select.PIPE_BUF]):]
                    except BrokenPipeError:  # it stopped reading
                        left_data = b""
                    if left_data:
                        sel.modify(fd, selectors.EVENT_WRITE, left_data)
                    else:
                        sel.unregister(fd)
                        _close(fds, fd)
                    continue
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    sel.unregister(fd)
                    _close(fds, fd)
                bufs[fd] += chunk[: cap[fd] - len(bufs[fd])]
    return bytes(bufs[out_fd]), bytes(bufs[err_fd]), True


def run_many(jobs, timeout=5.0, workers=None, stop=None, **limits):
    """Run (code, stdin) jobs in parallel through one shared queue (at most one job per core at once,
    whoever submits). Returns Results in input order. `stop(i, result)`: once it is true, jobs after
    index i that have not started are skipped (their Result is None); jobs before i still run, so
    which jobs ran depends only on the results, never on timing. `limits`: run()'s keywords (out_bytes=...)."""
    jobs = list(jobs)
    _bwrap() if limits.get("bwrap", True) else _fallback()  # probe (and warn) once, not once per thread
    execu, cut = _executor(workers, os.getpid()), [len(jobs)]  # a forked child gets its own threads

    def one(i, code, stdin):
        if i > cut[0]:
            return None
        r = run(code, stdin, timeout, **limits)
        if stop is not None and stop(i, r):
            cut[0] = min(cut[0], i)
        return r
    futures = [execu.submit(one, i, code, stdin) for i, (code, stdin) in enumerate(jobs)]
    results = [f.result() for f in futures]
    if stop is not None:  # past the first decided index nothing counts, whether it ran or not
        first = next((i for i, r in enumerate(results) if r is not None and stop(i, r)), len(jobs))
        results[first + 1:] = [None] * (len(jobs) - first - 1)
    return results


@lru_cache(maxsize=None)
def _executor(workers, pid):
    """The process-wide job queue: one thread per core (each job is a subprocess or a pool worker's
    child, so the GIL is not held while it runs)."""
    from concurrent.futures import ThreadPoolExecutor
    return ThreadPoolExecutor(max_workers=workers or CORES, thread_name_prefix="sandbox")


# ---- the worker pool ---------------------------------------------------------------------------------
# One bubblewrap namespace per worker (started once) holds a small trusted server that has already
# started Python. Per job it forks A, which unshares new mount, PID and IPC namespaces and forks B, PID 1
# there: B mounts a fresh 64 MiB tmpfs on /tmp and a fresh /proc (only the job's processes), sets the
# rlimits, drops every capability (bounding set too), sets no_new_privs and a random uid, and exec()s the
# code it reads from a pipe. The program's stdin/stdout/stderr and its code travel in pipes straight
# between us and B (passed as fds over a unix socket): the server never holds a program's code or input
# for a later job to find in its memory. When B exits, the kernel kills whatever it left (it is PID 1),
# and the tmpfs and IPC objects go with their namespaces: nothing survives into the next job. Concurrent
# jobs run in different workers. At the wall-clock cap the whole worker is killed and its slot starts a fresh
# one. Per run: 2 forks of a warm interpreter instead of a namespace set-up plus an interpreter start.
# B is plain `python -I -c`: its std streams are built as Python builds them, it exits through the
# interpreter's own exit, and Python dirs under /tmp are bound back onto its fresh /tmp (test_sandbox's
# PLAIN programs check it). (As PID 1 it ignores signals it sends itself without a handler.)
_SERVER = r"""# sandbox worker
import ctypes, gc, io, json, os, resource as R, socket, sys, types
import bisect, collections, functools, heapq, itertools, math, random, re, string, typing  # warm for jobs
libc = ctypes.CDLL(None, use_errno=True)
NS = 0x00020000 | 0x08000000  # CLONE_NEWNS | CLONE_NEWIPC
def ok(r, what):
    if r != 0:
        raise OSError(ctypes.get_errno(), what)
def status(st):
    return os.waitstatus_to_exitcode(st) if os.WIFEXITED(st) else 128 + os.WTERMSIG(st)
def job(h, fin, fout, ferr, fcode):
    try:  # PID 1 of a new PID namespace (see the loop below)
        ok(libc.unshare(NS), "unshare")
        ok(libc.mount(b"none", b"/", None, 16384 | (1 << 18), None), "mount --make-rprivate /")
        os.setsid()
        keep = [(d, os.open(d, os.O_PATH)) for d in h["keep"]]  # Python under /tmp: the new tmpfs hides it
        ok(libc.mount(b"tmpfs", b"/tmp", b"tmpfs", 2 | 4, b"size=%d,mode=1777" % h["tmpfs"]), "mount /tmp")
        for d, fd in keep:  # bound back read-only (MS_BIND, then MS_REMOUNT|MS_BIND|RDONLY|NOSUID|NODEV)
            mkdirs(d)
            ok(libc.mount(b"/proc/self/fd/%d" % fd, d.encode(), None, 4096, None), "bind " + d)
            ok(libc.mount(None, d.encode(), None, 32 | 4096 | 1 | 2 | 4, None), "remount " + d)
            os.close(fd)
        ok(libc.mount(b"proc", b"/proc", b"proc", 2 | 4 | 8, None), "mount /proc")
        for fd, to in ((fin, 0), (fout, 1), (ferr, 2)):
            os.dup2(fd, to)
        os.closerange(3, fcode)
        os.closerange(fcode + 1, 1 << 16)
        sock.detach()  # its fd is closed: at exit it must not close a program's file that got the number
        with open(fcode, "rb") as f:
            src = f.read()
        for lim, n in ((R.RLIMIT_CPU, h["cpu"]), (R.RLIMIT_AS, h["mem"]), (R.RLIMIT_FSIZE, 1 << 20),
                       (R.RLIMIT_NOFILE, 64), (R.RLIMIT_NPROC, h["nproc"]), (R.RLIMIT_CORE, 0)):
            R.setrlimit(lim, (n, n))
        for cap in range(64):
            libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP (past the last capability: EINVAL, harmless)
        uid = h["uid"]
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # the last step that needs a capability: all of them are gone now
        ok(libc.prctl(38, 1, 0, 0, 0), "no_new_privs")
        os.chdir("/tmp")
    except BaseException as e:
        for fd in (ferr, 2):
            try:
                os.write(fd, f"sandbox: job set-up failed: {e}\n".encode())
                break
            except OSError:
                pass
        os._exit(125)
    sys.stdin, sys.stdout, sys.stderr = sys.__stdin__, sys.__stdout__, sys.__stderr__ = (
        stdio(0, sys.__stdin__), stdio(1, sys.__stdout__), stdio(2, sys.__stderr__))
    sys.argv = ["-c"]
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    try:
        exec(compile(src, "<string>", "exec"), main.__dict__)
    except SystemExit:
        raise
    except BaseException as e:
        e.__traceback__ = e.__traceback__.tb_next  # (the default hook prints this one, not its argument)
        sys.excepthook(type(e), e, e.__traceback__)  # as `python -c` reports it: no frame of ours
        raise SystemExit(1)
    raise SystemExit(0)  # out of the server's loop: the interpreter exits as `python -c` does (threads
    # joined, atexit, std streams flushed or exit 120, files left open flushed as they are freed)
def mkdirs(d):  # root-owned 0755 mount points on the job's tmpfs, as bwrap made them for the worker
    p = ""
    for part in d.split("/")[1:]:
        p += "/" + part
        if not os.path.isdir(p):
            os.mkdir(p)
            os.chmod(p, 0o755)
def stdio(fd, like):
    # a std stream as Python builds it at start-up (newline "\n", its encoding and errors), on the job's pipe
    buf = open(fd, like.mode + "b", closefd=False)
    buf.raw.name = like.name
    s = io.TextIOWrapper(buf, like.encoding, like.errors, "\n", like.line_buffering, like.write_through)
    s.mode = like.mode
    return s
gc.freeze()  # the warm objects never move: a job's collections do not copy their pages
sock = socket.socket(fileno=int(sys.argv[1]))
own_pid_ns = os.open("/proc/self/ns/pid", os.O_RDONLY)
sock.sendall(b"ready\n")
while True:
    msg, fds, _, _ = socket.recv_fds(sock, 4096, 4)
    if not msg or len(fds) != 4:
        break
    # the next child starts a new PID namespace as its PID 1 (unshare(CLONE_NEWPID) acts on children
    # only, and only once: setns back to our own first)
    ok(libc.setns(own_pid_ns, 0x20000000), "setns")
    ok(libc.unshare(0x20000000), "unshare pid")
    pid = os.fork()
    if pid == 0:
        job(json.loads(msg), *fds)
    for fd in fds:
        os.close(fd)
    _, st, ru = os.wait4(pid, 0)  # its exit has killed every process it left
    sock.sendall(b"%d %.6f\n" % (status(st), ru.ru_utime + ru.ru_stime))  # exit status, CPU seconds
"""


@lru_cache(maxsize=None)
def _spawner(pid):
    """The one thread that starts every worker, for the life of the process: bwrap --die-with-parent is
    PR_SET_PDEATHSIG, which fires when the THREAD that forked it exits, and callers' threads come and go
    (rollout's per-call threads end after every rollout)."""
    from concurrent.futures import ThreadPoolExecutor
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="sandbox-spawner")


class _Worker:
    def __init__(self):
        host, inside = socket.socketpair()
        try:
            caps = [x for c in ("SYS_ADMIN", "SETUID", "SETGID", "SETPCAP") for x in ("--cap-add", f"CAP_{c}")]
            self.proc = _spawner(os.getpid()).submit(
                subprocess.Popen, [*_bwrap(), *caps, "--", sys.executable, "-I", "-c", _SERVER, str(inside.fileno())],
                cwd="/", env=PATH, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                pass_fds=[inside.fileno()], start_new_session=True).result()
        except BaseException:  # out of processes, say: no fd stays behind
            host.close()
            raise
        finally:
            inside.close()
        self.sock = host
        try:
            ready = self._reply(30.0)
        except (OSError, TimeoutError):
            ready = b""
        if ready != b"ready\n":
            self.kill()
            raise RuntimeError("sandbox worker did not start")

    def _reply(self, wait):
        """One line from the server (bytes, with its newline) within `wait` seconds."""
        end, buf = time.monotonic() + wait, b""
        while not buf.endswith(b"\n"):
            if not select.select([self.sock], [], [], max(0.0, end - time.monotonic()))[0]:
                raise TimeoutError
            chunk = self.sock.recv(64)
            if not chunk:
                raise OSError("sandbox worker exited")
            buf += chunk
        return buf

    def run(self, code, stdin, timeout, mem_mb, nproc, out_bytes):
        """One job; raises OSError/TimeoutError when the worker is gone (then it must be dropped)."""
        fds = []
        try:
            (in_r, in_w), (out_r, out_w), (err_r, err_w), (code_r, code_w) = (_pipe(fds) for _ in range(4))
            head = json.dumps({"uid": (1 << 20) + secrets.randbelow(1 << 29), "cpu": _cpu(timeout),
                               "mem": mem_mb << 20, "nproc": nproc, "tmpfs": TMPFS_BYTES,
                               "keep": [d for d in PYTHON_DIRS if d.startswith("/tmp/")]}).encode()
            socket.send_fds(self.sock, [head], [in_r, out_w, err_w, code_r])
            _close(fds, in_r, out_w, err_w, code_r)
            end = time.monotonic() + _wall(timeout)
            writes = {in_w: stdin.encode("utf-8", "replace"), code_w: code}
            out, err, closed = _pump(fds, writes, out_r, err_r, end, out_bytes)
            if closed:
                try:
                    rc, cpu = self._reply(end - time.monotonic()).split()
                    return _result(out, err, int(rc), _out_of_cpu(int(rc), float(cpu), timeout), out_bytes)
                except (TimeoutError, ValueError):  # it closed its pipes and kept running
                    pass
            self.kill()  # the whole namespace: the program and everything it started
            o2, e2, _ = _pump(fds, {}, out_r, err_r, time.monotonic() + 2.0, out_bytes)
            return _result(out + o2, err + e2, -9, True, out_bytes)
        finally:
            _close(fds, *fds)

    def kill(self):
        _kill(self.proc)
        self.proc.wait()
        self.sock.close()


class Pool:
    """At most `size` (default: one per core) workers, started on demand, shared by every thread."""

    def __init__(self, size=None):
        import queue
        self.idle, self.pid = queue.LifoQueue(), os.getpid()
        for _ in range(size or CORES):
            self.idle.put(None)  # a free slot: the thread that takes it starts a worker in it

    def _take(self):
        w = self.idle.get()
        if w is None:
            try:
                return _Worker()
            except BaseException:
                self.idle.put(None)
                raise
        return w

    def run(self, code, stdin, timeout, mem_mb, nproc, out_bytes=MAX_OUTPUT):
        try:
            code = code.encode("utf-8")
        except UnicodeEncodeError as e:  # lone surrogates in model output
            return Result("", f"sandbox: {e}", -1, False)
        for _ in range(2):  # a worker that died (killed from outside, say) is replaced once
            w = self._take()
            try:
                r = w.run(code, stdin, timeout, mem_mb, nproc, out_bytes)
            except (OSError, TimeoutError, ValueError) as e:
                w.kill()
                self.idle.put(None)
                r = Result("", f"sandbox: worker failed: {e}", -1, False)
                continue
            self.idle.put(w if w.proc.poll() is None else None)  # one killed at the wall cap frees its slot
            return r
        return r

    def close(self):
        workers = []
        while not self.idle.empty():
            workers.append(self.idle.get())
        for w in workers:
            if w is not None:
                w.kill()
            self.idle.put(None)


_POOL, _POOL_LOCK = [None], threading.Lock()  # [None: not probed yet | False: unusable here | the Pool]


def _pool():
    """The process's Pool, or None (warned once) when a worker cannot run a job here (bwrap without
    the rights to make nested namespaces, say): then each run gets its own namespace, as before."""
    if _POOL[0] is not None and _POOL[0] is not False and _POOL[0].pid != os.getpid():
        _POOL[0] = None  # a forked child never talks to its parent's workers
    if _POOL[0] is None:
        with _POOL_LOCK:
            if _POOL[0] is None:
                p = Pool()
                try:  # not as root, a job could not get a uid of its own (or drop its capabilities): no pool
                    r = (p.run("import os, sys; print(os.getpid(), sys.prefix, os.listdir('/tmp'))", "", 30.0, 512, 64)
                         if ROOT else Result("", "it needs root, to give every job a uid of its own", -1, False))
                except Exception as e:
                    r = Result("", str(e), -1, False)
                if r.returncode == 0 and r.stdout.split(" ", 2)[:2] == ["1", sys.prefix]:
                    _POOL[0] = p
                    atexit.register(p.close)
                else:
                    p.close()
                    _POOL[0] = False
                    warnings.warn(f"sandbox: the worker pool does not work here ({(r.stderr or r.stdout).strip()[-200:]}); "
                                  "one bubblewrap namespace per run instead (slower)", RuntimeWarning, stacklevel=3)
    return _POOL[0] or None


def _kill(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        p.kill()
