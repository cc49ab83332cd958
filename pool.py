"""The worker pool, sandbox.run's default path: one bubblewrap namespace per worker, one worker per core
(CORES), each holding a warm interpreter that forks every job into fresh PID, mount and IPC namespaces of
its own (own /tmp tmpfs, own /proc, the program is their PID 1: whatever it leaves dies with it), with the
limits and uid drop of sandbox.py's other paths; how, and why each property holds per job: the comment
above _SERVER. Workers are started by one long-lived thread: they outlive the callers' threads and die
with the process. Callers use sandbox.run / run_many, never this file: sandbox._pool() probes the pool
once and falls back to one namespace per run where it fails. The limits, the _Watch, the pipes and the
bubblewrap argv are sandbox.py's (imported from it; sandbox.py imports this file only lazily, in _pool).

    python -m pytest -q test_sandbox.py
"""
import json
import os
import secrets
import select
import signal
import socket
import subprocess
import sys
import time
from functools import lru_cache

from sandbox import (CORES, MAX_OUTPUT, PATH, PYTHON_DIRS, TMPFS_BYTES, Result, _backstop, _bwrap, _child, _close,
                     _kill, _pipe, _procs, _pump, _result, _wall, _Watch)

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
        # the worker's PID namespace, from its own /proc (bwrap's init is 1, the server 2): its other processes
        # are the job's (its PID 1, in a namespace of its own, and whatever that starts)
        self.proc_dir = f"/proc/{_child(self.proc.pid)}/root/proc"
        if ready != b"ready\n" or _procs(self.proc_dir).keys() != {1, 2}:
            self.kill()
            raise RuntimeError("sandbox worker did not start")

    def _reply(self, wait, watch=None):
        """One line from the server (bytes, with its newline) within `wait` seconds (TimeoutError after them,
        or once `watch` says stop)."""
        end, buf = time.monotonic() + wait, b""
        while not buf.endswith(b"\n"):
            left = end - time.monotonic()
            if watch is not None and watch.stop():
                raise TimeoutError
            if not select.select([self.sock], [], [], max(0.0, left if watch is None else min(left, watch.wait())))[0]:
                if left <= 0:
                    raise TimeoutError
                continue
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
            head = json.dumps({"uid": (1 << 20) + secrets.randbelow(1 << 29), "cpu": _backstop(timeout),
                               "mem": mem_mb << 20, "nproc": nproc, "tmpfs": TMPFS_BYTES,
                               "keep": [d for d in PYTHON_DIRS if d.startswith("/tmp/")]}).encode()
            socket.send_fds(self.sock, [head], [in_r, out_w, err_w, code_r])
            _close(fds, in_r, out_w, err_w, code_r)
            end = time.monotonic() + _wall(timeout)
            watch = _Watch(timeout, lambda: _procs(self.proc_dir, skip=(1, 2)))
            writes = {in_w: stdin.encode("utf-8", "replace"), code_w: code}
            out, err, closed = _pump(fds, writes, out_r, err_r, end, out_bytes, watch)
            for _ in range(2):
                if closed:
                    try:
                        rc, cpu = self._reply(end - time.monotonic(), watch if watch.why is None else None).split()
                        return _result(out, err, int(rc), watch.why is not None or
                                       max(float(cpu), watch.used()) >= timeout, out_bytes, watch.why == "stalled")
                    except (TimeoutError, ValueError):  # it closed its pipes and kept running
                        pass
                if watch.why not in ("cpu", "stalled") or not self.kill_job():
                    break
                end = time.monotonic() + 5.0  # the server reaps the job (its namespace dies with it) and replies
                o2, e2, closed = _pump(fds, {}, out_r, err_r, end, out_bytes)
                out, err = out + o2, err + e2
            self.kill()  # the whole namespace: the program and everything it started
            o2, e2, _ = _pump(fds, {}, out_r, err_r, time.monotonic() + 2.0, out_bytes)
            return _result(out + o2, err + e2, -9, True, out_bytes, watch.why == "stalled")
        finally:
            _close(fds, *fds)

    def kill_job(self):
        """SIGKILL the job's PID 1 (the server's child), which takes its whole namespace with it; the worker
        stays. (Signalled through a pidfd, a /proc directory: no pid of ours names it.) False if none."""
        pid = next((p for p, st in _procs(self.proc_dir, skip=(1, 2)).items() if st[2] == 2), None)
        try:
            fd = os.open(f"{self.proc_dir}/{pid}", os.O_RDONLY | os.O_DIRECTORY)
        except (OSError, TypeError):
            return False
        try:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
            return True
        except OSError:
            return False
        finally:
            os.close(fd)

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
