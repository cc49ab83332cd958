"""End to end: short training runs, checkpoints, resume, CLI errors. python -m pytest -q test_train.py

Each run is a subprocess (as a user runs it), so every vLLM engine lives in its own process."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
BASE = ["--task", "plan_path", "--size", "5", "--tool_mode", "direct", "--max_turns", "2", "--K", "3",
        "--problems", "2", "--max_tokens", "8", "--lr", "1e-3", "--device", "cpu"]


def run(args, check=True, env=None):
    e = dict(os.environ, **(env or {}))
    p = subprocess.run([sys.executable, os.path.join(HERE, "train.py"), *args], capture_output=True, text=True,
                       cwd=HERE, env=e, timeout=600)
    if check and p.returncode != 0:
        raise AssertionError(f"train.py failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return p


def metrics(d):
    return [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]


REQUIRED = ["step", "success", "reward/tool", "reward/planner", "zero_adv_frac", "logp_gap", "tokens",
            "time/rollout", "time/update", "time/sync"]


@pytest.mark.slow
@pytest.mark.parametrize("engine,policies", [("vllm", "per-role"), ("vllm", "shared"), ("hf", "per-role")])
def test_two_steps_write_metrics_and_checkpoints(tiny_dir, tmp_path, engine, policies):
    out = str(tmp_path / "run")
    run(BASE + ["--model", tiny_dir, "--engine", engine, "--policies", policies, "--steps", "2",
                "--out_dir", out, "--eval_n", "4"])
    ms = metrics(out)
    assert [m["step"] for m in ms] == [1, 2]
    for m in ms:
        assert all(k in m for k in REQUIRED), set(REQUIRED) - set(m)
        assert m["logp_gap"] < 1e-4  # sampler and trainer agree (fp32)
    ck = os.path.join(out, open(os.path.join(out, "latest")).read().strip())
    names = ["tool", "planner"] if policies == "per-role" else ["shared"]
    from transformers import AutoModelForCausalLM
    for n in names:
        AutoModelForCausalLM.from_pretrained(os.path.join(ck, n))  # a loadable HF directory
    s = json.load(open(os.path.join(out, "summary.json")))
    assert {"success_before", "success_after", "wall_s"} <= set(s)
    assert os.path.getsize(os.path.join(out, "samples.jsonl")) > 0


@pytest.mark.slow
def test_parallel_sampling_runs(tiny_dir, tmp_path):
    out = str(tmp_path / "par")
    run(BASE + ["--model", tiny_dir, "--engine", "hf", "--sampling", "parallel", "--steps", "1", "--out_dir", out])
    assert metrics(out)[0]["groups"] == 2 * 2  # (problem, role) groups


@pytest.mark.slow
def test_resume_matches_uninterrupted_run(tiny_dir, tmp_path):
    common = BASE + ["--model", tiny_dir, "--engine", "hf", "--policies", "per-role", "--seed", "3",
                     "--temperature", "1.5"]
    full, part = str(tmp_path / "full"), str(tmp_path / "part")
    run(common + ["--steps", "4", "--out_dir", full, "--save_every", "2"])
    run(common + ["--steps", "2", "--out_dir", part, "--save_every", "2"])
    # the "interrupted" run: continue to 4 steps from its step-2 checkpoint
    run(common + ["--steps", "4", "--out_dir", part, "--save_every", "2", "--resume"])
    a, b = metrics(full), metrics(part)
    assert [m["step"] for m in b] == [1, 2, 3, 4]
    drop = ("time/", "wall")
    for x, y in zip(a, b):
        for k in x:
            if not k.startswith(drop):
                assert x[k] == pytest.approx(y[k], rel=1e-6, abs=1e-9), (k, x[k], y[k])
    # refusing to clobber a finished run without --resume
    p = run(common + ["--steps", "4", "--out_dir", full], check=False)
    assert p.returncode == 2 and "already holds a run" in p.stderr


@pytest.mark.parametrize("extra,msg", [
    (["--task", "chess"], "unknown task"),
    (["--policies", "both"], "unknown --policies"),
    (["--engine", "sglang"], "unknown --engine"),
    (["--device", "tpu"], "unknown --device"),
    (["--model", "/no/such/model"], "does not exist"),
    (["--K", "1"], "--K must be >= 2"),
    (["--steps", "0"], "--steps must be positive"),
    (["--preset", "nope"], "unknown preset"),
    (["--policies", "per-role", "--workflow", "single"], "needs several roles"),
    (["--bogus_flag"], "unrecognized arguments"),
    (["--size", "2"], "size must be >= 3"),
    (["--task", "sokoban", "--boxes", "50"], "sokoban boxes must be"),
    (["--task", "sudoku", "--size", "5"], "sudoku size must be 4 or 9"),
    (["--task", "code", "--data", "/no/such.jsonl"], "no such file"),
])
def test_cli_errors_are_one_line_exit_2(extra, msg, tmp_path):
    p = run(["--model", "/tmp", "--out_dir", str(tmp_path / "x")] + extra, check=False)
    assert p.returncode == 2, p.stderr
    assert msg in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_stale_tiny_model_is_refused(tmp_path):
    d = tmp_path / "old-tiny"
    d.mkdir()
    (d / "tiny.json").write_text(json.dumps(dict(version=1, sft_steps=150, size=4, seed=0, max_turns=2)))
    p = run(["--model", "tiny", "--tiny_dir", str(d), "--out_dir", str(tmp_path / "x"), "--steps", "1"], check=False)
    assert p.returncode == 2 and "built with other settings" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert (d / "tiny.json").exists()  # never deleted for the user


@pytest.mark.slow
def test_torchrun_one_process(tiny_dir, tmp_path):
    out = str(tmp_path / "tr")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1",
           os.path.join(HERE, "train.py"), *BASE, "--model", tiny_dir, "--policies", "per-role", "--steps", "2",
           "--out_dir", out]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Traceback" not in p.stderr
    assert [m["step"] for m in metrics(out)] == [1, 2]


TASK_RUNS = {  # 2 steps on every task with the (untrained) tiny model: the whole path runs
    "sudoku": ["--tool_mode", "code"], "sokoban": ["--tool_mode", "direct"],
    "math": ["--data", "offline"], "code": ["--data", "offline"]}


@pytest.mark.slow
@pytest.mark.parametrize("task", list(TASK_RUNS))
def test_two_steps_on_every_task(tiny_dir, tmp_path, task):
    out = str(tmp_path / task)
    run(["--task", task, *TASK_RUNS[task], "--model", tiny_dir, "--engine", "hf", "--policies", "per-role",
         "--steps", "2", "--K", "2", "--problems", "2", "--max_turns", "2", "--max_tokens", "16",
         "--device", "cpu", "--out_dir", out, "--eval_n", "2"])
    ms = metrics(out)
    assert [m["step"] for m in ms] == [1, 2]
    roles = {"sudoku": ("tool", "planner"), "sokoban": ("tool", "planner"), "math": ("tool", "reasoner"),
             "code": ("coder", "tester")}[task]
    assert all(f"reward/{r}" in ms[0] for r in roles)
    assert json.load(open(os.path.join(out, "summary.json")))["success_after"] >= 0.0
