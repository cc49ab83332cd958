"""Run untrusted, model-written Python with limits. Nothing model-written runs anywhere else.

Always (Linux): a wall-clock timeout, after which the process group (and namespace) is SIGKILLed and
run() returns; rlimits on CPU seconds, address space, file size (1 MiB), open files, processes, core
dumps; stdout/stderr capped at MAX_OUTPUT while read; a stripped environment; Python isolated mode (-I).

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
Never enforced: syscall filtering (no seccomp); disk use in the fallback beyond 1 MiB per file.
Cost of print(1) here (shared 2-core box): bare python ~18 ms, fallback ~25 ms, bwrap ~31 ms per
serial run; run_many ~13 (fallback) vs ~18 (bwrap) ms per job.

    python -m pytest -q test_sandbox.py
"""
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
import time
import warnings
from dataclasses import dataclass
from functools import lru_cache

MAX_OUTPUT = 1 << 16  # bytes kept of stdout and of stderr
TMPFS_BYTES = 64 << 20  # all a bwrap-sandboxed program may write
ROOT = os.geteuid() == 0
PATH = {"PATH": "/usr/bin:/bin"}


@dataclass
class Result:
    stdout: str
    stderr: str
    returncode: int
    timed_out: bool


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
    py = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
          os.path.dirname(os.path.realpath(sys.executable))}  # a venv and the Python it points at
    py = {d for d in py if d.split("/")[1] not in ("usr", "etc")}
    ups = set()  # bwrap makes missing parents 0700, untraversable for the dropped uid: make them 0755
    for d in py:
        while (d := os.path.dirname(d)) not in ("/", "/tmp", ""):
            ups.add(d)
    for d in sorted(ups, key=len):
        a += ["--perms", "0755", "--dir", d]
    for d in sorted(py, key=len):
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
        for lim, n in ((resource.RLIMIT_CPU, cpu_s), (resource.RLIMIT_AS, mem_bytes), (resource.RLIMIT_FSIZE, 1 << 20),
                       (resource.RLIMIT_NOFILE, 64), (resource.RLIMIT_NPROC, nproc), (resource.RLIMIT_CORE, 0)):
            resource.setrlimit(lim, (n, n))
    return apply


def run(code, stdin="", timeout=5.0, mem_mb=512, nproc=64, bwrap=True):
    """Run `code` with `stdin`; returns Result(stdout, stderr, returncode, timed_out). Never raises for
    anything the program does; returns at most ~2 s after `timeout`. bwrap=False forces the fallback."""
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
    timed_out, out, err = False, b"", b""
    try:
        p = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, preexec_fn=_limits(int(timeout) + 1, mem_mb << 20, nproc))
        try:
            end = time.monotonic() + timeout
            out, err, closed = _pump(p, stdin.encode("utf-8", "replace"), end)
            if not closed:
                raise subprocess.TimeoutExpired(cmd, timeout)
            p.wait(max(0.0, end - time.monotonic()))  # it may have closed its pipes and kept running
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill(p)
            p.wait()
            # the namespace's teardown ends with the pipes' EOF (~0.5 s for 64 busy processes on 2 loaded cores)
            o2, e2, _ = _pump(p, b"", time.monotonic() + 2.0)
            out, err = (out + o2)[:MAX_OUTPUT], (err + e2)[:MAX_OUTPUT]
        finally:
            _kill(p)  # leftovers in a fallback without PID namespace (pgid stays reserved while in use)
            for f in (p.stdin, p.stdout, p.stderr):
                f.close()
        rc = p.wait()
    except (OSError, subprocess.SubprocessError, ValueError) as e:  # ValueError: NUL bytes / surrogates in code
        out, err, rc = b"", f"sandbox: {e}".encode(), -1
    finally:
        if work:
            shutil.rmtree(work, ignore_errors=True)
    dec = lambda b: b[:MAX_OUTPUT].decode("utf-8", "replace")
    return Result(dec(out), dec(err), rc, timed_out)


def _pump(p, data, deadline):
    """Feed stdin, read stdout/stderr until both close or the deadline: (out, err, closed). Keeps the
    first MAX_OUTPUT bytes of each and drains the rest, so a chatty program neither blocks nor fills us."""
    bufs = {p.stdout: bytearray(), p.stderr: bytearray()}
    with selectors.DefaultSelector() as sel:
        for f in bufs:
            if not f.closed:
                sel.register(f, selectors.EVENT_READ)
        if data and not p.stdin.closed:
            sel.register(p.stdin, selectors.EVENT_WRITE)
        else:
            p.stdin.close()
        data = memoryview(data)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(bufs[p.stdout]), bytes(bufs[p.stderr]), False
            for key, _ in sel.select(left):
                f = key.fileobj
                if f is p.stdin:
                    try:  # writable means PIPE_BUF bytes of room: this cannot block
                        data = data[os.write(f.fileno(), data[:select.PIPE_BUF]):]
                    except BrokenPipeError:  # it stopped reading
                        data = data[:0]
                    if not data:
                        sel.unregister(f)
                        f.close()
                    continue
                chunk = os.read(f.fileno(), 1 << 16)
                if not chunk:
                    sel.unregister(f)
                bufs[f] += chunk[: MAX_OUTPUT - len(bufs[f])]
    return bytes(bufs[p.stdout]), bytes(bufs[p.stderr]), True


def run_many(jobs, timeout=5.0, workers=None, **limits):
    """Run (code, stdin) jobs in parallel, one per core by default (threads: each job is a subprocess,
    so the GIL is not held while they run). Returns Results in input order."""
    from concurrent.futures import ThreadPoolExecutor
    jobs = list(jobs)
    _bwrap() if limits.get("bwrap", True) else _fallback()  # probe (and warn) once, not once per thread
    with ThreadPoolExecutor(max_workers=workers or len(os.sched_getaffinity(0)) or 1) as pool:
        return list(pool.map(lambda j: run(j[0], j[1], timeout, **limits), jobs))


def _kill(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        p.kill()
