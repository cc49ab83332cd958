"""gpu_check.sh, as far as a CPU reaches it: it parses, and on a CUDA box it checks the NVIDIA driver FIRST
(vllm==0.32.0's wheel is a CUDA 13 build: driver >= 580), before anything imports torch, with a one-line
error. nvidia-smi is faked on PATH; the GPU steps themselves (logp_gap under both vLLM model runners, the
memory plan beside the measured peak) run only on a GPU.
    python -m pytest -q test_gpu_check.py"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_gpu_check_parses():
    r = subprocess.run(["bash", "-n", "gpu_check.sh"], cwd=HERE, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def check_with_driver(tmp_path, script):
    """gpu_check.sh with DEVICE=cuda and `script` as nvidia-smi: (exit status, its output lines)."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\n" + script + "\n")
    (fake / "nvidia-smi").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "DEVICE": "cuda", "PY": sys.executable,
           "OUT": str(tmp_path / "out")}
    r = subprocess.run(["bash", "gpu_check.sh"], cwd=HERE, capture_output=True, text=True, env=env, timeout=120)
    return r.returncode, (r.stdout + r.stderr).strip().splitlines()


def test_an_old_or_missing_driver_is_a_one_line_error_first(tmp_path):
    for i, script in enumerate(("echo 570.86.15", "echo 'NVIDIA-SMI has failed'; exit 9")):
        d = tmp_path / str(i)
        d.mkdir()
        code, lines = check_with_driver(d, script)
        assert code == 2 and len(lines) == 1, lines
        assert "driver" in lines[0] and ">= 580" in lines[0] and "CUDA 13" in lines[0], lines
    d = tmp_path / "new"
    d.mkdir()
    code, lines = check_with_driver(d, "echo 580.95.05")  # passes the driver, then finds no GPU here
    assert code == 2 and "driver 580.95.05" in "\n".join(lines) and "no CUDA device visible" in lines[-1], lines


def test_report_prints_logp_gap_under_both_model_runners(tmp_path):
    """The report at the end of gpu_check.sh (its python, run on fake metrics): with the per-role run
    repeated under VLLM_USE_V2_MODEL_RUNNER=0 it prints logp_gap under Model Runner V2 and V1."""
    text = open(os.path.join(HERE, "gpu_check.sh")).read()
    report = text.split('$PY - "${RUNS[@]}" <<\'EOF\'\n', 1)[1].split("\nEOF\n", 1)[0]
    row = '{"step": %d, "tokens": 100, "time/rollout": 1.0, "time/update": 1.0, "time/sync": 0.1, "logp_gap": %g}'
    dirs = []
    for name, gap in (("tiny-per-role", 0.02), ("tiny-per-role-runner-v1", 0.003)):
        d = tmp_path / name
        d.mkdir()
        (d / "metrics.jsonl").write_text("\n".join(row % (s, gap * s) for s in (1, 2)) + "\n")
        dirs.append(str(d))
    r = subprocess.run([sys.executable, "-c", report, *dirs], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "Model Runner V2 (vLLM's default on CUDA) 4.0e-02, V1 (VLLM_USE_V2_MODEL_RUNNER=0) 6.0e-03" in r.stdout, r.stdout
    r = subprocess.run([sys.executable, "-c", report, dirs[0]], capture_output=True, text=True)
    assert "V1 only" in r.stdout, r.stdout
