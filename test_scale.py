"""scale.py: the counts behind bench.py --sections scale and train.py --plan, against answers known
independently (a real model's parameters and FLOPs, peft's adapters), and --plan's command line.
    python -m pytest -q test_scale.py"""
import json
import os
import re
import subprocess
import sys

import torch

import scale

HERE = os.path.dirname(os.path.abspath(__file__))


def real(shape, **over):
    from transformers import AutoModelForCausalLM
    cfg = scale.shape_config(shape)
    cfg.update(over)
    torch.manual_seed(0)
    return cfg, AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)


def test_parameter_counts_match_a_real_model_and_peft():
    from peft import LoraConfig, get_peft_model
    cfg, m = real("cpu-small")
    norms = sum(p.numel() for n, p in m.named_parameters() if "norm" in n)
    assert scale.n_params(cfg) == sum(p.numel() for p in m.parameters()) - norms
    pm = get_peft_model(m, LoraConfig(r=8, target_modules="all-linear"))
    assert scale.lora_params(cfg, 8) == sum(p.numel() for n, p in pm.named_parameters() if ".lora_" in n)
    assert round(scale.n_params(scale.shape_config("qwen3-1.7b")) / 1e6) == 1720  # Qwen3-1.7B: 1.7B, 1.4B without embeddings


def test_flop_formula_matches_torchs_flop_counter():
    """A forward of T tokens: every linear layer (lm_head on all T here) and attention over the full
    [T, T] square (what sdpa computes; the update counts only the pairs a token may see)."""
    from torch.utils.flop_counter import FlopCounterMode
    cfg, m = real("cpu-small")
    m.set_attn_implementation("eager")  # plain matmuls, which the counter sees (CPU sdpa's kernel it does not)
    T = 96
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        m(input_ids=torch.randint(3, 1000, (1, T)), use_cache=False)
    H, _, q, _ = scale.dims(cfg)
    linear = 2 * (cfg.num_hidden_layers * scale.layer_params(cfg) + cfg.vocab_size * H) * T
    assert fc.get_total_flops() == linear + 4 * q * cfg.num_hidden_layers * T * T
    # an update: 3 forwards; lm_head on responses only; causal pairs of a shared-prompt row
    P, K, R = 10, 3, 5
    assert scale.pairs(P, K, R) == sum(t + 1 for t in range(P)) + K * sum(P + r + 1 for r in range(R))
    n = cfg.num_hidden_layers
    fwd = 2 * (n * scale.layer_params(cfg) * (P + K * R) + cfg.vocab_size * H * K * R) + 4 * q * n * scale.pairs(P, K, R)
    assert scale.update_flops(cfg, [(P, K, R)]) == 3 * fwd


def test_plan_by_part_known_answers():
    cfg = scale.shape_config("qwen3-1.7b")
    N = scale.n_params(cfg)
    p = scale.plan(cfg, policies=2, world=8, fsdp=True)  # fp32 master + grads + 2 AdamW moments, sharded
    assert p["trainer state"] == 2 * N * 16 / 8
    p = scale.plan(cfg, policies=2, world=1, fsdp=False, bf16=True)  # replicated: fp32 master, bf16 autocast copies
    assert p["trainer state"] == 2 * N * 16 and p["autocast copies"] == N * 2 and "FSDP gathered" not in p
    p = scale.plan(cfg, policies=2, lora_rank=16, world=8)  # one frozen base, two adapters
    assert p["trainer state"] == N * 4 / 8 + 2 * scale.lora_params(cfg, 16) * 16 / 8
    a, b = (scale.plan(cfg, micro_tokens=8192, grad_ckpt=c)["activations"] for c in (False, True))
    assert b < a / 5  # checkpointing keeps layer inputs and one layer's activations
    assert scale.plan(cfg, logp_chunk=0)["logits"] == 8 * scale.plan(cfg, logp_chunk=1024)["logits"]
    p = scale.plan(cfg, engine_bytes=0, rollout_bytes=100 * scale.GiB, switch_bytes=scale.GiB)
    # the rollout holds weights and AdamW's moments, no gradients (update() frees them after each step)
    assert p["rollout phase"] == p["trainer state"] * 3 / 4 + 100 * scale.GiB
    # ... and is the peak here: with its role switch, the context and the allocator's margin over torch's
    # tensors (the engine's share is the engine's: it sizes its cache to fit it); one rank, no NCCL buffers
    torch_bytes = p["trainer state"] * 3 / 4 + scale.GiB
    assert p["allocator margin"] == scale.FRAGMENTATION * torch_bytes and p["NCCL buffers"] == 0
    assert p["total"] == p["rollout phase"] + scale.GiB + scale.CUDA_CONTEXT + p["allocator margin"]
    p = scale.plan(cfg, policies=2, lora_rank=16, world=8, rollout_bytes=scale.GiB)
    assert p["rollout phase"] == N * 4 / 8 + 2 * scale.lora_params(cfg, 16) * 12 / 8 + scale.GiB


def test_the_plans_margin_has_every_term(monkeypatch):
    """Issue 39: the plan counted what torch allocates, not what the GPU must hold. Each term of the margin is
    in the plan, in the phase where it applies: the CUDA context, NCCL's buffers on several ranks, the
    allocator's reserved-over-allocated margin (less with expandable segments) and the role switch's
    transient in the rollout. The numbers are the ones docs/scale.md derives (H200 measurements, assumptions)."""
    cfg = scale.shape_config("qwen3-1.7b")
    kw = dict(policies=2, grad_ckpt=True, rollout_bytes=30 * scale.GiB, switch_bytes=2 * scale.GiB)
    one, eight = scale.plan(cfg, **kw), scale.plan(cfg, world=8, **kw)
    for p in (one, eight):
        assert {"update phase", "rollout phase", "role switch", "CUDA context", "NCCL buffers", "allocator margin"} <= set(p)
        assert p["CUDA context"] == scale.CUDA_CONTEXT == scale.GiB
    assert one["NCCL buffers"] == 0 and eight["NCCL buffers"] == scale.NCCL_BUFFERS > 0
    assert 0.038 <= scale.FRAGMENTATION and scale.FRAGMENTATION_EXPANDABLE < scale.FRAGMENTATION  # 3.8% measured
    # one rank, engine asleep in the update: the rollout (with its switch) is the peak
    assert one["total"] == one["rollout phase"] + 2 * scale.GiB + scale.GiB + one["allocator margin"]
    exp = scale.plan(cfg, expandable=True, **kw)
    assert exp["allocator margin"] == one["allocator margin"] * scale.FRAGMENTATION_EXPANDABLE / scale.FRAGMENTATION
    # the engine awake in the update: the update is the peak; its margin leaves the engine's share out
    p = scale.plan(cfg, policies=2, engine_bytes=30 * scale.GiB)
    assert p["allocator margin"] == scale.FRAGMENTATION * (p["update phase"] - 30 * scale.GiB)
    assert p["total"] == p["update phase"] + scale.GiB + p["allocator margin"]
    # what train.py's flags mean: per-role on one GPU pulls a policy into vLLM one tensor at a time, the
    # embedding (151,936 x 2048) gathered in fp32 and cast to bf16; LoRA moves adapters only; the HF engine
    # loads a whole state dict; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True is read from the environment
    flags = ["--task", "math", "--policies", "per-role", "--model", "Qwen/Qwen3-1.7B", "--sleep", "1", "--grad_ckpt", "1"]
    kw = scale.run_kwargs(start_args(*flags), cfg, H100, 1)
    assert kw["switch_bytes"] == 151936 * 2048 * (4 + 2) and not kw["expandable"]
    assert scale.run_kwargs(start_args(*flags, "--lora_rank", "16"), cfg, H100, 1)["switch_bytes"] == 0
    hf = scale.run_kwargs(start_args(*flags[:6], "--engine", "hf"), cfg, H100, 1)
    assert hf["switch_bytes"] == 151936 * 2048 * 4 + scale.n_params(cfg) * 2
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    assert scale.run_kwargs(start_args(*flags), cfg, H100, 1)["expandable"]


def test_plan_against_the_h200_measurements():
    """docs/scale-h200.jsonl: the peaks measured by bench.py on an H200 (1.7B shape, per-role, FSDP on one
    rank: torch's max_memory_allocated); the plan's update phase (torch's tensors, no margin) is within 15%
    of every one."""
    rows = [json.loads(x) for x in open(os.path.join(HERE, "docs", "scale-h200.jsonl"))]
    rows = [r for r in rows if r["part"] == "update" and "error" not in r]
    assert len(rows) >= 6
    for r in rows:
        cfg = scale.shape_config(r["shape"])
        est = scale.plan(cfg, policies=2, micro_tokens=min(r["micro_tokens"], r["prompt"] + r["K"] * r["response"]),
                         grad_ckpt=bool(r["grad_ckpt"]), logp_chunk=0 if r["variant"] == "before" else r["logp_chunk"])
        assert abs(est["update phase"] / r["peak_bytes"] - 1) < 0.15, (r["response"], r["grad_ckpt"], r["variant"])


def test_fits_names_a_change_that_fits():
    cfg = scale.shape_config("qwen3-1.7b")
    kw = dict(policies=2, world=1, micro_tokens=8192)
    assert scale.fits(cfg, 1000 * scale.GiB, **kw) is None
    fix = scale.fits(cfg, 60 * scale.GiB, **kw)
    assert fix and scale.plan(cfg, **{**kw, **fix})["total"] <= 60 * scale.GiB
    assert scale.fits(cfg, 1 * scale.GiB, **kw) == {}  # nothing on the list is enough


def plan_cli(capsys, monkeypatch, *flags, env=None):
    """`python train.py --task plan_path --plan FLAGS` in this process (train.main, as the script calls it):
    its exit status, stdout and stderr (test_train.in_process), with `env` set for this call only."""
    import train
    from test_train import in_process
    with monkeypatch.context() as m:
        for k, v in (env or {}).items():
            m.setenv(k, v)
        return in_process(train.main, ["--task", "plan_path", "--plan", *flags], capsys)


def test_plan_command_reads_only_config_json(tmp_path, capsys, monkeypatch):
    cfg = scale.shape_config("qwen3-1.7b")
    cfg.save_pretrained(tmp_path)  # config.json, no weights
    assert os.listdir(tmp_path) == ["config.json"]
    r = plan_cli(capsys, monkeypatch, "--model", str(tmp_path), "--policies", "per-role", "--plan_gpu_gib", "80",
                 env={"WORLD_SIZE": "8"})
    assert r.returncode == 0 and "fits in 80 GiB" in r.stdout, r.stdout + r.stderr
    want = scale.plan(cfg, policies=2, world=8)["trainer state"] / scale.GiB
    assert f"trainer state {want:12.2f} GiB" in r.stdout, r.stdout
    r = plan_cli(capsys, monkeypatch, "--model", str(tmp_path), "--policies", "per-role", "--plan_gpu_gib", "40")
    assert r.returncode == 1 and "does NOT fit" in r.stdout and "would fit with: --grad_ckpt 1" in r.stdout
    r = plan_cli(capsys, monkeypatch, "--model", str(tmp_path / "nothing"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1


def test_measure_with_profile_on_cpu():
    """One real update of a small shape, measured and profiled: the profile's categories hold the matmuls
    (aten::mm / addmm) and sum to its total; its top ops are the largest, in order."""
    c = dict(device="cpu", shape="cpu-152k", prompt=16, K=2, response=8, groups=1, regime="per-role", grad_ckpt=0,
             variant="after", micro_tokens=4096, logp_chunk=16, steps=1, lora_rank=4, profile=5)
    r = scale.measure(c)
    assert r["seconds"] > 0 and r["tokens_per_s"] > 0 and r["state_bytes"] > 0
    pr = r["profiled"]
    assert pr["categories"]["matmul"] > 0 and abs(sum(pr["categories"].values()) - pr["total_ms"]) < 1e-6
    assert len(pr["top"]) == 5 and [t[1] for t in pr["top"]] == sorted((t[1] for t in pr["top"]), reverse=True)
    assert "profiled" not in scale.measure({**c, "profile": 0})


def test_every_part_of_the_scale_bench_runs(tmp_path):
    """bench.py --sections scale, every part at a toy size, through the command line: each measurement is
    written without an error (a part whose function is missing from scale.py records one and fails here)."""
    out = tmp_path / "scale.jsonl"
    p = subprocess.run([sys.executable, "bench.py", "--sections", "scale", "--parts", "logits,row,update", "--shape", "cpu-152k",
                        "--prompt", "16", "--K", "2", "--response", "8", "--groups", "1", "--logits_tokens", "64",
                        "--logits_hidden", "32", "--row_shape", "cpu-152k", "--row_response", "8", "--variants", "after",
                        "--json", str(out)], capture_output=True, text=True, timeout=600, cwd=HERE)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r.get("error") for r in rows] == [None] * len(rows), rows
    assert sorted({r["part"] for r in rows}) == ["logits", "row", "update"] and len(rows) == 5  # 2 chunkings, 2 attentions, 1


def test_plan_needs_no_datasets_and_no_download():
    """--plan on a CPU install: math and code with a hub id plan from the config alone, with `datasets`
    unimportable and the hub offline (no dataset load, no download)."""
    for task in ("math", "code"):
        code = ("import sys; sys.modules['datasets'] = None; import train; "
                f"train.main(['--task', '{task}', '--policies', 'per-role', '--model', 'Qwen/Qwen3-1.7B', '--plan', "
                "'--sleep', '1', '--grad_ckpt', '1'])")
        r = subprocess.run([sys.executable, "-c", code], cwd=HERE, capture_output=True, text=True, timeout=300,
                           env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
        assert r.returncode == 0 and "fits in 80 GiB" in r.stdout, (task, r.stdout[-1500:] + r.stderr[-1500:])


H100 = 79.1 * scale.GiB  # an 80 GB H100 as torch sees it (total_memory)


def start_args(*flags, world=1):
    """train.py's flags as its start-up check sees them on a GPU box (--plan: GPU defaults on this CPU)."""
    import train
    os.environ["WORLD_SIZE"] = str(world)
    try:
        return train.get_args([*flags, "--plan"])
    finally:
        del os.environ["WORLD_SIZE"]


def test_start_check_refuses_a_run_that_does_not_fit_and_names_flags_that_do():
    """train.py on CUDA refuses at start, in one line, a run the plan says will not fit the GPU, naming flags
    that would (and --plan_check 0); the flags it names fit. scale.run_verdict takes the GPU's memory as an argument."""
    cfg = scale.shape_config("qwen3-1.7b")
    flags = ["--task", "math", "--policies", "per-role", "--model", "Qwen/Qwen3-1.7B"]
    total, err = scale.run_verdict(start_args(*flags), cfg, H100, 1)
    assert total > H100 and err and "\n" not in err and "--plan_check 0" in err, err
    fix = err.split("add ")[1].split(" (")[0].split()
    assert fix == ["--grad_ckpt", "1", "--sleep", "1"], err
    total, err = scale.run_verdict(start_args(*flags, *fix), cfg, H100, 1)
    assert err is None and total <= H100
    assert start_args(*flags, "--plan_check", "0").plan_check == 0


def readme_commands():
    """(argv, world size, environment) of every train.py command in the README's GPU and Multi-GPU sections:
    its words after train.py, its ranks, and the NAME=value words before the command (WORLD_SIZE=8,
    PYTORCH_CUDA_ALLOC_CONF=...)."""
    text = open(os.path.join(HERE, "README.md")).read()
    out = []
    for title in ("## GPU (one box, CUDA)", "## Multi-GPU"):
        sec = text.split(title, 1)[1].split("\n## ", 1)[0].replace("\\\n", " ")
        for line in sec.splitlines():
            words = line.split("#")[0].split()
            if not line.startswith("    ") or "train.py" not in words:
                continue
            env = {}
            while "=" in words[0]:
                k, v = words.pop(0).split("=", 1)
                env[k] = v
            world = int(env.get("WORLD_SIZE", 1))
            if words[0] == "torchrun":
                get = lambda k, d: int(words[words.index(k) + 1]) if k in words else d
                world = get("--nproc_per_node", 1) * get("--nnodes", 1)
            out.append((words[words.index("train.py") + 1:], world, env))
    return out


def test_every_readme_gpu_command_fits_its_gpu(capsys, monkeypatch):
    """Each train.py command of the README's GPU and Multi-GPU sections fits an 80 GB H100 by --plan (the
    plan train.py checks at start), with its ranks' WORLD_SIZE and its environment, margin included
    (issue 39): each plan prints the CUDA context, NCCL's buffers (non-zero on several ranks), the
    allocator's margin and, for full weights, the role switch's transient."""
    import train
    cmds = readme_commands()
    worlds = [world for _, world, _ in cmds]
    assert len(cmds) >= 11 and 8 in worlds and 16 in worlds
    bad = []
    for argv, world, env in cmds:
        with monkeypatch.context() as m:
            for k, v in {**env, "WORLD_SIZE": str(world)}.items():
                m.setenv(k, v)
            code = 0
            try:
                train.main([*argv, "--plan", "--plan_gpu_gib", str(H100 / scale.GiB)])
            except SystemExit as e:
                code = e.code
        out = capsys.readouterr().out
        if code != 0:
            bad.append((" ".join(argv), world, out.splitlines()[-2:]))
        terms = {k: float(v) for k, v in re.findall(r"^  (CUDA context|NCCL buffers|allocator margin|role switch) +([\d.]+) GiB", out, re.M)}
        assert terms.get("CUDA context") == 1.0 and terms.get("allocator margin", 0) > 0, (argv, out)
        assert (terms.get("NCCL buffers", 0) > 0) == (world > 1), (argv, out)
        assert (terms.get("role switch", 0) > 0) == ("--lora_rank" not in argv), (argv, out)
    assert not bad, bad
