"""sandbox.py against hostile programs, on the bubblewrap path and on the fallback path."""
import os
import resource
import socket
import subprocess
import time
import uuid

import pytest

import sandbox

HERE = os.path.dirname(os.path.abspath(__file__))
BWRAP = sandbox._bwrap() is not None
MODES = [pytest.param(True, id="bwrap", marks=pytest.mark.skipif(not BWRAP, reason="bubblewrap not usable here")),
         pytest.param(False, id="fallback")]


@pytest.fixture(params=MODES)
def bw(request):
    return request.param


def run(code, bw, **kw):
    return sandbox.run(code, bwrap=bw, **kw)


def procs_with(marker, grace=3.0):
    """Pids whose command line contains `marker` (every sandbox process carries its code in argv), after
    up to `grace` s for SIGKILLed processes to be scheduled and finish dying on a loaded machine."""
    end = time.monotonic() + grace
    while True:
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(pid))
            except OSError:
                pass
        if not found or time.monotonic() > end:
            return found
        time.sleep(0.1)


def test_stdin_to_stdout(bw):
    r = run("import sys\ns = sys.stdin.read()\nprint(s.upper()[:5], len(s))", bw, stdin="hello" + "x" * (1 << 20))
    assert r == sandbox.Result(f"HELLO {5 + (1 << 20)}\n", "", 0, False)


def test_syntax_error_is_a_result(bw):
    r = run("def (:", bw)
    assert r.returncode != 0 and "SyntaxError" in r.stderr and not r.timed_out


@pytest.mark.parametrize("code", ["while True: pass",
                                  "import os, time\nos.close(1); os.close(2)\ntime.sleep(60)"],
                         ids=["busy", "closed-pipes-sleeping"])
def test_timeout_returns_promptly(bw, code):
    t = time.monotonic()
    r = run(code, bw, timeout=1.0)
    assert r.timed_out and r.returncode != 0
    assert time.monotonic() - t < 3.0


def test_background_child_is_not_left_behind(bw):
    if not bw and "-p" not in sandbox._fallback()[0]:
        pytest.skip("no PID namespace in the fallback here: a child that calls setsid() escapes the group kill")
    marker = f"sbx-bg-{uuid.uuid4().hex}"
    code = (f"import os, time  # {marker}\nfor _ in range(3):\n    if os.fork() == 0:\n        os.setsid()\n"
            f"        time.sleep(60)\nprint('parent done')")
    r = run(code, bw, timeout=5.0)
    assert r.stdout == "parent done\n" and r.returncode == 0 and not r.timed_out  # done when its main process is
    assert procs_with(marker) == []


@pytest.mark.parametrize("style", ["fork", "spawn"])
def test_fork_bomb_is_contained(bw, style):
    if run("import os; print(os.getuid())", bw).stdout.strip() == "0":
        pytest.skip("sandbox runs as uid 0 here: RLIMIT_NPROC does not bind root, a fork bomb would not be contained")
    marker = f"sbx-bomb-{uuid.uuid4().hex}"
    body = ("os.fork()" if style == "fork" else
            f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)  # {marker}'])")
    code = f"import os, subprocess, sys  # {marker}\nwhile True:\n    try:\n        {body}\n    except OSError:\n" \
           "        pass"
    t = time.monotonic()
    r = run(code, bw, timeout=2.0)
    assert r.timed_out and time.monotonic() - t < 2.0 + 4.0
    assert procs_with(marker) == []
    assert subprocess.run(["true"]).returncode == 0  # we can still fork


def test_process_count_is_limited(bw):
    if run("import os; print(os.getuid())", bw).stdout.strip() == "0":
        pytest.skip("sandbox runs as uid 0 here: RLIMIT_NPROC does not bind root")
    marker = f"sbx-nproc-{uuid.uuid4().hex}"
    code = (f"import os, time  # {marker}\nn = 0\nfor _ in range(200):\n    try:\n        if os.fork() == 0:\n"
            f"            time.sleep(60)\n        n += 1\n    except OSError:\n        break\nprint(n)")
    r = run(code, bw, nproc=20)
    assert r.returncode == 0 and 0 < int(r.stdout) < 20, r
    assert procs_with(marker) == []


@pytest.mark.parametrize("code", ["x = bytearray(1 << 30)",
                                  "a = []\nwhile True:\n    a.append(bytearray(1 << 24))"], ids=["one", "grow"])
def test_memory_bomb(bw, code):
    before = resource.getrlimit(resource.RLIMIT_AS)
    r = run(code, bw, mem_mb=256)
    assert r.returncode != 0 and "MemoryError" in r.stderr and not r.timed_out
    assert resource.getrlimit(resource.RLIMIT_AS) == before
    assert len(bytearray(300 << 20)) == 300 << 20  # our own memory is not limited


def test_huge_output_is_capped(bw):
    r = run("import sys\nfor _ in range(2000):\n    sys.stdout.write('x' * 65536)\nsys.stderr.write('e' * 10**6)", bw,
            timeout=20.0)
    assert r.returncode == 0 and not r.timed_out
    assert r.stdout == "x" * sandbox.MAX_OUTPUT and r.stderr == "e" * sandbox.MAX_OUTPUT


@pytest.mark.skipif(not BWRAP, reason="bubblewrap not usable here; the fallback does not isolate the filesystem")
def test_cannot_touch_host_files():
    name = f"sbx-escape-{uuid.uuid4().hex}"
    targets = [f"/tmp/{name}", os.path.join(HERE, name), os.path.join(os.path.expanduser("~"), name)]
    code = (f"import os\nprint(os.path.exists({os.path.join(HERE, 'sandbox.py')!r}))\n"
            f"for p in {targets!r}:\n    try:\n        open(p, 'w').write('x')\n    except OSError as e:\n"
            f"        print(type(e).__name__)")
    try:
        r = sandbox.run(code)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("False\n")  # the repo is not even visible
        assert [p for p in targets if os.path.exists(p)] == []
    finally:
        for p in targets:
            if os.path.exists(p):
                os.remove(p)


def test_workdir_is_removed(bw):
    name = f"sbx-mark-{uuid.uuid4().hex}"
    r = run(f"import os\nopen({name!r}, 'w').write('x')\nprint(os.getcwd())", bw)
    assert r.returncode == 0, r.stderr
    cwd = r.stdout.strip()
    assert cwd and not os.path.exists(os.path.join(cwd, name))


def test_parent_environment_is_invisible(bw, monkeypatch):
    secret = f"hunter2-{uuid.uuid4().hex}"
    monkeypatch.setenv("SBX_SECRET", secret)
    code = (f"import os\nprint(dict(os.environ))\n"
            f"for pid in {{os.getppid(), {os.getpid()}, *filter(str.isdigit, os.listdir('/proc'))}}:\n"
            f"    try:\n        print(open(f'/proc/{{pid}}/environ', 'rb').read())\n"
            f"    except OSError as e:\n        print(pid, type(e).__name__)")
    r = run(code, bw)
    assert r.returncode == 0, r.stderr
    assert "HOME" in r.stdout and secret not in r.stdout + r.stderr


def test_no_network(bw):
    if not bw and "-n" not in sandbox._fallback()[0]:
        pytest.skip("neither bwrap nor `unshare -n` works here: the fallback has network")
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        srv.setblocking(False)
        code = (f"import socket\ns = socket.socket()\ns.settimeout(2)\ntry:\n"
                f"    s.connect(('127.0.0.1', {srv.getsockname()[1]})); print('connected')\n"
                f"except OSError as e:\n    print('blocked', e)")
        r = run(code, bw)
        assert r.stdout.startswith("blocked"), r
        with pytest.raises(BlockingIOError):
            srv.accept()


def test_cannot_kill_the_caller(bw):
    if int(run("import os; print(os.getpid())", bw).stdout) > 2:
        pytest.skip("no PID namespace here: a root child could signal any process")
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        code = (f"import os, signal\nfor f in (lambda: os.kill({sleeper.pid}, 9), lambda: os.kill({os.getpid()}, 9),\n"
                f"          lambda: os.kill(os.getppid(), 9), lambda: os.killpg(os.getpgid(os.getppid()), 9),\n"
                f"          lambda: os.kill(-1, 9), lambda: os.killpg(0, 9)):\n"
                f"    try:\n        f()\n    except OSError as e:\n        print(type(e).__name__, flush=True)")
        r = run(code, bw)
        assert isinstance(r, sandbox.Result) and not r.timed_out
        assert sleeper.poll() is None  # a host process it was told the pid of
    finally:
        sleeper.kill()
        sleeper.wait()


def test_run_many_in_order(bw):
    jobs = [(f"import time\ntime.sleep({0.1 * (i % 3)})\nprint(int(input()) ** 2)", str(i)) for i in range(16)]
    rs = sandbox.run_many(jobs, timeout=10.0, bwrap=bw)
    assert [r.stdout for r in rs] == [f"{i * i}\n" for i in range(16)]
    assert all(r.returncode == 0 and not r.timed_out for r in rs)


def test_missing_bwrap_falls_back_with_one_warning(monkeypatch):
    which = sandbox.shutil.which
    monkeypatch.setattr(sandbox.shutil, "which", lambda n: None if n == "bwrap" else which(n))
    sandbox._bwrap.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="bubblewrap") as rec:
            rs = [sandbox.run("print(6 * 7)") for _ in range(2)]
        assert len([w for w in rec if "bubblewrap" in str(w.message)]) == 1
        assert [r.stdout for r in rs] == ["42\n"] * 2
    finally:
        sandbox._bwrap.cache_clear()


def test_unrunnable_text_is_a_result_not_an_exception():
    # model output can hold NUL bytes or lone surrogates, which no exec() argument can carry
    for code, stdin in [("print(1)\x00", ""), ("print('\ud800')", ""), ("print(input())", "\ud800x")]:
        r = sandbox.run(code, stdin=stdin, timeout=5.0)
        assert isinstance(r, sandbox.Result) and not r.timed_out
    assert sandbox.run("print(1)\x00").returncode != 0
