"""Run untrusted, model-written Python with limits. Nothing model-written runs anywhere else.

Enforced here (Linux, no root needed): wall-clock timeout with the whole process group killed; CPU
seconds, address space, file size, open files and process count (RLIMIT_NPROC) limits; output capped;
a fresh temporary working directory removed afterwards; a stripped environment (no inherited secrets);
Python in isolated mode (-I: no user site, no PYTHON* variables). Where `unshare -n` works (root, or
user namespaces), the program also runs without network. NOT enforced: reading world-readable files
outside its directory (no filesystem namespace).

    python -m pytest -q test_sandbox.py
"""
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache

MAX_OUTPUT = 1 << 16  # bytes kept of stdout and of stderr


@dataclass
class Result:
    stdout: str
    stderr: str
    returncode: int
    timed_out: bool


@lru_cache(maxsize=1)
def _netns_prefix():
    """['unshare', '-n'] if network namespaces work here, else [] (then network is not blocked)."""
    exe = shutil.which("unshare")
    if exe is None:
        return ()
    try:
        ok = subprocess.run([exe, "-n", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return (exe, "-n") if ok else ()


def _limits(cpu_s, mem_bytes, nproc):
    def apply():
        os.setsid()  # own process group: a timeout kills every child too
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
        resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


def run(code, stdin="", timeout=5.0, mem_mb=512, nproc=64):
    """Run `code` with `stdin`; returns Result(stdout, stderr, returncode, timed_out). Never raises
    for anything the program does."""
    work = tempfile.mkdtemp(prefix="sbx-")
    env = {"PATH": "/usr/bin:/bin", "HOME": work, "TMPDIR": work, "LANG": "C.UTF-8"}
    cmd = [*_netns_prefix(), sys.executable, "-I", "-c", code]
    timed_out = False
    try:
        p = subprocess.Popen(cmd, cwd=work, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, preexec_fn=_limits(int(timeout) + 1, mem_mb << 20, nproc))
        try:
            out, err = p.communicate(stdin.encode(), timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill(p)
            out, err = p.communicate()
        rc = p.returncode
    except OSError as e:
        out, err, rc = b"", f"sandbox: {e}".encode(), -1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    dec = lambda b: b[:MAX_OUTPUT].decode("utf-8", "replace")
    return Result(dec(out), dec(err), rc, timed_out)


def _kill(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        p.kill()
