"""A sandbox job's cgroup: the kernel's account of everything the job starts, children reaped without a wait
included: its CPU (v2's cpu.stat, else v1's cpuacct), and where a controller can count them, its tasks (pids)
and its memory, all its processes together. Root only (a program running as our uid could write it too). Used
by pool.py (a worker's cgroup, which holds one job at a time) and sandbox.py (one per run); the limits
themselves are sandbox.py's.

    python -m pytest -q test_sandbox.py
"""
import errno
import itertools
import os
import signal
import subprocess
import time
import warnings
from functools import lru_cache

ROOT = os.geteuid() == 0
CGROUPS = os.environ.get("SANDBOX_CGROUP", "1") != "0"  # 0: no cgroup per job, the /proc watch alone (for measuring)


def _parent(v, ctrl):
    """This process's cgroup directory on the v2 tree (v=2) or on the v1 hierarchy of controller `ctrl`, or
    None; the sbx- cgroups there of processes that died (killed mid-job: empty, their jobs died with them) are
    removed first. Jobs' cgroups are its children, sbx-<our pid>-<n>."""
    try:
        with open("/proc/self/mountinfo") as f:  # (mount id, parent, dev, root, mount point, ...) - (fs type, source, options)
            mounts = [(a.split(), b.split()) for a, b in (line.split(" - ", 1) for line in f)]
        with open("/proc/self/cgroup") as f:  # (id, controllers: "" on v2, path)
            path = next(p for _, c, p in (line.rstrip("\n").split(":", 2) for line in f)
                        if (c == "" if v == 2 else ctrl in c.split(",")))
        root, point = next((a[3].rstrip("/"), a[4]) for a, b in mounts  # the mount shows the tree from `root` down
                           if b[0] == ("cgroup2" if v == 2 else "cgroup") and (v == 2 or ctrl in b[2].split(","))
                           and (path.rstrip("/") + "/").startswith(a[3].rstrip("/") + "/"))
        parent = os.path.join(point, path[len(root):].strip("/")).rstrip("/")
        for d in os.listdir(parent):
            n = d.split("-")
            if len(n) == 3 and n[0] == "sbx" and n[1].isdigit() and not os.path.exists(f"/proc/{n[1]}"):
                _rmdir(f"{parent}/{d}")
        return parent
    except (OSError, ValueError, StopIteration):
        return None


@lru_cache(maxsize=1)
def _cgroups():
    """(this process's cgroup directory on a hierarchy that counts CPU, its version: 2, else v1's cpuacct), or
    None where a job cannot get a cgroup there: not root (a program running as our uid could write it too),
    SANDBOX_CGROUP=0, no such hierarchy, or no right to make one (a container's read-only /sys/fs/cgroup)."""
    for v, ctrl in ((2, ""), (1, "cpuacct")) if ROOT and CGROUPS else ():
        if (parent := _parent(v, ctrl)) is None:
            continue
        try:
            probe = _Cgroup(parent, v)
            try:  # a process can join one, and its usage reads
                subprocess.run(["true"], preexec_fn=probe.join, check=True, timeout=20)
                probe.usage()
            finally:
                probe.remove()
        except (OSError, ValueError, subprocess.SubprocessError):
            continue
        return parent, v
    if ROOT and CGROUPS:
        warnings.warn("sandbox: no cgroup per job here: a job's CPU is summed from /proc, which misses children that "
                      "live < 50 ms and are reaped without a wait (see docs/sandbox.md)", RuntimeWarning, stacklevel=3)
    return None


@lru_cache(maxsize=None)
def _counts(ctrl):
    """Whether a job's `ctrl` ("pids" or "memory") can be counted by a cgroup here: "v2" (the controller enabled
    below ours on v2: its limit in the job's one cgroup), the directory of our cgroup in v1's hierarchy of it
    (also beside a v2 tree: a hybrid; the job gets a sibling there), or ""."""
    where = _cgroups()
    if where is None:
        return ""
    try:  # (v1 has no such file)
        with open(f"{where[0]}/cgroup.subtree_control") as f:
            if where[1] == 2 and ctrl in f.read().split():
                return "v2"
    except OSError:
        pass
    if (parent := _parent(1, ctrl)) is None:
        return ""
    try:  # a cgroup can be made there, and limited
        os.mkdir(probe := f"{parent}/sbx-{os.getpid()}-probe")
        try:
            with open(f"{probe}/{_limit_file(ctrl, v2=False)}", "w") as f:
                f.write("64" if ctrl == "pids" else str(1 << 30))
        finally:
            os.rmdir(probe)
        return parent
    except OSError:
        return ""


def _limit_file(ctrl, v2):
    """The file of a cgroup's `ctrl` limit ("pids" or "memory") on v2 or in v1's hierarchy of that controller."""
    return "pids.max" if ctrl == "pids" else "memory.max" if v2 else "memory.limit_in_bytes"


def _counts_pids():
    """The only limit on a uid-0 job's process count (RLIMIT_NPROC never binds uid 0); see _counts."""
    return _counts("pids")


def _counts_memory():
    """The only limit on a job's processes' memory together (RLIMIT_AS binds each alone); see _counts."""
    return _counts("memory")


def _rmdir(d, kill=None, wait=0.0):
    """Remove an empty directory (a cgroup); while it is busy, for up to `wait` s: kill() what is in it, retry."""
    end = time.monotonic() + wait
    while True:
        try:
            return os.rmdir(d)
        except OSError as e:
            if e.errno != errno.EBUSY or time.monotonic() > end:
                return
        if kill:
            kill()
        time.sleep(0.002)


class _Cgroup:
    """A job's cgroup (or a pool worker's, which runs one job at a time). Everything the job starts stays in it
    (no cgroup file is reachable from inside), so its CPU usage is the kernel's account of the whole job:
    children reaped without a wait and short-lived ones included."""
    count = itertools.count()

    def __init__(self, parent, v, pids=None, mem=None):
        """pids: the most tasks (processes and threads) it may hold; mem: the most bytes its processes may hold
        together (their pages, their tmpfs files); each where a cgroup can count it (_counts): v2 the same
        cgroup's limit, v1 a sibling in that controller's hierarchy, joined alike. Past `mem` the kernel's OOM
        killer kills inside it (the largest of its processes), never the trainer beside it."""
        name = f"sbx-{os.getpid()}-{next(self.count)}"
        self.path, self.v, self.procs, self.siblings, self.limits = f"{parent}/{name}", v, None, [], {}
        os.mkdir(self.path)
        try:  # written by the job's first process (before it runs anything of the program's): "0" is the writer
            self.procs = os.open(f"{self.path}/cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
            for ctrl, n in (("pids", pids), ("memory", mem)):
                if n is None or not (where := _counts(ctrl)):
                    continue
                d = self.path if where == "v2" else f"{where}/{name}"
                if d != self.path:
                    os.mkdir(d)
                    self.siblings.append([d, os.open(f"{d}/cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)])
                self.limits[ctrl] = [f"{d}/{_limit_file(ctrl, v2=where == 'v2')}", None]
                self.limit(ctrl, n)
        except OSError:
            self.remove()
            raise

    def limit(self, ctrl, n):
        """Set its `ctrl` limit to n (between a worker's jobs: the next job's), where it counts `ctrl`."""
        if ctrl in self.limits and self.limits[ctrl][1] != n:
            with open(self.limits[ctrl][0], "w") as f:
                f.write(str(n))
            self.limits[ctrl][1] = n

    def join(self):
        """In the job's first process, before it runs anything of the program's (preexec_fn): in, for good."""
        os.write(self.procs, b"0")
        for _, fd in self.siblings:
            os.write(fd, b"0")

    def usage(self):
        """CPU seconds of everything that ever ran in it (once removed: by then)."""
        if self.procs is None:
            return self.last
        with open(f"{self.path}/{'cpu.stat' if self.v == 2 else 'cpuacct.usage'}", "rb") as f:
            s = f.read()
        return int(s.split(b"\n", 1)[0].split()[-1]) / (1e6 if self.v == 2 else 1e9)  # usage_usec, or ns

    def tids(self):
        """Its threads now (host ids)."""
        with open(f"{self.path}/{'cgroup.threads' if self.v == 2 else 'tasks'}", "rb") as f:
            return [int(t) for t in f.read().split()]

    def kill(self):
        try:  # cgroup v2, Linux 5.14+: the kernel kills them all
            with open(f"{self.path}/cgroup.kill", "w") as f:
                f.write("1")
            return
        except OSError:
            pass
        for _ in range(100):  # each pass SIGKILLs whatever it lists; a killed process forks no more
            with open(f"{self.path}/cgroup.procs", "rb") as f:
                pids = [int(p) for p in f.read().split()]
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def remove(self):
        """Kill what is left in it and remove it (retried while the last processes finish dying); one that will
        not go stays, for the leak census of test_sandbox.py to find. Again: nothing."""
        if self.procs is not None:
            try:
                self.last = self.usage()
            except (OSError, ValueError):
                self.last = 0.0
        for fd in [self.procs] + [fd for _, fd in self.siblings]:
            if fd is not None:
                os.close(fd)
        opened, self.procs = self.procs is not None, None
        _rmdir(self.path, self.kill if opened else None, 5.0 if opened else 0.0)  # (never opened: set-up failed)
        for d, _ in self.siblings:  # the same processes: dead now, or the census finds them
            _rmdir(d, wait=5.0)
        self.siblings = []


def _cgroup(pids=None, mem=None):
    """A new cgroup for one job (at most `pids` tasks, `mem` bytes, where a cgroup can count them), or None where
    none can be made."""
    where = _cgroups()
    try:
        return _Cgroup(*where, pids=pids, mem=mem) if where else None
    except OSError:  # (out of cgroups, say: this job is watched from /proc)
        return None
