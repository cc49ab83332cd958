"""Where a job runs: the bubblewrap namespace (_bwrap), the fallback without it (_fallback), and sandbox.run's
default path, the worker pool: worker processes, one bubblewrap namespace each, each holding a warm interpreter
that forks every job into fresh PID, mount, IPC and cgroup namespaces of its own (own /tmp tmpfs, own /proc,
the program is their PID 1: whatever it leaves dies with it); how, and why each property holds per job: the
comment above _SERVER. The pool starts workers (each in a cgroup of its own, cgroup.py), hands one a job (its
header and pipes), reads how the job ended and kills a job or a worker. What a job may do and the driver that
enforces it on every path (limits, the watch, the kill) are sandbox.py's, which imports this file (this file
imports nothing of it), probes the pool once and falls back to one namespace per run where it fails. Workers
are started by one long-lived thread: they outlive the callers' threads and die with the process.

    python -m pytest -q test_sandbox.py
"""
import ctypes
import json
import os
import queue
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from functools import lru_cache

from cgroup import ROOT, _Cgroup, _cgroup, _cgroups, _counts_memory, _counts_pids  # noqa: F401 (tests use them here)

TMPFS_BYTES = 64 << 20  # all a bwrap-sandboxed program may write
# numpy's OpenBLAS (and OpenMP, MKL, ...) would start one thread per core: each counts against the job's CPU
# limit and adds stack and buffers to its address space (12+ threads exceed 512 MiB): one thread, everywhere
ONE_THREAD = {v: "1" for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
                               "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "GOTO_NUM_THREADS")}
PATH = {"PATH": "/usr/bin:/bin", **ONE_THREAD}
PYTHON_DIRS = sorted({d for d in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                                  os.path.dirname(os.path.realpath(sys.executable)))  # a venv and its Python
                      if d.split("/")[1] not in ("usr", "etc")}, key=len)  # read-only in every namespace


# ---- the box: bubblewrap, the fallback ---------------------------------------------------------------------------

def _works(argv, preexec_fn=None):
    """Does `argv python` run our interpreter with its own stdlib? (A uid that cannot reach the prefix
    still starts Python 3.11+ from frozen modules, then silently picks up another stdlib.)"""
    code = "import json, socket, sys; print(sys.prefix, sys.base_prefix)"
    try:
        p = subprocess.run([*argv, sys.executable, "-I", "-c", code], capture_output=True, text=True,
                           timeout=20, env=PATH, cwd="/", preexec_fn=preexec_fn)
    except (OSError, subprocess.SubprocessError):
        return False
    return p.returncode == 0 and p.stdout.split() == [sys.prefix, sys.base_prefix]


def _drop(uid, root=ROOT):
    """Root only (of the host, or of a job's own user namespace: root=True): no capabilities and no way back
    (util-linux), as `uid` (None: staying uid 0)."""
    ids = [f"--reuid={uid}", f"--regid={uid}", "--clear-groups"] if uid is not None else []
    return ["setpriv", *ids, "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"] if root else []


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
    pre, drop, hide = _fallback()
    how = (f"a root of its own ({'' if ROOT else 'user, '}mount and network namespaces{', ' if pre else ''}"
           f"{' '.join(pre)})" if hide else f"{' '.join(pre) or 'no namespaces'}, without filesystem isolation "
           f"(sandbox.check stops a task)")
    warnings.warn(f"sandbox: bubblewrap missing or not working; falling back to {how} + rlimits"
                  f"{' as root' if ROOT and drop != 'uid' else ''}", RuntimeWarning, stacklevel=3)
    return None


@lru_cache(maxsize=1)
def _fallback():
    """(most isolated `unshare` prefix that works here, how root is dropped, whether the job runs in a root of its
    own (hide: _hide_sys, which also gives it no network)). The drop: 'uid' (as root: an unprivileged uid),
    'caps' (uid 0 without capabilities: as root, where the interpreter is not reachable by other uids even in
    the job's root; not root, the root of the job's own user namespace, the caller's uid outside) or ''
    (nothing to drop, or it failed). Each is probed in a root built as a job's. Not root, a root of its own
    needs unprivileged user namespaces; where there are none the program sees the host's files (check()
    stops a task there). A cgroup is used where the drop is not '': then the program can write no
    cgroup file."""
    exe = shutil.which("unshare", path=PATH["PATH"])  # one that the job's root has too
    with tempfile.TemporaryDirectory(prefix="sbx-probe-") as work:
        build = lambda: _hide_sys(work)
        for hide in [True, False] if _libc() is not None else [False]:  # (libc loaded here, not in a forked child)
            if hide:  # its network namespace is _hide_sys's: unshare only adds the PID namespace
                pres = [[exe, "-p", "-f", "--kill-child", "--mount-proc"]] if exe else []
            else:  # -r: a user namespace lets non-root unshare
                pres = [[exe, *([] if ROOT else ["-r"]), "-n", *x] for x in ("-p -f --kill-child --mount-proc".split(),
                                                                              [])] if exe else []
            # in a root of its own, no capability stays (with one, a chroot is left); not root, they are the job's
            # user namespace's
            drops = ([("uid", _drop(65534)), ("caps" if hide else "", _drop(None) if hide else [])] if ROOT else
                     [("caps", _drop(None, root=True))] if hide else [("", [])])
            for pre in [*pres, []]:
                for drop, argv in drops:
                    if not hide and not pre and not argv or _works(pre + argv, build if hide else None):
                        return pre, drop, hide


@lru_cache(maxsize=1)
def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _hide_sys(work):
    """In a fallback job's process before exec: a root of its own built in `work` as bubblewrap's, in mount and
    network namespaces of its own (private: nothing propagates back; no network): a tmpfs of TMPFS_BYTES, the
    host's system and Python dirs bound in read-only, a few devices, an empty /proc (unshare --mount-proc fills
    it) and /tmp, where it runs (cwd, HOME, TMPDIR) and all it may write. The host's other files (the repository,
    a hub cache of tests and answers, /sys and its cgroup files) are not in it. Not root: first a user namespace
    of its own, where it is root (the caller's uid outside, which RLIMIT_NPROC binds) and may build the rest.
    Its capabilities go before the program runs (_drop), so it cannot chroot out, and the kernel lets no
    chrooted process make a user namespace to get them back."""
    libc = _libc()
    if not ROOT:
        uid, gid = os.getuid(), os.getgid()
        if libc.unshare(0x10000000):  # CLONE_NEWUSER
            raise OSError(ctypes.get_errno(), "sandbox: a user namespace (unprivileged ones are off here?)")
        for f, line in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
            with open(f"/proc/self/{f}", "w") as fh:
                fh.write(line)
    if (libc.unshare(0x00020000 | 0x40000000) or  # CLONE_NEWNS | CLONE_NEWNET
            libc.mount(b"none", b"/", None, 16384 | (1 << 18), None) or  # MS_REC | MS_PRIVATE
            libc.mount(b"none", b"/sys", b"tmpfs", 1 | 2 | 4 | 8, b"size=4k")):  # RDONLY NOSUID NODEV NOEXEC
        raise OSError(ctypes.get_errno(), "sandbox: hiding /sys")
    if libc.mount(b"tmpfs", work.encode(), b"tmpfs", 2 | 4, b"size=%d,mode=0755" % TMPFS_BYTES):  # NOSUID NODEV
        raise OSError(ctypes.get_errno(), "sandbox: a tmpfs for the job's root")
    for d in ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", *PYTHON_DIRS,
              "/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"):
        if os.path.lexists(work + d):  # inside a dir bound already (a venv's bin/)
            continue
        if os.path.islink(d) and d.count("/") == 1:  # merged-/usr symlinks
            os.symlink(os.readlink(d), work + d)
        elif os.path.exists(d):
            os.makedirs(os.path.dirname(work + d), mode=0o755, exist_ok=True)
            os.mkdir(work + d) if os.path.isdir(d) else open(work + d, "w").close()
            # read-only (MS_REMOUNT | MS_BIND | RDONLY | NOSUID, NODEV but for devices), keeping the nosuid, nodev
            # and noexec of its mount: in a user namespace they are locked, and a remount without them fails
            ro = 32 | 4096 | 1 | 2 | (4 if d[:5] != "/dev/" else 0) | os.statvfs(d).f_flag & (2 | 4 | 8)
            if (libc.mount(d.encode(), (work + d).encode(), None, 4096 | 16384, None) or  # MS_BIND | MS_REC
                    libc.mount(None, (work + d).encode(), None, ro, None)):
                raise OSError(ctypes.get_errno(), "sandbox: binding " + d)
    for d, mode in (("/proc", 0o555), ("/tmp", 0o1777)):
        os.makedirs(work + d, exist_ok=True)
        os.chmod(work + d, mode)
    os.chroot(work)
    os.chdir("/tmp")


# ---- the worker pool ---------------------------------------------------------------------------------------------

# One bubblewrap namespace per worker (started once) holds a small trusted server that has already
# started Python. Per job it forks B, PID 1 of a new PID namespace, which unshares new mount and IPC
# namespaces, mounts a fresh 64 MiB tmpfs on /tmp and a fresh /proc (only the job's processes), sets the
# rlimits, drops every capability (bounding set too), sets no_new_privs and a random uid, and exec()s the
# code it reads from a pipe. The program's stdin/stdout/stderr and its code travel in pipes
# straight between sandbox.py and B (passed as fds over a unix socket): the server never holds a program's
# code or input for a later job to find in its memory. When B exits, the kernel kills whatever it left (it
# is PID 1), and the tmpfs and IPC objects go with their namespaces: nothing survives into the next job.
# Concurrent jobs run in different workers. Per run: 2 forks of a warm interpreter instead of a namespace
# set-up plus an interpreter start. The server answers each job with two lines: B's pid, then B's exit
# status and CPU seconds. The whole worker runs in a cgroup of its own (made before bwrap starts; it holds
# one job at a time): a job's CPU is what the cgroup used while the job ran (sandbox._pooled). Not a cgroup
# per job: moving a process into one waits for an RCU grace period (here: 1.6 ms mean, 7 ms p90, 49 ms max
# of wall time per job at the pool's rate), which would cost the pool ~15% of its runs/s.
# B is plain `python -I -c`: its std streams are built as Python builds them, it exits as the interpreter
# does for a program (SystemExit's code or message, threads joined, atexit, streams flushed or exit 120,
# files left open flushed as they are freed), then os._exit: the teardown of the server's own modules was
# a third of a short job's CPU. Python dirs under /tmp are bound back onto its fresh /tmp (test_sandbox's
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
        code = 0
    except SystemExit as e:
        code = exit_code(e.code)
    except BaseException as e:
        e.__traceback__ = e.__traceback__.tb_next  # (the default hook prints this one, not its argument)
        sys.excepthook(type(e), e, e.__traceback__)  # as `python -c` reports it: no frame of ours
        code = 1
    os._exit(finish(main, code))
def exit_code(c):  # as Python's handle_system_exit: None 0, an int itself, anything else printed, then 1
    if c is None or isinstance(c, int):
        return c or 0
    try:
        print(c, file=sys.stderr)
    except Exception:
        pass
    return 1
def finish(main, code):
    # the program's part of Py_FinalizeEx: non-daemon threads joined, atexit, std streams flushed (a failure:
    # exit 120), files it left open flushed as they are freed; then os._exit, without tearing down the
    # server's own modules (most of the time of a short job)
    import atexit
    if "threading" in sys.modules:  # as Python does: only a program that imported it has threads to join
        sys.modules["threading"]._shutdown()
    atexit._run_exitfuncs()
    code = flush(code)
    main.__dict__.clear()
    gc.collect()
    return flush(code) & 0xFF if -(1 << 31) <= code < 1 << 31 else 255
def flush(code):
    for s in (sys.stdout, sys.stderr):
        try:
            if s is not None and not getattr(s, "closed", False):
                s.flush()
        except Exception:
            if s is sys.stdout:
                code = 120
    return code
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
    sock.sendall(b"%d\n" % pid)  # its pid here (sandbox.py may have to kill it), then how it ended
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


class Worker:
    """One worker: bwrap (`argv`, run with `env`) and the server inside. Per job: send(), then end() (and
    kill_job() or kill() when it must stop). OSError / TimeoutError / ValueError: it is gone or broken (the
    caller kills it and drops it)."""

    def __init__(self, argv, env):
        host, inside = socket.socketpair()
        info_r, info_w = os.pipe()  # bwrap's --info-fd: the pid of its namespace's init
        # the worker's, and so each of its jobs' (None where none can be made); no memory limit until a job's
        self.cg = cg = _cgroup(mem=1 << 50)
        try:
            caps = [x for c in ("SYS_ADMIN", "SETUID", "SETGID", "SETPCAP") for x in ("--cap-add", f"CAP_{c}")]
            self.proc = _spawner(os.getpid()).submit(
                subprocess.Popen, [argv[0], "--info-fd", str(info_w), *argv[1:], *caps, "--", sys.executable, "-I",
                                   "-c", _SERVER, str(inside.fileno())],
                cwd="/", env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                pass_fds=[inside.fileno(), info_w], start_new_session=True,
                preexec_fn=None if cg is None else cg.join).result()
        except BaseException:  # out of processes, say: nothing stays behind
            host.close()
            os.close(info_r)
            if cg is not None:
                cg.remove()
            raise
        finally:
            inside.close()
            os.close(info_w)
        self.sock, self.buf, self.pid = host, b"", None
        with open(info_r, "rb") as info:  # complete once the server is up: bwrap writes it first, then closes it
            try:
                ready, init = self._line(time.monotonic() + 30.0), json.load(info)["child-pid"]
            except (OSError, TimeoutError, ValueError, KeyError):
                ready, init = b"", 0
        # the worker's PID namespace, from its own /proc (bwrap's init is 1, the server 2): its other processes
        # are the job's (its PID 1, in a namespace of its own, and whatever that starts)
        self.proc_dir = f"/proc/{init}/root/proc"
        if ready != b"ready" or sorted(p for p in _listdir(self.proc_dir) if p.isdigit()) != ["1", "2"]:
            self.kill()
            raise RuntimeError("sandbox worker did not start")

    def alive(self):
        return self.proc.poll() is None

    def send(self, head, fds):
        """Start a job: `head` (JSON bytes: its uid and limits), `fds`: its stdin, stdout, stderr and code (the
        caller closes its copies)."""
        self.pid = None
        socket.send_fds(self.sock, [head], fds)

    def end(self, deadline, watch=None):
        """(exit status, CPU seconds) of the job, once it has ended (and its namespace with it); TimeoutError at
        the deadline, or once `watch` (sandbox's _Watch) says stop."""
        self._started(deadline, watch)
        rc, cpu = self._line(deadline, watch).split()
        return int(rc), float(cpu)

    def kill_job(self):
        """SIGKILL the job's PID 1 (the server's child), which takes its whole namespace with it; the worker
        stays. (Signalled through a pidfd, a /proc directory: no pid of ours names it.) False if it could not."""
        try:
            self._started(time.monotonic() + 5.0)
            fd = os.open(f"{self.proc_dir}/{self.pid}", os.O_RDONLY | os.O_DIRECTORY)
        except (OSError, TimeoutError, ValueError):
            return False
        try:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
            return True
        except OSError:
            return False
        finally:
            os.close(fd)

    def kill(self):
        """The whole worker: bwrap, the server, a job and everything it started, and its cgroup."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            self.proc.kill()
        self.proc.wait()
        self.sock.close()
        if self.cg is not None:
            self.cg.remove()

    def _started(self, deadline, watch=None):
        if self.pid is None:  # the server's first line per job: the pid of the job's PID 1, in the worker's namespace
            self.pid = int(self._line(deadline, watch))

    def _line(self, deadline, watch=None):
        """One line from the server (bytes, without its newline) by `deadline` (TimeoutError after it, or once
        `watch` says stop)."""
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if watch is not None and watch.stop():
                raise TimeoutError
            if not select.select([self.sock], [], [], max(0.0, left if watch is None else min(left, watch.wait())))[0]:
                if left <= 0:
                    raise TimeoutError
                continue
            chunk = self.sock.recv(64)
            if not chunk:
                raise OSError("sandbox worker exited")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line


def _listdir(d):
    try:
        return os.listdir(d)
    except OSError:
        return []


class Pool:
    """At most `size` workers (bwrap `argv` run with `env`), started on demand, shared by every thread: take()
    one for a job, put() it back (None: a slot the next taker starts afresh)."""

    def __init__(self, argv, env, size):
        self.argv, self.env, self.idle, self.pid = argv, env, queue.LifoQueue(), os.getpid()
        for _ in range(size):
            self.idle.put(None)  # a free slot: the thread that takes it starts a worker in it

    def take(self):
        w = self.idle.get()
        if w is None:
            try:
                return Worker(self.argv, self.env)
            except BaseException:
                self.idle.put(None)
                raise
        return w

    def put(self, w):
        """Give back a worker after its job; one killed (at the wall cap, say) frees its slot."""
        self.idle.put(w if w is not None and w.alive() else None)

    def close(self):
        workers = []
        while not self.idle.empty():
            workers.append(self.idle.get())
        for w in workers:
            if w is not None:
                w.kill()
            self.idle.put(None)


# ---- before a task runs model code: can it be kept off the host's files here? ------------------------------------

UNSAFE = "ATGRPO_UNSAFE_SANDBOX"  # =1: run model code even where nothing keeps it off the host's files (check())
# the kernel settings that keep an unprivileged user namespace from being made (or from holding capabilities):
# (file under /proc/sys, its value when it does, the value that allows them)
USERNS_OFF = [("kernel/unprivileged_userns_clone", "0", "1"), ("user/max_user_namespaces", "0", "10000"),
              ("kernel/apparmor_restrict_unprivileged_userns", "1", "0")]


def check():
    """Raises RuntimeError, one line naming the fix, where a program would run with the host's files in reach:
    no usable bubblewrap, and the fallback cannot build a root of its own (not root, and unprivileged user
    namespaces are off). train.py and eval.py call it (sandbox.check, through common.sandbox_or_die) before a
    task that runs model code starts; UNSAFE=1 in the environment runs it anyway (the program then reads and
    writes whatever this user can)."""
    if os.environ.get(UNSAFE) == "1" or _bwrap() is not None or _fallback()[2]:
        return
    sysctl = next((f" (`sysctl -w {f.replace('/', '.')}={on}`)" for f, off, on in USERNS_OFF
                   if _read(f"/proc/sys/{f}") == off), "")
    raise RuntimeError(f"sandbox: nothing here keeps model-written code off this machine's files (no usable "
                       f"bubblewrap, no user namespace of its own): `apt-get install bubblewrap`, or allow "
                       f"unprivileged user namespaces{sysctl}; {UNSAFE}=1 runs it anyway")


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None
