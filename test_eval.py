"""python -m pytest -q test_eval.py"""
import json
import os
import statistics
import subprocess
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = ["--task", "plan_path", "--size", "5", "--tool_mode", "direct", "--max_turns", "2", "--max_tokens", "8",
        "--device", "cpu", "--n", "6"]


def run(args):
    p = subprocess.run([sys.executable, os.path.join(HERE, "eval.py"), *args], capture_output=True, text=True,
                       cwd=HERE, timeout=600)
    return p


@pytest.fixture(scope="module")
def ckpt(tiny_dir, tmp_path_factory):
    """A per-role checkpoint dir as train.py writes it: the planner is a perturbed copy."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    d = tmp_path_factory.mktemp("ck")
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    for role, noise in (("tool", 0.0), ("planner", 0.5)):
        m = AutoModelForCausalLM.from_pretrained(tiny_dir)
        g = torch.Generator().manual_seed(7)
        with torch.no_grad():
            for p in m.parameters():
                p.add_(torch.randn(p.shape, generator=g) * noise)
        m.save_pretrained(d / role)
        tok.save_pretrained(d / role)
    return str(d)


@pytest.fixture(scope="module")
def other_shape(tiny_dir, tmp_path_factory):
    """The tiny model with half its MLP width: an engine for tiny_dir cannot take its weights."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    d = str(tmp_path_factory.mktemp("shape") / "m")
    cfg = AutoConfig.from_pretrained(tiny_dir)
    cfg.intermediate_size //= 2
    torch.manual_seed(1)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(d)
    AutoTokenizer.from_pretrained(tiny_dir).save_pretrained(d)
    return d


@pytest.mark.slow
def test_same_numbers_twice_and_json_fields(ckpt, tmp_path):
    outs = []
    for i in range(2):
        j = str(tmp_path / f"r{i}.json")
        p = run(ARGS + ["--model", ckpt, "--samples", "2", "--temperature", "1.0", "--seed", "3", "--json", j])
        assert p.returncode == 0, p.stderr[-2000:]
        outs.append(json.load(open(j)))
    for k in ("success", "pass@2", "turns", "tokens", "wall_s", "reward/tool", "reward/planner", "settings", "models"):
        assert k in outs[0]
    for k in ("success", "pass@2", "turns", "tokens", "reward/tool", "reward/planner"):
        assert outs[0][k] == outs[1][k], k
    assert outs[0]["models"]["planner"].endswith("planner") and outs[0]["models"]["tool"].endswith("tool")
    assert outs[0]["settings"]["seed"] == 3
    # per-problem outcomes (what table.py's paired intervals resample) and the standard error they give
    per, n = outs[0]["per_problem"], outs[0]["settings"]["n"]
    assert len(per) == n and all(x in (0.0, 0.5, 1.0) for x in per)  # 2 samples per problem
    assert abs(sum(per) / n - outs[0]["success"]) < 1e-12
    assert abs(statistics.stdev(per) / n ** 0.5 - outs[0]["success_se"]) < 1e-12


@pytest.mark.slow
def test_role_model_swap_changes_routing(ckpt, tmp_path):
    a, b = str(tmp_path / "a.json"), str(tmp_path / "b.json")
    assert run(ARGS + ["--model", ckpt, "--json", a]).returncode == 0
    swapped = ["--role_model", f"tool={ckpt}/planner", "--role_model", f"planner={ckpt}/tool"]
    assert run(ARGS + ["--model", ckpt, "--json", b] + swapped).returncode == 0
    ra, rb = json.load(open(a)), json.load(open(b))
    assert rb["models"]["tool"].endswith("planner") and rb["models"]["planner"].endswith("tool")
    # different models serve the roles now, so what they say changes
    assert ra["examples"]["tool"] != rb["examples"]["tool"]
    assert ra["examples"]["planner"] != rb["examples"]["planner"]


def test_bad_input(tmp_path, ckpt, other_shape, capsys):
    import eval as E
    from test_train import in_process
    for argv, msg in ((ARGS + ["--model", ckpt, "--role_model", f"planner={other_shape}"], "differ in shape"),
                      (ARGS + ["--model", str(tmp_path)], "no config.json"), (["--plot", str(tmp_path)], "metrics.jsonl")):
        p = in_process(E.main, argv, capsys)
        assert p.returncode == 2 and msg in p.stderr.strip().splitlines()[-1] and "Traceback" not in p.stderr, p.stderr
    # a --json nobody can write: refused before the evaluation (it was a traceback after it, its results lost)
    p = run(ARGS + ["--model", ckpt, "--engine", "hf", "--json", str(tmp_path / "no" / "such" / "e.json")])
    assert p.returncode == 2 and "--json" in p.stderr and "no such directory" in p.stderr, p.stderr[-2000:]
    assert "Traceback" not in p.stderr and "success" not in p.stdout


@pytest.mark.parametrize("preset, want", [("cpu-demo", (1, 0.0)), ("cpu-demo-math", (5, 0.6))])
def test_a_preset_evaluates_by_the_task_protocol(tiny_dir, tmp_path, preset, want):
    """A preset's `temperature` is the training sampling temperature (1.0): eval.py --preset must still
    evaluate by the task's protocol (greedy for games; avg@5 at T=0.6 for math), unless told otherwise."""
    j = str(tmp_path / "e.json")
    run(["--preset", preset, "--model", tiny_dir, "--engine", "hf", "--n", "1", "--json", j])
    s = json.load(open(j))["settings"]
    assert (s["samples"], s["temperature"]) == want
    run(["--preset", preset, "--model", tiny_dir, "--engine", "hf", "--n", "1", "--temperature", "0.3", "--json", j])
    assert json.load(open(j))["settings"]["temperature"] == 0.3


@pytest.fixture(scope="module")
def lora_ckpt(tiny_dir, tmp_path_factory):
    """A per-role LoRA checkpoint as train.py writes it, trained from a RELATIVE --model path (the cwd is
    the model's parent directory, as for `train.py --model tiny-model`), with B moved off zero so the
    adapters change the outputs."""
    import train
    from common import save_checkpoint
    out = tmp_path_factory.mktemp("lora")
    cwd = os.getcwd()
    os.chdir(os.path.dirname(tiny_dir))
    try:
        rel = os.path.basename(tiny_dir)
        args = train.get_args(["--task", "plan_path", "--size", "5", "--tool_mode", "direct", "--model", rel,
                               "--device", "cpu", "--policies", "per-role", "--lora_rank", "4", "--fsdp", "0"])
        pols = train.load_policies(args, rel, ["tool", "planner"], None, "cpu", None)
        with torch.no_grad():
            for i, p in enumerate(pols["tool"].params + pols["planner"].params):
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(i)) * 0.3)
        from transformers import AutoTokenizer
        save_checkpoint(str(out), 1, pols, AutoTokenizer.from_pretrained(rel), {"rng": None}, log=lambda s: None)
    finally:
        os.chdir(cwd)
    return str(out / "ckpt-000001")


def test_lora_checkpoint_names_its_base_by_absolute_path(lora_ckpt, tiny_dir):
    for p in ("tool", "planner"):
        base = json.load(open(os.path.join(lora_ckpt, p, "adapter_config.json")))["base_model_name_or_path"]
        assert base == os.path.abspath(tiny_dir), base  # peft wrote the relative path the base was loaded by


@pytest.mark.slow
def test_lora_checkpoint_from_another_directory_and_a_dotted_path(lora_ckpt, tiny_dir, tmp_path):
    """eval.py (HF engine) and --merge run from elsewhere than training, on a checkpoint reached by a path
    with '.' in it (./proj.v2/...: peft took such a name for a module path and crashed)."""
    import shutil
    shutil.copytree(lora_ckpt, tmp_path / "proj.v2" / "ckpt-000001")
    ck = "./proj.v2/ckpt-000001"

    def ev(*extra):
        return subprocess.run([sys.executable, os.path.join(HERE, "eval.py"), *ARGS, "--engine", "hf", "--n", "2",
                               "--model", ck, *extra], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    p = ev("--base", tiny_dir, "--json", "a.json")  # the base given: only the dotted path is on trial
    assert p.returncode == 0, p.stderr[-2000:]
    p = ev("--json", "b.json")  # the base from adapter_config.json, resolved from another directory
    assert p.returncode == 0, p.stderr[-2000:]
    a, b = (json.load(open(tmp_path / f)) for f in ("a.json", "b.json"))
    assert a["models"]["base"] == b["models"]["base"] == os.path.abspath(tiny_dir)
    assert a["examples"] == b["examples"]
    p = subprocess.run([sys.executable, os.path.join(HERE, "eval.py"), "--merge", ck + "/planner", "--out", "merged"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert p.returncode == 0 and os.path.isfile(tmp_path / "merged" / "config.json"), p.stderr[-2000:]


def two_benchmarks(path, a=30, b=70):
    """A math JSONL of two benchmarks (`source` per record): `a` of "aime", `b` of "oly", interleaved."""
    rows = [{"problem": f"What is {i} + 1?", "answer": str(i + 1), "source": "aime" if i % 10 < 10 * a // (a + b) else "oly"}
            for i in range(a + b)]
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return str(path)


def test_eval_problems_take_every_benchmark_proportionally(tmp_path):
    """--eval_n / --n N on a set of several benchmarks: each gets its share of N (not the first N, which
    are one benchmark's), the same problems every time, a smaller N's problems among a larger N's."""
    import envs
    import rollout
    path = two_benchmarks(tmp_path / "two.jsonl")
    make = lambda i: envs.make("math", "test", i, data=path)
    count = envs.count("math", "test", data=path)
    src = lambda sel: [s for _, s in sel]
    sel = rollout.eval_problems(make, count, 10)
    assert sorted(src(sel)).count("aime") == 3 and src(sel).count("oly") == 7
    assert all(rollout.benchmark(make(i)) == s for i, s in sel)
    assert [i for i, _ in sel] == sorted(i for i, _ in sel)  # test-set order
    assert sel == rollout.eval_problems(make, count, 10)  # deterministic
    assert set(sel) <= set(rollout.eval_problems(make, count, 20))
    assert [i for i, _ in sel][:3] != [0, 1, 2]  # drawn, not the first ones of each benchmark
    assert rollout.eval_problems(make, count, 500) == [(i, rollout.benchmark(make(i))) for i in range(count)]
    assert src(rollout.eval_problems(make, count, 1)) == ["oly"]  # a share that rounds to 0 is not played
    # a procedural task: problems 0..n-1, no benchmark
    assert rollout.eval_problems(lambda i: envs.make("plan_path", "test", i), None, 3) == [(0, None), (1, None), (2, None)]


def test_success_by_benchmark_with_its_standard_error():
    import rollout
    per, sources = [1.0, 0.0, 0.5, 1.0, 1.0], ["a", "a", "b", "b", "b"]
    out = rollout.by_source(per, sources, 2)
    assert list(out) == ["a", "b"]
    assert out["a"] == {"n": 2, "success": 0.5, "success_se": statistics.stdev([1.0, 0.0]) / 2 ** 0.5, "pass@2": 0.5}
    assert out["b"]["success"] == pytest.approx(2.5 / 3) and out["b"]["pass@2"] == 1.0
    assert out["b"]["success_se"] == pytest.approx(statistics.stdev([0.5, 1.0, 1.0]) / 3 ** 0.5)


def test_eval_reports_each_benchmark_and_labels_the_pooled_number(tiny_dir, tmp_path):
    """eval.py on a two-benchmark set: a line and a JSON entry per benchmark (its n, success, standard
    error over its own problems), the pooled number labelled as such."""
    path = two_benchmarks(tmp_path / "two.jsonl")
    j = str(tmp_path / "e.json")
    p = run(["--task", "math", "--data", path, "--model", tiny_dir, "--engine", "hf", "--device", "cpu", "--n", "10",
             "--max_turns", "1", "--max_tokens", "4", "--samples", "2", "--json", j])
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.load(open(j))
    by = r["by_source"]
    assert {s: b["n"] for s, b in by.items()} == {"aime": 3, "oly": 7}
    assert r["sources"].count("aime") == 3 and len(r["sources"]) == len(r["per_problem"]) == 10
    for s, b in by.items():
        xs = [x for x, t in zip(r["per_problem"], r["sources"]) if t == s]
        assert b["success"] == pytest.approx(sum(xs) / len(xs)) and b["success_se"] == pytest.approx(statistics.stdev(xs) / len(xs) ** 0.5)
    out = p.stdout
    assert "aime" in out and "oly" in out and "pooled" in out


def test_an_evaluation_set_needs_no_train_split(tiny_dir, tmp_path):
    """`--data humaneval` serves only a test split: eval.py checks its task options on the split it plays,
    never building a training problem (it stopped with "serves split(s) test, not 'train'")."""
    j = str(tmp_path / "he.json")
    p = run(["--task", "code", "--data", "humaneval", "--model", tiny_dir, "--engine", "hf", "--device", "cpu",
             "--n", "1", "--max_turns", "1", "--max_tokens", "4", "--json", j])
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.load(open(j))["settings"]["data"] == "humaneval"
    p = run(["--task", "code", "--data", "humaneval", "--model", tiny_dir, "--split", "val", "--n", "1"])
    assert p.returncode == 2 and "not 'val'" in p.stderr and "Traceback" not in p.stderr


def test_a_preset_model_is_resolved_as_train_resolves_it(tiny_dir, tmp_path, monkeypatch):
    """`eval.py --preset cpu-real` with no --model serves the preset's `smollm2` from the directory smol.py
    builds (tiny.resolve_model, as train.py), not a directory named "smollm2". smol.ensure is stubbed
    with the tiny model: no SmolLM2 build here (test_real.py has the real one)."""
    import eval as E
    import smol
    asked = []
    os.symlink(tiny_dir, tmp_path / "smol")
    monkeypatch.setattr(smol, "DIR", str(tmp_path / "smol"))
    monkeypatch.setattr(smol, "ensure", lambda out, log=print: asked.append(out))
    j = str(tmp_path / "e.json")
    E.main(["--preset", "cpu-real", "--engine", "hf", "--dtype", "float32", "--n", "1", "--max_turns", "1",
            "--max_tokens", "4", "--json", j])
    assert asked == [smol.DIR]
    assert set(json.load(open(j))["models"].values()) == {str(tmp_path / "smol")}


def test_a_preset_tiny_model_is_checked_against_its_recipe(tmp_path, capsys):
    """`eval.py --preset cpu-demo-math3` with no --model asks tiny.py for the preset's model with the
    preset's warm-up (math3): a math build in --tiny_dir is refused in one line, not served."""
    import eval as E
    import tiny
    d = tmp_path / "tiny-model-math3"
    d.mkdir()
    (d / "tiny.json").write_text(json.dumps(dict(task="math", sft_steps=tiny.SFT_STEPS["math"], size=4, seed=0,
                                                 max_turns=1, version=tiny.VERSION["math"])))
    with pytest.raises(SystemExit) as e:
        E.main(["--preset", "cpu-demo-math3", "--tiny_dir", str(d), "--n", "1"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and str(d) in err and "task" in err and err.count("\n") == 1, err
