"""bench.py's command line, without measuring anything (the sections themselves: test_scale.py runs the scale
one; the others are minutes of measurement, run by hand).

    python -m pytest -q test_bench.py
"""
import sys

import pytest

import bench


def test_no_flag_measures_code_that_is_gone(monkeypatch):
    """--sandbox_before FILE claimed to measure an older sandbox.py's pool. Since 88d3158 the pool lives in
    pool.py (and cgroup.py), which an old sandbox.py imports from the working tree: it measured today's pool
    under an old driver, or failed (f5adb25's, the one docs/sandbox.md compared, calls Pool() without the
    arguments today's takes). The flag is gone: refused by the parser, before any measuring."""
    monkeypatch.setattr(sys, "argv", ["bench.py", "--sections", "sandbox", "--sandbox_before", "old_sandbox.py"])
    monkeypatch.setattr(bench, "bench_sandbox", lambda *a: pytest.fail("measured"))
    with pytest.raises(SystemExit) as e:
        bench.main()
    assert e.value.code == 2
