"""Run untrusted, model-written Python with limits. Nothing model-written runs anywhere else.

Limits, the same on every path below and on any core count (a verdict is a reward: it must not depend on
the machine, its load, or the path):
- `timeout` is CPU time of ALL the job's processes together (children, threads, orphans, children reaped
  without a wait), by the kernel's account: as root, every job runs in a cgroup of its own (cgroup._Cgroup; in
  the pool its worker's, which holds one job at a time), joined before anything of the program's runs, whose
  CPU usage a _Watch reads every POLL s; once it reaches `timeout` the job is killed and has timed out,
  whatever its exit code. The program cannot leave its cgroup: no cgroup file is visible or writable to it
  on any path (the fallback as root: see below).
  Where no cgroup can be made (not root, no writable cgroup tree), the _Watch sums the job's processes from
  /proc instead and misses a process that lives < POLL s and is reaped without a wait (docs/sandbox.md: what
  that lets through, measured). RLIMIT_CPU (soft = hard, the kernel's SIGKILL) is only a backstop at
  1.5 x timeout + 1 s: the kernel samples it by the tick, and under load it fired at 0.86 CPU-s of a 1 s limit.
- A job busy (running, or runnable and waiting for a CPU: a loaded machine is not a stall) less than STALL of
  the last `timeout` s of wall time is stopped as stalled (it sleeps or blocks: Result.stalled, and timed_out);
  one that stays busy is stopped at the wall-clock cap, WALL_FACTOR x timeout + WALL_SLACK s (only a job
  starved of CPU reaches it: a busy one meets its CPU limit first). Either way all the job's processes die.
- One BLAS/OpenMP thread (ONE_THREAD: numpy would start one per core, each using the CPU limit and memory).
- rlimits on address space, file size (1 MiB), open files, processes, core dumps; stdout capped at
  `out_bytes` (default MAX_OUTPUT; Result.truncated says it was cut) and stderr at MAX_OUTPUT while read;
  a stripped environment; Python isolated mode (-I).
Under torchrun the pool and queue use this process's share of the cores (CORES: cores / LOCAL_WORLD_SIZE).

Preferred, bubblewrap (`bwrap` on PATH and passing a probe): no network (own netns, only its own
loopback); own PID namespace (it sees and can signal only its own processes, and the kernel kills them
all when it ends or is killed); own IPC/UTS/cgroup namespaces; a filesystem of read-only /usr, /etc and
the Python prefixes only (no /home, /root, /sys, repo, host /tmp); a fresh 64 MiB tmpfs at /tmp, its working
directory, as the only writable place. A root caller's program runs as a random unprivileged uid with
no capabilities and no_new_privs: it cannot read root-only files, and RLIMIT_NPROC (which never binds
uid 0) applies.
Fallback (no usable bwrap; warned once): chrooted into a root of its own built as bubblewrap's in a fresh temp dir
(under WORK_ROOT, removed afterwards): a 64 MiB tmpfs, the system and Python dirs bound read-only, /tmp its only
writable place, in mount and network namespaces of its own (pool._hide_sys); then `unshare -p -f --kill-child
--mount-proc` (its own PID namespace) where that works. As root it runs as an unprivileged uid where the
interpreter is reachable by other uids in that root, else as uid 0; not root, as uid 0 of a user namespace of its
own (the caller's uid outside). Either way no capability stays (setpriv), so it cannot chroot out, and the kernel
lets no chrooted process make a user namespace to get one back. RLIMIT_NPROC never binds the host's uid 0: there
a pids cgroup counts the program's processes instead (cgroup._counts_pids: v2's pids controller, or v1's pids
hierarchy), and where neither exists nothing does. Not root where unprivileged user namespaces are off, nothing
builds that root: `unshare -r -n -p -f --kill-child --mount-proc`, else `unshare -r -n`, else nothing, and the
program sees the host's files and writes wherever its user can; check() stops a task there (one line naming the
fix) unless ATGRPO_UNSAFE_SANDBOX=1.
Default, the worker pool (pool.py; bubblewrap as above, plus Linux rights to make nested namespaces; probed once by
_pool, warned and skipped where it fails): warm workers, one per core (CORES), that fork every job into fresh PID,
mount, IPC and cgroup namespaces of its own, with the same limits, cgroup and uid drop; every property above holds
per job (see pool.py). run_many and concurrent run() calls share one queue, so all the programs of a training step
keep every core busy.
This file: the limits, the paths, one driver for all of them (_supervise: the pipes, the _Watch, the kill).
pool.py: where a job runs (the bubblewrap argv, the fallback, check()) and the worker pool; imports nothing here.
A program behaves as under plain `python -I -c` (same returncode and stdout; the PLAIN programs of test_sandbox.py
check it on every path, whether the caller is root, SANDBOX_POOL is set, or Python lives under /tmp), except for the
limits above and: everything it started is killed when its main process exits (what a child would print later is
lost: intended; a fallback without PID namespace or cgroup kills its group); its std streams are pipes; it runs in a
fresh working directory with a stripped environment and no network, and as the path allows, in its own PID namespace
(the pool: its pid is 1), without /sys, as another uid.
Never enforced: syscall filtering (no seccomp); disk use beyond 1 MiB a file in a fallback without its own root.
Cost: `python bench.py --sections sandbox`: runs/s of the pool and of one namespace per run, as ratios to bare
`python -I -c` subprocesses, and the CPU per job.

    python -m pytest -q test_sandbox.py
"""
import atexit
import collections
import fcntl
import json
import os
import resource
import secrets
import select
import selectors
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
import warnings
from dataclasses import dataclass
from functools import lru_cache

from cgroup import _cgroup
from pool import UNSAFE, check  # noqa: F401 (sandbox.check: this module's API; it lives beside the paths it asks)
from pool import PATH, PYTHON_DIRS, ROOT, TMPFS_BYTES, Pool, _bwrap, _drop, _fallback, _hide_sys, _listdir

MAX_OUTPUT = 1 << 16  # bytes kept of stderr, and of stdout unless run(out_bytes=) says otherwise
# this process's share of the cores: torchrun's LOCAL_WORLD_SIZE ranks on one machine each run a pool
CORES = max(1, len(os.sched_getaffinity(0)) // max(1, int(os.environ.get("LOCAL_WORLD_SIZE") or 1)))
# wall-clock cap = WALL_FACTOR x timeout + WALL_SLACK: room for a program near its CPU limit on a machine
# loaded ~4x, and for start-up; only a job starved of CPU (busy, not running) reaches it
WALL_FACTOR, WALL_SLACK = 4, 5.0
# stalled: busy less than this share of its last `timeout` s. Below 1 / WALL_FACTOR a job could not use its
# CPU limit before the wall cap anyway; the margin below "most of the time" keeps a job that waits on a slow
# reader of its output (a loaded caller) or on a disk busy
STALL = 0.25
POLL = 0.05  # s between two looks at a running job (its CPU, a stall); shorter jobs are never looked at
TICK = os.sysconf("SC_CLK_TCK")  # /proc's unit of CPU time
POOL = os.environ.get("SANDBOX_POOL", "1") != "0"  # 0: one bubblewrap namespace per run (the slow path, for comparison)
WORK_ROOT = None  # where the fallback makes each run's temp dir (None: the system's; tests use their own)


@dataclass
class Result:
    stdout: str
    stderr: str
    returncode: int
    timed_out: bool
    truncated: bool = False  # stdout was longer than out_bytes: only its first out_bytes are kept
    stalled: bool = False  # stopped for being busy < STALL of `timeout` s of wall time (it blocked); timed_out too


# ---- the paths --------------------------------------------------------------------------------------------------

def run(code, stdin="", timeout=5.0, mem_mb=512, nproc=64, bwrap=True, pool=None, out_bytes=MAX_OUTPUT):
    """Run `code` with `stdin`; returns Result(stdout, stderr, returncode, timed_out). `timeout`: CPU
    seconds (see the module docstring); never raises for anything the program does; returns at most ~2 s
    after the wall-clock cap, _wall(timeout). bwrap=False forces the fallback;
    pool=False one bubblewrap namespace per run (default: the worker pool when it works, see pool.py).
    out_bytes: stdout bytes kept (a long expected output needs more than the default)."""
    if bwrap and (POOL if pool is None else pool) and _bwrap() is not None and _pool() is not None:
        try:
            return _pooled(_pool(), code, stdin, timeout, mem_mb, nproc, out_bytes)
        except (RuntimeError, OSError):  # no worker would start (out of processes, say): a namespace of its own
            pass
    return _run_once(code, stdin, timeout, mem_mb, nproc, bwrap, out_bytes)


def _job_memory(mem_mb):
    """Bytes a job's processes may hold together, where a cgroup counts them (cgroup.py): mem_mb, what RLIMIT_AS
    gives each of them, plus its tmpfs files and the worker's server (or bwrap) beside it."""
    return (mem_mb << 20) + TMPFS_BYTES + (64 << 20)


def _run_once(code, stdin, timeout, mem_mb, nproc, bwrap, out_bytes):
    """One namespace (or fallback process) per run: started, used once, torn down."""
    uid = (1 << 20) + secrets.randbelow(1 << 29)  # a uid per run: RLIMIT_NPROC counts per uid
    box, work, cg, fds, drop, procs = _bwrap() if bwrap else None, None, None, [], "", nproc
    try:
        if box is not None:
            cmd, cwd, env, hide = [*box, "--", *_drop(uid)], "/", PATH, False
            cg = _cgroup(mem=_job_memory(mem_mb))
        else:
            pre, drop, hide = _fallback()
            cwd = work = tempfile.mkdtemp(prefix="sbx-", dir=WORK_ROOT)
            if drop == "uid":
                os.chown(work, uid, uid)
            cmd = [*pre, *(_drop(uid if drop == "uid" else None, root=True) if drop else [])]
            home = "/tmp" if hide else work  # hide: a root of its own is built in `work`, its /tmp writable (_hide_sys)
            env = {**PATH, "HOME": home, "TMPDIR": home, "LANG": "C.UTF-8"}
            # as root with capabilities it could leave any cgroup. As root's uid 0 (drop "caps") RLIMIT_NPROC never
            # binds: the cgroup's pids limit counts the program's processes instead (nproc, as RLIMIT_NPROC
            # would, + the unshare that waits for it with -f)
            cg = _cgroup(nproc + ("-f" in pre) if drop == "caps" else None, _job_memory(mem_mb)) if drop else None
            # not root, the unshare that waits for it is in its user namespace, and so in its RLIMIT_NPROC count
            procs = nproc + (hide and not ROOT and "-f" in pre)
        (in_r, in_w), (out_r, out_w), (err_r, err_w) = (_pipe(fds) for _ in range(3))
        p = subprocess.Popen([*cmd, sys.executable, "-I", "-c", code], cwd=cwd, env=env, stdin=in_r, stdout=out_w,
                             stderr=err_w, preexec_fn=_limits(_backstop(timeout), mem_mb << 20, procs, cg, hide,
                                                               work))
        _close(fds, in_r, out_w, err_w)
        try:
            # its processes, where it has no cgroup: bwrap's PID namespace, from its own /proc; the fallback's session
            job = _Process(p, cg, _inside(p.pid) if box is not None else lambda: ("/proc", p.pid, ()))
            return _supervise(job, timeout, fds, {in_w: stdin.encode("utf-8", "replace")}, out_r, err_r, out_bytes, cg)
        finally:
            _kill(p)  # leftovers in a fallback without PID namespace (pgid stays reserved while in use)
    except (OSError, subprocess.SubprocessError, ValueError) as e:  # ValueError: NUL bytes / surrogates in code
        return _result(b"", f"sandbox: {e}".encode(), -1, False, out_bytes)
    finally:
        _close(fds, *fds)
        if cg is not None:
            cg.remove()
        if work:
            shutil.rmtree(work, ignore_errors=True)


class _Process:
    """A job run as our subprocess `p` (one bubblewrap namespace, or the fallback), for _supervise."""

    def __init__(self, p, cg, where):
        self.p, self.cg, self.where = p, cg, where

    def wait(self, deadline, watch):
        return _reap(self.p, deadline, watch)

    def stop(self, why):
        if self.cg is not None:
            self.cg.kill()
        _kill(self.p)
        return _reap(self.p)


def _pooled(workers, code, stdin, timeout, mem_mb, nproc, out_bytes=MAX_OUTPUT):
    """One job on a worker of `workers` (a pool.Pool); raises RuntimeError / OSError when no worker starts."""
    try:
        code = code.encode("utf-8")
    except UnicodeEncodeError as e:  # lone surrogates in model output
        return Result("", f"sandbox: {e}", -1, False)
    head = json.dumps({"uid": (1 << 20) + secrets.randbelow(1 << 29), "cpu": _backstop(timeout), "mem": mem_mb << 20,
                       "nproc": nproc, "tmpfs": TMPFS_BYTES, "keep": [d for d in PYTHON_DIRS if d.startswith("/tmp/")]})
    for _ in range(2):  # a worker that died (killed from outside, say) is replaced once
        w, fds = workers.take(), []
        try:
            (in_r, in_w), (out_r, out_w), (err_r, err_w), (code_r, code_w) = (_pipe(fds) for _ in range(4))
            cpu0 = w.cg.usage() if w.cg is not None else 0.0  # its worker's cgroup holds this job alone from now
            if w.cg is not None:
                w.cg.limit("memory", _job_memory(mem_mb))
            w.send(head.encode(), [in_r, out_w, err_w, code_r])
            _close(fds, in_r, out_w, err_w, code_r)
            writes = {in_w: stdin.encode("utf-8", "replace"), code_w: code}
            r = _supervise(_InWorker(w), timeout, fds, writes, out_r, err_r, out_bytes, w.cg, cpu0)
        except (OSError, TimeoutError, ValueError) as e:
            w.kill()
            r = Result("", f"sandbox: worker failed: {e}", -1, False)
            continue
        finally:
            _close(fds, *fds)
            workers.put(w)  # (a killed one frees its slot)
        return r
    return r


class _InWorker:
    """A job on pool worker `w`, for _supervise."""

    def __init__(self, w):
        self.w = w
        self.where = lambda: (w.proc_dir, None, (1, 2))  # its processes: the worker's, but bwrap's and the server's

    def wait(self, deadline, watch):
        try:
            return self.w.end(deadline, watch)
        except TimeoutError:
            return None

    def stop(self, why):
        if why != "wall":  # out of CPU, or stalled: its PID 1 goes, and its namespace with it; the worker stays
            self.w.kill_job()
            try:
                return self.w.end(time.monotonic() + 5.0)  # (ended on its own meanwhile: how)
            except (OSError, TimeoutError, ValueError):
                pass
        self.w.kill()  # at the wall cap, the whole worker: a fresh one takes its slot
        return -9, 0.0


def _supervise(job, timeout, fds, writes, out_r, err_r, out_bytes, cg, cpu0=0.0):
    """Every path's one rule: feed a started job (the `writes`, {fd: bytes}) and read its output until it ends,
    or until its _Watch says stop (its CPU, a stall, the wall cap): then it is killed. `job`: .wait(deadline,
    watch) -> (returncode, CPU s) once it has ended (None first if the deadline or the watch came first),
    .stop(why) -> the same, after killing it, .where() for a watch without cgroup (see _Watch). `cg`: the
    cgroup the job runs in (None: none), which had used `cpu0` CPU seconds when the job started."""
    watch = _Watch(timeout, job.where, cg, cpu0)
    end = time.monotonic() + _wall(timeout)
    out, err, closed = _pump(fds, writes, out_r, err_r, end, out_bytes, watch)
    ended = job.wait(end, watch) if closed else None  # it may have closed its pipes and kept running
    if ended is None:
        watch.why = watch.why or "wall"
        ended = job.stop(watch.why)
        # what it wrote before it died (a namespace's teardown ends with the pipes' EOF: ~0.5 s for 64 busy
        # processes on 2 loaded cores)
        o2, e2, _ = _pump(fds, {}, out_r, err_r, time.monotonic() + 2.0, out_bytes)
        out, err = out + o2, err + e2
    rc, cpu = ended
    cpu = max(cpu, cg.usage() - cpu0 if cg is not None else watch.used())
    return _result(out, err, rc, watch.why is not None or cpu >= timeout, out_bytes, watch.why == "stalled")


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


# ---- the watch --------------------------------------------------------------------------------------------------

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
    """where() for a bubblewrap sandbox started as `pid`: its PID namespace's own /proc, reached through its
    init (bwrap's child), once bwrap has mounted it (before, that path shows the host's /proc)."""
    init, proc = [], []

    def where():
        if not init and (c := _child(pid)) is not None:
            init.append(c)
        if init and not proc and (_stat(f"/proc/{init[0]}/root/proc/1/stat") or (None,))[0] == \
                (_stat(f"/proc/{init[0]}/stat") or (0,))[0]:
            proc.append(f"/proc/{init[0]}/root/proc")
        return (proc or [None])[0], None, ()
    return where


def _schedstat(path):
    """(CPU ns, run-queue wait ns) of a task from its schedstat (the kernel adds a wait when the task next runs),
    and whether it is runnable now (state R, from its stat); None once it is gone."""
    try:
        with open(f"{path}/schedstat", "rb") as f:
            run_ns, wait_ns = f.read().split()[:2]
        with open(f"{path}/stat", "rb") as f:
            return int(run_ns), int(wait_ns), f.read().rsplit(b")", 1)[1].split()[0] == b"R"
    except (OSError, IndexError, ValueError):
        return None


class _Watch:
    """Looks at a running job every POLL s and says when it must stop, and why: 'cpu' once its CPU time reaches
    `timeout`; 'stalled' once over the last `timeout` s of wall time it was busy less than STALL of the time;
    'wall' at the wall cap. Its CPU: its cgroup's usage since `cpu0` (`cg`), else from /proc (`where()`: (the
    procfs its processes are listed in, or None until known; their session, or None; pids to leave out)):
    every live process's own, plus the larger of what the gone ones had used when last seen and what the live
    ones reaped (the kernel adds a child's CPU to its parent's when the parent waits for it): never more than
    the job used, and blind to a process that lives < POLL s and is reaped without a wait.
    Busy: its CPU, plus each thread's run-queue wait (schedstat; a thread runnable at two looks that has not run
    between them waited all along, though the kernel will only say so when it runs), plus any time the job
    waits on us (the pump's `on_us`): a starved job on a loaded machine is busy, not stalled."""

    def __init__(self, timeout, where, cg=None, cpu0=0.0):
        self.timeout, self.where, self.cg, self.cpu0, self.t0 = timeout, where, cg, cpu0, time.monotonic()
        self.next, self.last, self.why = self.t0 + POLL, self.t0, None
        self.seen, self.gone, self.cpu, self.busy, self.tasks = {}, 0, 0.0, 0.0, {}
        self.window = collections.deque([(self.t0, 0.0)])  # (time, busy s so far), back to `timeout` s ago

    def used(self):
        return self.cpu

    def wait(self):
        """Seconds until the next look."""
        return max(0.0, self.next - time.monotonic())

    def stop(self, on_us=None):
        now = time.monotonic()
        if self.why is None and now >= self.next:
            self.next, dt, self.last = now + POLL, now - self.last, now
            cpu, paths = self._look()
            waited, tasks = 0, {}
            for path in paths:
                if (s := _schedstat(path)) is None:
                    continue
                run_ns, wait_ns, runnable = s
                was_run, was_wait, was_r, credit = self.tasks.get(path, (0, 0, False, 0))
                if run_ns < was_run:  # a new task with a reused id
                    was_run, was_wait, was_r, credit = 0, 0, False, 0
                if run_ns == was_run and runnable and was_r:  # runnable all along, not run: waiting, not yet said
                    credit += int(dt * 1e9)
                    waited += int(dt * 1e9)
                else:  # (what it waited meanwhile, less what was counted before the kernel said it)
                    waited += max(0, wait_ns - was_wait - credit)
                    credit = 0
                tasks[path] = run_ns, wait_ns, runnable, credit
            self.tasks = tasks
            self.busy += max(0.0, cpu - self.cpu) + waited / 1e9 + (dt if on_us is not None and on_us() else 0.0)
            self.cpu = max(self.cpu, cpu)
            self.window.append((now, self.busy))
            while len(self.window) > 2 and self.window[1][0] <= now - self.timeout:
                self.window.popleft()
            t, busy = self.window[0]
            self.why = ("cpu" if self.cpu >= self.timeout else
                        "stalled" if now - t >= self.timeout and self.busy - busy < STALL * (now - t) else None)
        if self.why is None and now - self.t0 >= _wall(self.timeout):
            self.why = "wall"
        return self.why is not None

    def _look(self):
        """(its CPU seconds so far, the /proc directories of its threads now)."""
        if self.cg is not None:
            try:
                return self.cg.usage() - self.cpu0, [f"/proc/{t}" for t in self.cg.tids()]
            except (OSError, ValueError):
                return self.cpu, []
        proc, sid, skip = self.where()
        live = {(pid, st[0]): st for pid, st in (_procs(proc, sid, skip) if proc else {}).items()}  # pids get reused
        self.gone += sum(self.seen[k][4] for k in self.seen.keys() - live.keys())
        self.seen = live
        ticks = sum(st[4] for st in live.values()) + max(self.gone, sum(st[5] for st in live.values()))
        return ticks / TICK, [f"{proc}/{pid}/task/{t}" for pid, _ in live for t in _listdir(f"{proc}/{pid}/task")]


def _backstop(timeout):
    """RLIMIT_CPU of each process (whole seconds): past the limit the _Watch enforces, never the limit itself.
    The kernel samples it by the tick: beside two busy processes it killed a program at 0.86 CPU-s of a
    1 s limit (by the program's own clock), a verdict that would depend on the machine's load."""
    return -int(-1.5 * timeout // 1) + 1


def _wall(timeout):
    return WALL_FACTOR * timeout + WALL_SLACK


# ---- the plumbing -----------------------------------------------------------------------------------------------

def _limits(cpu_s, mem_bytes, nproc, cg=None, hide=False, work=None):
    """preexec_fn of a one-namespace or fallback job: its cgroup, /sys hidden and a root of its own built in
    `work` (hide, see _hide_sys), rlimits."""
    def apply():
        os.setsid()  # own process group: a timeout kills every child too
        if cg is not None:
            cg.join()  # before bwrap or unshare start, so all the job's processes are in it
        if hide:
            _hide_sys(work)
        for lim, n in ((resource.RLIMIT_AS, mem_bytes), (resource.RLIMIT_FSIZE, 1 << 20), (resource.RLIMIT_NOFILE, 64),
                       (resource.RLIMIT_NPROC, nproc), (resource.RLIMIT_CORE, 0)):
            resource.setrlimit(lim, (n, n))
        # soft = hard, as in the pool: the kernel's SIGKILL, which neither PID 1 (unshare's fallback) nor a
        # SIGXCPU handler escapes; a backstop only (see _backstop)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
    return apply


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


def _queued(fd):
    """Bytes in the pipe of `fd` (either end)."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


def _pump(fds, writes, out_fd, err_fd, deadline, out_bytes, watch=None):
    """Feed the `writes` ({fd: bytes}), read out_fd/err_fd until both close, the deadline, or `watch` says
    stop: (out, err, closed). Keeps the first out_bytes + 1 bytes of out (the 1 says it was cut) and MAX_OUTPUT of err, and
    drains the rest, so a chatty program neither blocks nor fills us. Closes each written fd when its data is all written (the reader's EOF)."""
    bufs, cap = {out_fd: bytearray(), err_fd: bytearray()}, {out_fd: out_bytes + 1, err_fd: MAX_OUTPUT}

    def on_us():  # the job waits on us (we were slow: a loaded caller): input it has all read, or an output pipe full
        try:
            return any(_queued(fd) == 0 if fd not in bufs else
                       _queued(fd) > fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) - select.PIPE_BUF for fd in sel.get_map())
        except OSError:
            return False
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
            if left <= 0 or watch is not None and watch.stop(on_us):
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


def _kill(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        p.kill()


# ---- one queue, one pool -----------------------------------------------------------------------------------------

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


# which path run() takes is decided here (bench.py and test_sandbox.py read _POOL)
_POOL, _POOL_LOCK = [None], threading.Lock()  # [None: not probed yet | False: unusable here | the pool.Pool]


def _new_pool(size=None):
    return Pool(_bwrap(), PATH, size or CORES)


def _pool():
    """The process's pool.Pool, or None (warned once) when a worker cannot run a job here (bwrap without
    the rights to make nested namespaces, say): then each run gets its own namespace, as before."""
    if _POOL[0] is not None and _POOL[0] is not False and _POOL[0].pid != os.getpid():
        _POOL[0] = None  # a forked child never talks to its parent's workers
    if _POOL[0] is None:
        with _POOL_LOCK:
            if _POOL[0] is None:
                p = _new_pool()
                try:  # not as root, a job could not get a uid of its own (or drop its capabilities): no pool
                    probe = "import os, sys; print(os.getpid(), sys.prefix, os.listdir('/tmp'))"
                    r = (_pooled(p, probe, "", 30.0, 512, 64) if ROOT else Result("", "it needs root, to give every job a uid of its own", -1, False))
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
