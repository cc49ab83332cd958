"""Run untrusted, model-written Python with limits. Nothing model-written runs anywhere else.

Limits, the same on every path below and on any core count (a verdict is a reward: it must not depend on
the machine, its load, or the path):
- `timeout` is CPU time of ALL the job's processes together (children, threads, orphans): a _Watch looks at
  them every POLL s from /proc (their PID namespace's own /proc; the fallback's: the job's session) and
  stops the job once their sum reaches it; it has then timed out whatever its exit code (uncounted: a
  process that lives < POLL s and is reaped without a wait; in the fallback, one that leaves the session).
  Chosen over a cgroup CPU budget, which needs root and a writable cgroup tree that CI and containers may
  not have.
  RLIMIT_CPU (soft = hard, the kernel's SIGKILL) is only a backstop at 1.5 x timeout + 1 s: the kernel
  samples it by the tick, and under load it fired at 0.86 CPU-s of a 1 s limit.
- A job that makes no CPU progress (and has no runnable process) for `timeout` s of wall time is stopped
  (it sleeps or blocks: Result.stalled, and timed_out); one that keeps making progress is stopped at the
  wall-clock cap, WALL_FACTOR x timeout + WALL_SLACK s. Either way the job's processes (and namespaces) die.
- One BLAS/OpenMP thread (ONE_THREAD: numpy would start one per core, each using the CPU limit and memory).
- rlimits on address space, file size (1 MiB), open files, processes, core dumps; stdout capped at
  `out_bytes` (default MAX_OUTPUT; Result.truncated says it was cut) and stderr at MAX_OUTPUT while read;
  a stripped environment; Python isolated mode (-I).
Under torchrun the pool and queue use this process's share of the cores (CORES: cores / LOCAL_WORLD_SIZE).

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
Default, the worker pool (pool.py; bubblewrap as above, plus Linux rights to make nested namespaces; probed
once by _pool, warned and skipped where it fails): warm workers, one per core (CORES), that fork every job
into fresh PID, mount and IPC namespaces of its own, with the same limits and uid drop; every property above
holds per job (see pool.py). run_many and concurrent run() calls share one queue, so all the programs of a
training step keep every core busy.
This file: the limits, the one-namespace-per-run and fallback paths, the _Watch, run and run_many; pool.py
imports its helpers from here.
On every path a program behaves as under plain `python -I -c` (same returncode and stdout; the PLAIN
programs of test_sandbox.py check it), whether the caller is root, SANDBOX_POOL is set, or Python lives
under /tmp.
Never enforced: syscall filtering (no seccomp); disk use in the fallback beyond 1 MiB per file.
Cost: `python bench.py --sections sandbox` prints runs/s of the pool and of one namespace per run, as ratios
to bare `python -I -c` subprocesses.

    python -m pytest -q test_sandbox.py
"""
import atexit
import os
import resource
import secrets
import select
import selectors
import shutil
import signal
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
# numpy's OpenBLAS (and OpenMP, MKL, ...) would start one thread per core: each counts against the job's CPU
# limit and adds stack and buffers to its address space (12+ threads exceed 512 MiB): one thread, everywhere
ONE_THREAD = {v: "1" for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
                               "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "GOTO_NUM_THREADS")}
PATH = {"PATH": "/usr/bin:/bin", **ONE_THREAD}
# this process's share of the cores: torchrun's LOCAL_WORLD_SIZE ranks on one machine each run a pool
CORES = max(1, len(os.sched_getaffinity(0)) // max(1, int(os.environ.get("LOCAL_WORLD_SIZE") or 1)))
# wall-clock cap = WALL_FACTOR x timeout + WALL_SLACK: room for a program near its CPU limit on a machine
# loaded ~4x, and for start-up; only programs that keep making CPU progress (or stay runnable) reach it
WALL_FACTOR, WALL_SLACK = 4, 5.0
POLL = 0.05  # s between two looks at a running job's processes (their CPU, a stall); shorter jobs are never looked at
TICK = os.sysconf("SC_CLK_TCK")  # /proc's unit of CPU time
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
    stalled: bool = False  # stopped for making no CPU progress for `timeout` s of wall time (it blocked); timed_out too


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
    for k, v in {**PATH, "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8"}.items():
        a += ["--setenv", k, v]
    a += ["--chdir", "/tmp"]
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
        # soft = hard, as in the pool: the kernel's SIGKILL, which neither PID 1 (unshare's fallback) nor a
        # SIGXCPU handler escapes; a backstop only (see _backstop)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
    return apply


def run(code, stdin="", timeout=5.0, mem_mb=512, nproc=64, bwrap=True, pool=None, out_bytes=MAX_OUTPUT):
    """Run `code` with `stdin`; returns Result(stdout, stderr, returncode, timed_out). `timeout`: CPU
    seconds (see the module docstring); never raises for anything the program does; returns at most ~2 s
    after the wall-clock cap, _wall(timeout). bwrap=False forces the fallback;
    pool=False one bubblewrap namespace per run (default: the worker pool when it works, see pool.py).
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
                             preexec_fn=_limits(_backstop(timeout), mem_mb << 20, nproc))
        _close(fds, in_r, out_w, err_w)
        # the job's processes: bwrap's PID namespace, from its own /proc; in the fallback, the session
        watch = _Watch(timeout, _inside(p.pid) if box is not None else lambda: _procs("/proc", sid=p.pid))
        try:
            end = time.monotonic() + _wall(timeout)
            out, err, closed = _pump(fds, {in_w: stdin.encode("utf-8", "replace")}, out_r, err_r, end, out_bytes, watch)
            if not closed or (reaped := _reap(p, end, watch)) is None:  # it may have closed its pipes and kept running
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
        timed_out = timed_out or max(cpu, watch.used()) >= timeout  # whatever its exit code
    except (OSError, subprocess.SubprocessError, ValueError) as e:  # ValueError: NUL bytes / surrogates in code
        out, err, rc, watch = b"", f"sandbox: {e}".encode(), -1, None
    finally:
        _close(fds, *fds)
        if work:
            shutil.rmtree(work, ignore_errors=True)
    return _result(out, err, rc, timed_out, out_bytes, watch is not None and watch.why == "stalled")


def _reap(p, deadline=None, watch=None):
    """Wait for Popen `p` (until `deadline` or `watch` says stop, then None): (returncode, CPU seconds of p
    and of every process it waited for)."""
    delay = 0.0005
    while True:
        pid, status, ru = os.wait4(p.pid, 0 if deadline is None else os.WNOHANG)
        if pid:
            p.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait for it again
            return p.returncode, ru.ru_utime + ru.ru_stime
        if time.monotonic() >= deadline or watch is not None and watch.stop():
            return None
        time.sleep(delay)
        delay = min(2 * delay, POLL)


def _stat(path):
    """(start time, state, ppid, session, own CPU ticks, CPU ticks of the children it waited for) from a
    /proc/<pid>/stat (a thread group's, all its threads); None once it is gone."""
    try:
        with open(path, "rb") as f:
            s = f.read().rsplit(b")", 1)[1].split()
        return int(s[19]), s[0], int(s[1]), int(s[3]), int(s[11]) + int(s[12]), int(s[13]) + int(s[14])
    except (OSError, IndexError, ValueError):
        return None


def _procs(proc, sid=None, skip=()):
    """{pid: _stat} of the processes a procfs lists (`proc`: a PID namespace's own /proc, seen from here through
    /proc/<pid>/root), those of session `sid` only if given, those in `skip` apart."""
    try:
        names = os.listdir(proc)
    except PermissionError:  # a namespace's /proc needs ptrace rights over its init: say so, never silently
        _unreadable()
        return {}
    except OSError:  # gone
        return {}
    out = {}
    for d in names:
        if d.isdigit() and int(d) not in skip and (st := _stat(f"{proc}/{d}/stat")) and sid in (None, st[3]):
            out[int(d)] = st
    return out


@lru_cache(maxsize=1)
def _unreadable():
    warnings.warn("sandbox: cannot read a job's /proc here (no ptrace rights over it): its CPU limit binds each "
                  "process only (RLIMIT_CPU at 1.5 x timeout + 1 s) and stalls meet the wall cap", RuntimeWarning)


def _child(pid):
    """A child process of `pid` (host pids), or None. (A scan of /proc: kernels without CONFIG_PROC_CHILDREN
    have no children file.)"""
    return next((c for c, st in _procs("/proc").items() if st[2] == pid), None)


def _inside(pid):
    """procs() for a bubblewrap sandbox started as `pid`: every process of its PID namespace, from the
    namespace's own /proc, reached through its init (bwrap's child, found at the first look)."""
    init = []

    def procs():
        if not init and (c := _child(pid)) is not None:
            init.append(c)
        found = _procs(f"/proc/{init[0]}/root/proc") if init else {}
        # until bwrap has mounted the namespace's /proc, that path is the host's (its PID 1 is not bwrap's init)
        return found if init and found.get(1, (None,))[0] == (_stat(f"/proc/{init[0]}/stat") or (0,))[0] else {}
    return procs


class _Watch:
    """Looks at a running job's processes every POLL s (`procs()`: {pid: _stat} of them now) and says when it
    must stop, and why: 'cpu' once their CPU time, all of them together, reaches `timeout`; 'stalled' once for
    `timeout` s of wall time it has not advanced and none of them was runnable (it sleeps or blocks); 'wall'
    at the wall cap (a job making progress). CPU counted: every live process's own, plus the larger of what
    the gone ones had used when last seen and what the live ones reaped (the kernel adds a child's CPU to its
    parent's when the parent waits for it): never more than the job used. Uncounted: only a process that
    lives less than POLL s and is reaped without a wait (its parent ignores SIGCHLD)."""

    def __init__(self, timeout, procs):
        self.timeout, self.procs, self.t0 = timeout, procs, time.monotonic()
        self.next, self.moved, self.why = self.t0 + POLL, self.t0, None
        self.seen, self.gone, self.ticks = {}, 0, 0

    def used(self):
        return self.ticks / TICK

    def wait(self):
        """Seconds until the next look."""
        return max(0.0, self.next - time.monotonic())

    def stop(self):
        now = time.monotonic()
        if self.why is None and now >= self.next:
            self.next = now + POLL
            live = {(pid, st[0]): st for pid, st in self.procs().items()}  # (pid, start time): pids get reused
            self.gone += sum(self.seen[k][4] for k in self.seen.keys() - live.keys())
            self.seen = live
            ticks = sum(st[4] for st in live.values()) + max(self.gone, sum(st[5] for st in live.values()))
            if ticks > self.ticks or not live or any(st[1] == b"R" for st in live.values()):
                self.moved = now  # (nothing listed: not started yet, or ending)
            self.ticks = max(self.ticks, ticks)
            self.why = ("cpu" if self.ticks >= self.timeout * TICK else
                        "stalled" if now - self.moved >= self.timeout else None)
        if self.why is None and now - self.t0 >= _wall(self.timeout):
            self.why = "wall"
        return self.why is not None


def _backstop(timeout):
    """RLIMIT_CPU of each process (whole seconds): past the limit the _Watch enforces, never the limit itself.
    The kernel samples it by the tick: beside two busy processes it killed a program at 0.86 CPU-s of a
    1 s limit (by the program's own clock), a verdict that would depend on the machine's load."""
    return -int(-1.5 * timeout // 1) + 1


def _wall(timeout):
    return WALL_FACTOR * timeout + WALL_SLACK


def _result(out, err, rc, timed_out, out_bytes, stalled=False):
    dec = lambda b, n: b[:n].decode("utf-8", "replace")
    return Result(dec(out, out_bytes), dec(err, MAX_OUTPUT), rc, timed_out or stalled, len(out) > out_bytes, stalled)


def _pipe(fds):
    r, w = os.pipe()
    fds += [r, w]
    return r, w


def _close(fds, *which):
    for fd in which:
        if fd in fds:
            fds.remove(fd)
            os.close(fd)


def _pump(fds, writes, out_fd, err_fd, deadline, out_bytes, watch=None):
    """Feed the `writes` ({fd: bytes}), read out_fd/err_fd until both close, the deadline, or `watch` says
    stop: (out, err, closed). Keeps the first out_bytes + 1 bytes of out (the 1 says it was cut) and MAX_OUTPUT of err, and
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
            if left <= 0 or watch is not None and watch.stop():
                return bytes(bufs[out_fd]), bytes(bufs[err_fd]), False
            for key, _ in sel.select(left if watch is None else min(left, watch.wait())):
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


# which path run() takes is decided here (bench.py and test_sandbox.py read _POOL); the pool itself is pool.py's
_POOL, _POOL_LOCK = [None], threading.Lock()  # [None: not probed yet | False: unusable here | the Pool]


def _pool():
    """The process's pool.Pool, or None (warned once) when a worker cannot run a job here (bwrap without
    the rights to make nested namespaces, say): then each run gets its own namespace, as before."""
    # imported here, not at the top: pool.py is built on this file's limits, watch and pipes and imports them
    # at its top, so a top-level import here would be a cycle; by the first call this module is complete
    # (pool.py's `from sandbox import` finds every name), and later calls only look it up in sys.modules
    from pool import Pool
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
