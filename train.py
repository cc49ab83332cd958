"""AT-GRPO trainer: config + loop. Runs under `python` (one process) and `torchrun` (data parallel).

    python train.py --preset cpu-demo                     # CPU demo: tiny model learns plan_path
    python train.py --preset cpu-demo --lora_rank 8 --lr 2e-3 --out_dir runs/cpu-demo-lora   # per-role LoRA
    python train.py --preset cpu-demo --report_to tensorboard --role_sampling tool:temperature=0.7
    torchrun --nnodes 2 --nproc_per_node 8 --rdzv_backend c10d --rdzv_endpoint HOST:29500 train.py ...   # each node
    torchrun --standalone --nproc_per_node 8 train.py --task plan_path --policies per-role --model Qwen/Qwen3-1.7B
    python -m pytest -q test_train.py

One step: rollout (tree sampling, one vLLM call per (turn, role)) -> groups keyed (problem, turn, role)
-> advantages -> one update per policy on its own groups -> new weights to the engine -> log /
checkpoint. Where each piece lives (and what to edit for an ablation): rollout.py (tree sampling,
`pick_branch`), grouping.py (`advantages`), loss.py (the objective), policies.py (`update`, the
plumbing), envs.py + task_*.py (tasks, rewards, workflows), common.py (presets, flags, checkpoints).
Simplifications, on purpose: one engine per process serves every policy (per-role weights are swapped in
before a role generates, and the swap is timed; with --lora_rank the policies are adapters on one frozen
base, all held by the engine at once, and only adapters move after an update); one epoch over each step's
samples; old log-probs are recomputed by the trainer; no value model, no KL unless --kl_coef > 0.
Data parallel (torchrun, one GPU per rank): each rank plays its own slice of the step's problems on its
own in-process vLLM engine (groups never cross ranks) and trains FSDP2-sharded policies; gradients are
summed over ranks with the token count all-reduced, so the loss equals the 1-process loss. After each
update the weights go to every engine gathered one tensor at a time. All collectives run at points every
rank reaches alike (see push_weights for per-role), so nothing waits on a rank that has finished.
"""
import functools
import json
import os
import random
import sys
import time

import torch
from tqdm import tqdm
from transformers import AutoModelForCausalLM

import grouping
import loss
import logprobs as LP
import policies as P
import rollout
import smol
import tiny
import track
from common import (LOAD_ERRORS, PRESETS, Parser, add_common_args, all_reduce_, all_reduce_sums, barrier, die, gpu_full,
                    init_distributed, kill_point, latest_checkpoint, load_checkpoint, load_error, load_tokenizer, make_env,
                    parse_args, problem_count, rng_states, save_checkpoint, set_rng_states, task_roles, trim_metrics, write_json)


def get_args(argv=None):
    ap = Parser(description="AT-GRPO trainer. See README.md.")
    A = ap.add_argument
    add_common_args(ap)
    # ---- policies and sampling
    A("--policies", default="shared", choices=("shared", "per-role"),
      help="shared (one model for every role) or per-role (one model per role)")
    A("--model", default="Qwen/Qwen3-1.7B", help="hub id or local directory; 'tiny' = the demo model in --tiny_dir; "
      f"'smollm2' = SmolLM2-135M-Instruct in ./{smol.DIR} (smol.py builds it on first use)")
    A("--lora_rank", type=int, default=0, help="0: full fine-tuning; R > 0: train a rank-R LoRA adapter per policy "
      "(per-role: one per role) over ONE frozen base; only adapters are pushed to the engine")
    A("--lora_alpha", type=float, default=None, help="LoRA scale numerator (scale = alpha / rank); default 2 x rank")
    A("--lora_targets", default="all-linear",
      help="modules that get adapters: all-linear (every linear layer of the decoder, not lm_head) or a comma list, "
           "e.g. q_proj,v_proj")
    A("--tiny_dir", default="tiny-model", help="where --model tiny lives (tiny.py builds it on first use)")
    A("--tiny_warmup", default="auto", choices=("auto",) + tiny.WARMUPS,
      help="the warm-up tiny.py gives --model tiny: auto (the task's: math, else plan_path), or math3 (math's "
           "two- and three-agent transcripts: --preset cpu-demo-math3)")
    A("--steps", type=int, default=200, help="training steps")
    A("--K", type=int, default=8, help="branches per (problem, turn, role) group")
    A("--problems", type=int, default=32, help="problems per step (over all ranks)")
    A("--sampling", default="tree", choices=("tree", "parallel"),
      help="tree (AT-GRPO) or parallel (K independent episodes, per-problem groups)")
    A("--temperature", type=float, default=1.0, help="sampling temperature (trainer divides logits by it)")
    A("--env_workers", type=int, default=32,
      help="threads stepping the envs of one engine call at once (1: one after another)")
    # ---- optimisation (paper: AdamW 1e-6, wd 0.01, clip 1.0, eps 0.2/0.2, one epoch, no KL)
    A("--lr", type=float, default=1e-6, help="AdamW learning rate")
    A("--weight_decay", type=float, default=0.01, help="AdamW weight decay")
    A("--warmup", type=int, default=0, help="linear warmup steps")
    A("--lr_schedule", default="constant", choices=("constant", "cosine"), help="cosine: to 10%% of lr at --steps")
    A("--grad_clip", type=float, default=1.0, help="gradient norm clip")
    A("--eps_low", type=float, default=0.2, help="PPO clip below: ratio >= 1 - eps_low")
    A("--eps_high", type=float, default=0.2, help="PPO clip above: ratio <= 1 + eps_high")
    A("--kl_coef", type=float, default=0.0, help="k3 KL to the frozen initial model (0: off, no ref model)")
    A("--mini_batches", type=int, default=1, help="optimiser steps per policy per training step")
    A("--micro_tokens", type=int, default=8192, help="tokens per packed micro-batch (gradient accumulation)")
    A("--logp_chunk", type=int, default=1024, help="tokens per lm_head chunk of the log-probs: the [tokens, vocab] "
                                                   "logits never exist at once (backward recomputes a chunk's)")
    A("--attention", default="auto", choices=("auto", "flex", "sdpa"),
      help="trainer attention: flex = flex_attention block masks (masked blocks skipped; CUDA), sdpa = dense "
           "masks, auto = flex where it can train, else sdpa")
    A("--tis_cap", type=float, default=0.0, help="C > 0: truncated importance sampling, each token's advantage times "
                                                 "min(exp(trainer - sampler log-prob), C) (0: off)")
    A("--std_norm", type=int, default=1, choices=(0, 1), help="1: A = (r - mean)/(std + eps); 0: A = r - mean")
    # ---- controls (table.py's rows): each one flag
    A("--adv_norm", default="group", choices=grouping.NORMS, help="group: mean and std per (problem, turn, role) "
      "group; agent: per (problem, role), every turn of that agent pooled (Dr. MAS's agent-wise normalisation)")
    A("--branch", default="best", choices=rollout.BRANCHES, help="the branch a tree episode continues from: the "
      "best reward (AT-GRPO) or a random one (seeded)")
    A("--train_roles", default="", metavar="ROLE,...", help="per-role: only these roles' policies train, the "
      "others keep their weights (full or LoRA); default: every role")
    # ---- memory and data parallel
    A("--sleep", type=int, default=0, choices=(0, 1), help="1: vLLM sleep mode, the engine's memory is freed "
                                                           "during the update (cuda)")
    A("--fsdp", type=int, default=-1, choices=(-1, 0, 1), help="1: FSDP2, shards per decoder layer (bf16 mixed "
      "precision with --dtype bfloat16); 0: a full model per rank; -1: 1 under torchrun or on cuda")
    A("--grad_ckpt", type=int, default=0, choices=(0, 1), help="1: gradient checkpointing (recompute each layer in backward)")
    # ---- evaluation, output, checkpoints
    A("--eval_n", type=int, default=0, help="held-out test problems evaluated before and after training, "
                                            "with eval.py's protocol for the task (math: avg@5 at T=0.6; code: T=0.7; else greedy)")
    A("--eval_every", type=int, default=0, help="also evaluate every N steps (0: only before/after)")
    A("--out_dir", default="runs/default", help="metrics, samples and checkpoints go here")
    A("--save_every", type=int, default=50, help="checkpoint every N steps (and at the end); 0: only at the end")
    A("--keep_ckpts", type=int, default=2, help="how many checkpoints to keep")
    A("--resume", action="store_true", help="continue from the last complete checkpoint in --out_dir")
    A("--log_samples", type=int, default=2, help="completions per role written to samples.jsonl each step")
    A("--report_to", default="none", choices=("none", "tensorboard", "wandb", "trackio"),
      help="also send config, metrics and sample completions to this tracker (track.py; rank 0). "
           "metrics.jsonl is written either way")
    A("--plan", action="store_true", help="print the expected peak memory per GPU of this run (from the model's "
      "config.json alone, for WORLD_SIZE ranks) and what would make it fit, then exit (1: does not fit)")
    A("--plan_gpu_gib", type=float, default=80.0, help="GPU memory --plan fits into")
    A("--plan_check", type=int, default=1, choices=(0, 1), help="1: on cuda, refuse at start a run that the memory "
      "plan (--plan, for this GPU's memory) says will not fit, naming flags that would; 0: run it anyway")
    args = parse_args(ap, argv)
    if args.K < 2:
        die(f"--K must be >= 2 (a group needs at least two samples), got {args.K}")
    for flag in ("steps", "problems", "mini_batches", "micro_tokens", "logp_chunk", "env_workers"):
        if getattr(args, flag) <= 0:
            die(f"--{flag} must be positive, got {getattr(args, flag)}")
    if err := track.check(args.report_to):
        die(err)
    if args.lora_rank < 0 or args.lora_rank > 512:
        die(f"--lora_rank must be in 0..512, got {args.lora_rank}")
    args.lora_alpha = 2.0 * args.lora_rank if args.lora_alpha is None else args.lora_alpha
    if args.temperature <= 0:
        die(f"--temperature must be > 0 for training, got {args.temperature}")
    if args.tis_cap < 0:
        die(f"--tis_cap must be >= 0 (0: off), got {args.tis_cap}")
    if args.model not in ("tiny", "smollm2") and not os.path.isdir(args.model):
        if args.model.count("/") != 1 or args.model.startswith((".", "/", "~")):  # not a hub id either
            die(f"model path {args.model!r} does not exist")
    roles = task_roles(args) if args.plan else make_env(args, "train", 0).roles  # --plan loads no data
    if args.policies == "per-role" and len(roles) < 2:
        die(f"--policies per-role needs several roles; task {args.task} (workflow {args.workflow}) has {roles}")
    args.train_roles = [r for r in args.train_roles.split(",") if r] or list(roles)
    if unknown := [r for r in args.train_roles if r not in roles]:
        die(f"--train_roles: unknown role {', '.join(unknown)}; task {args.task} (workflow {args.workflow}) has "
            f"{', '.join(roles)}")
    if args.policies == "shared" and set(args.train_roles) != set(roles):
        die("--train_roles needs --policies per-role (one shared policy cannot freeze a role)")
    if args.sleep and not args.plan and (why := no_cuda(args, argv)):
        die(f"--sleep 1 needs a GPU, but {why}; --device cuda requires one, --device cpu without --sleep runs here")
    if args.sleep and not args.plan and (args.device != "cuda" or args.engine != "vllm"):
        die("--sleep 1 needs --device cuda and --engine vllm (vLLM cannot sleep on the CPU)")
    world = int(os.environ.get("WORLD_SIZE", 1))
    if args.problems % world:
        die(f"--problems {args.problems} must be divisible by the number of ranks {world}")
    if args.fsdp < 0:  # FSDP under torchrun and on one GPU alike, so one GPU and eight run the same code
        args.fsdp = int("RANK" in os.environ or args.device == "cuda" or args.plan)  # --plan plans for GPUs
    # a dataset has so many; its test set is read only by a run that evaluates, and by rank 0 alone (eval_set)
    if not args.plan and args.eval_n > 0 and os.environ.get("RANK", "0") == "0":
        args.eval_n = min(args.eval_n, problem_count(args, "test") or args.eval_n)
    return args


def load_policies(args, model_dir, names, ckpt, device, mesh):
    """{name: Policy}: each from the checkpoint when resuming, else from the model. Full fine-tuning keeps
    fp32 master weights, FSDP or not (with --dtype bfloat16 it computes in bf16); the frozen reference
    (--kl_coef) is replicated in --dtype, no collectives.
    With --lora_rank: ONE base (from --model, also when resuming) and one adapter per name."""
    dtype = getattr(torch, args.dtype)
    if args.lora_rank:
        base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32 if args.fsdp else dtype).eval()
        LP.set_attention(base, args.attention, device)
        if args.grad_ckpt:
            base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        targets = args.lora_targets if args.lora_targets == "all-linear" else args.lora_targets.split(",")
        try:
            pm = P.lora_model(base, names, args.lora_rank, args.lora_alpha, targets,
                               os.path.abspath(model_dir) if os.path.isdir(model_dir) else model_dir, seed=args.seed)
        except ValueError as e:  # e.g. a target module the model does not have
            die(f"--lora_targets {args.lora_targets}: {str(e).splitlines()[0]}")
        for name in names if ckpt else ():
            P.load_adapter_weights(pm, name, os.path.join(ckpt, name))
        pm.to(device)
        net = LP.LogProbs(base, args.logp_chunk)
        if mesh is not None:
            P.shard(net, mesh, args.dtype == "bfloat16")
        return {name: P.Policy(name, base, args.lr, args.weight_decay, args.warmup, args.steps, args.lr_schedule,
                               mesh=mesh, peft=pm, net=net) for name in names}
    policies = {}
    for name in names:  # fp32 master weights on every path (FSDP or not): bf16 is the compute dtype only
        src = os.path.join(ckpt, name) if ckpt else model_dir
        model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).to(device).eval()
        LP.set_attention(model, args.attention, device)
        ref = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device).eval() if args.kl_coef > 0 else None
        policies[name] = P.Policy(name, model, args.lr, args.weight_decay, args.warmup, args.steps, args.lr_schedule,
                                  ref, mesh=mesh, bf16=args.dtype == "bfloat16", grad_ckpt=bool(args.grad_ckpt),
                                  logp_chunk=args.logp_chunk)
    return policies


def push_weights(engine, sampler, policies, dtype, replicas, world):
    """New weights to the engine, at a point every rank reaches. With LoRA only the adapters move (all of
    them, every rank in the same order: under FSDP each tensor is gathered). One policy streams straight
    in, a tensor at a time. Per-role, the sampler pulls each policy right before its role generates, and
    ranks reach those pulls differently (their episodes end at different turns): under FSDP a pull would be a
    collective and hang, so with several ranks each policy's full weights are gathered here, all ranks
    together, into a per-rank copy in the engine's dtype (`replicas`) that the pulls read."""
    if sampler.weights is None:
        for name, policy in policies.items():
            engine.load_adapter(name, policy.engine_weights(dtype), policy.lora_config)
        return
    if len(policies) == 1:
        (name, policy), = policies.items()
        engine.load_weights(policy.engine_weights(dtype))
        sampler.loaded = name
        return
    sampler.invalidate()
    if world > 1 and any(p.sharded for p in policies.values()):
        for name, policy in policies.items():
            replicas[name] = dict(policy.engine_weights(dtype))


def eval_set(args, rank, world):
    """The held-out problems, [(index, benchmark, fresh env)]: rollout.eval_problems, eval.py's for the same
    n. Rank 0 alone reads the test set (LiveCodeBench is >1 GB decoded) and sends the chosen problems' envs
    to the other ranks: one copy per job, not one per rank. Called at the first evaluation, so a run that
    never evaluates never reads it."""
    got = None
    if rank == 0:  # the envs eval_problems reads the benchmarks from are the ones sent (built once each)
        env = functools.cache(lambda i: make_env(args, "test", i))
        got = [(i, src, env(i)) for i, src in rollout.eval_problems(env, problem_count(args, "test"), args.eval_n)]
    if world > 1:
        box = [got]
        torch.distributed.broadcast_object_list(box, src=0, device=torch.device("cpu"))  # gloo, whatever the GPUs talk
        got = box[0]
    return got


def evaluate(args, sampler, engine, proto, max_prompt_tokens, rank, world, chosen):
    """Held-out success under the task's protocol (eval.py's), on the problems `chosen()` gives (eval_set,
    once per run). Each rank plays its own slice, on clones of the fresh envs; results are summed over
    ranks: pooled success and, per benchmark, by_source (eval.py's fields). Sampling is seeded on its own
    and leaves the training streams and the engine's prefix cache as they were: a run trains the same
    with or without evals. wall_s: its time (bench.py --sections real)."""
    t0, problems = time.time(), chosen()
    per = (len(problems) + world - 1) // world
    mine = problems[rank * per:(rank + 1) * per]
    # a role's max_tokens is part of the workflow; its training temperature is not (the protocol's is used)
    train_overrides = sampler.overrides
    sampler.overrides = {r: {k: v for k, v in o.items() if k == "max_tokens"} for r, o in train_overrides.items()}
    with gpu_full(args, "an evaluation", rank):  # the engine generates here too (woken, with --sleep 1)
        r = rollout.evaluate(lambda j: mine[j][2].clone(), len(mine), sampler, proto["temperature"], args.max_tokens,
                             proto["samples"], max_prompt_tokens, seed=args.seed + rank, workers=args.env_workers)
    sampler.overrides = train_overrides
    engine.reset_cache()
    episodes, passk = r["episodes"], f"pass@{proto['samples']}"
    sums = {"wins": r["success"] * episodes, "turns": r.get("turns", 0.0) * episodes, "tokens": r.get("tokens", 0),
            "episodes": episodes}
    # per benchmark (every rank names every one of the selection): problems, sum and sum of squares of
    # their successes (mean and standard error), problems passed; "" pools them
    sources = [""] + list(dict.fromkeys(s for _, s, _ in problems if s is not None))
    mine_src = r.get("sources") or [None] * len(mine)
    for src in sources:
        xs = [x for x, t in zip(r.get("per_problem", []), mine_src) if src in ("", t)]
        sums.update({f"{src}\0n": len(xs), f"{src}\0sum": sum(xs), f"{src}\0sq": sum(x * x for x in xs),
                     f"{src}\0pass": sum(x > 0 for x in xs)})
    s = all_reduce_sums(sums)

    def stats(src):
        n, total = s[f"{src}\0n"], s[f"{src}\0sum"]
        var = max(0.0, s[f"{src}\0sq"] - total * total / n) / (n - 1) if n > 1 else 0.0
        return {"n": int(n), "success": total / n, "success_se": (var / n) ** 0.5, passk: s[f"{src}\0pass"] / n}
    out = {"success": s["wins"] / max(1.0, s["episodes"]), passk: stats("")[passk] if s["\0n"] else 0.0,
           "success_se": stats("")["success_se"] if s["\0n"] else 0.0,
           "turns": s["turns"] / max(1.0, s["episodes"]), "tokens": int(s["tokens"]), "wall_s": round(time.time() - t0, 1)}
    if len(sources) > 1:
        out["by_source"] = {src: stats(src) for src in sources[1:] if s[f"{src}\0n"]}
    return out


def prompt_budget(args, config, log):
    """Longest prompt the engine can serve next to --max_tokens of response in the model's context."""
    context = getattr(config, "max_position_embeddings", None)
    if not context or args.max_prompt_tokens + args.max_tokens <= context:
        return args.max_prompt_tokens
    if context <= args.max_tokens:
        die(f"--max_tokens {args.max_tokens} leaves no room for a prompt in the model's context {context}")
    log(f"prompts capped to {context - args.max_tokens} tokens (model context {context})")
    return context - args.max_tokens


def play(args, sampler, step, rank, world, rng, max_prompt_tokens):
    """This rank's slice of the step's problems, played: tree sampling (AT-GRPO), or plain GRPO's
    baseline of K independent episodes per problem. Returns (samples, final envs)."""
    per_rank = args.problems // world
    first = step * args.problems + rank * per_rank
    if args.sampling == "tree":
        problems = [make_env(args, "train", first + i) for i in range(per_rank)]
        return rollout.tree_rollout(problems, sampler, args.K, args.temperature, args.max_tokens, rng,
                                    max_prompt_tokens, first_pid=first, workers=args.env_workers, branch=args.branch)
    problems = [make_env(args, "train", first + i) for i in range(per_rank) for _ in range(args.K)]
    pids = [first + i for i in range(per_rank) for _ in range(args.K)]
    return rollout.linear_rollout(problems, sampler, args.temperature, args.max_tokens, pids, max_prompt_tokens,
                                  workers=args.env_workers)


def memory_metrics(rank, world):
    """Per rank (GiB): this process's peak (trainer + engine), and the whole GPU's use now."""
    free, total = torch.cuda.mem_get_info()
    mem = torch.zeros(2, world, dtype=torch.float64)
    mem[:, rank] = torch.tensor([torch.cuda.max_memory_allocated(), total - free]) / 2 ** 30
    mem = all_reduce_(mem).tolist()
    return {"mem/peak_gib": [round(x, 2) for x in mem[0]], "mem/used_gib": [round(x, 2) for x in mem[1]]}


def eval_command(args, ckpt):
    """The eval.py line that evaluates `ckpt` with this run's task settings (flags that differ from the
    preset's or the plain defaults)."""
    ap = Parser()
    add_common_args(ap)
    defaults = PRESETS.get(args.preset) or {}
    parts = ["python eval.py"] + ([f"--preset {args.preset}"] if args.preset else [])
    for a in ap._actions:
        if a.dest not in ("help", "preset", "device", "dtype", "role_sampling") and a.option_strings:
            v = getattr(args, a.dest, None)
            if v is not None and v != defaults.get(a.dest, a.default):
                parts.append(f"{a.option_strings[0]} {v}")
    parts += [f"--role_sampling {r}:max_tokens={o['max_tokens']}" for r, o in args.role_sampling.items() if "max_tokens" in o]
    return " ".join(parts + [f"--model {ckpt}"])


def no_cuda(args, argv):
    """Why a run whose device was defaulted (no --device) landed on the CPU, or None: a GPU command on a
    box where CUDA does not come up (driver, a CPU wheel) must not train on the CPU unnoticed."""
    typed = any(a == "--device" or a.startswith("--device=") for a in (sys.argv[1:] if argv is None else argv))
    if typed or args.device != "cpu" or torch.cuda.is_available():
        return None
    return f"no CUDA device is visible (torch {torch.__version__}, CUDA build {torch.version.cuda or 'none'})"


def plan_at_start(args, model_dir, local_rank, world, master, log):
    """CUDA: the plan for this run on this GPU, from the model's config (every rank computes the same;
    rank 0 says it). A run it says will not fit is refused, unless --plan_check 0. Returns the planned
    peak bytes per GPU (None off CUDA, or without a readable config)."""
    if args.device != "cuda":
        return None
    import scale
    try:
        cfg = scale.load_config(model_dir)
    except (ValueError, OSError) as e:
        log(f"memory plan: skipped ({str(e).splitlines()[0]})")
        return None
    gpu = torch.cuda.get_device_properties(local_rank).total_memory
    total, err = scale.run_verdict(args, cfg, gpu, world)
    if err and args.plan_check:
        die(err) if master else sys.exit(2)
    log(f"memory plan: {total / scale.GiB:.1f} GiB per GPU of {gpu / scale.GiB:.1f} GiB" +
        (" (does NOT fit; --plan_check 0)" if err else ""))
    return total


def open_out_dir(args):
    """The output directory, never clobbering a previous run's results. Returns the checkpoint to resume
    from: --resume's last complete one, or None (a fresh run, or one killed before its first checkpoint)."""
    if args.resume and not os.path.isdir(args.out_dir):
        die(f"--resume: no run in {args.out_dir} (no such directory)")
    os.makedirs(args.out_dir, exist_ok=True)
    if not args.resume and os.path.exists(os.path.join(args.out_dir, "metrics.jsonl")):
        die(f"{args.out_dir} already holds a run; pass --resume or choose another --out_dir")
    return latest_checkpoint(args.out_dir) if args.resume else None


def load_model(args, model_dir, roles, ckpt, device, world, log):
    """Tokenizer and {name: Policy} (shared: one; per-role: one per role; under FSDP sharded over the
    ranks), weights from the checkpoint when resuming. Returns them with the longest prompt served."""
    mesh = None
    if args.fsdp:
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh(args.device, (world,))
    try:
        tok = load_tokenizer(model_dir)
        policies = load_policies(args, model_dir, P.policy_names(roles, args.policies), ckpt, device, mesh)
    except LOAD_ERRORS as e:  # a missing or broken model directory (or checkpoint)
        die(load_error(e, [model_dir, ckpt] if ckpt else [model_dir]))
    except ValueError as e:  # e.g. --attention flex where it cannot train
        die(str(e).splitlines()[0])
    model = next(iter(policies.values())).model
    log(f"trainer log-probs: {LP.attention_path(model)}, lm_head in chunks of {args.logp_chunk} tokens")
    return tok, policies, prompt_budget(args, model.config, log)


def resume(args, ckpt, policies, rank, world, master, log):
    """(start step, saved trainer state or None). The trainer state goes back into the policies; its RNG
    states are restored later, once the engine has started. The lines of metrics.jsonl and samples.jsonl
    past the checkpoint (and a torn last one) are set aside."""
    start, saved = 0, None
    if ckpt:
        saved = load_checkpoint(ckpt, policies, rank, world)
        start = saved["step"]
        log(f"resumed from {ckpt} at step {start}")
    elif args.resume:  # killed before its first checkpoint: the run starts over
        log(f"--resume: no checkpoint in {args.out_dir} yet, starting from step 0")
    if args.resume and master:
        trim_metrics(args.out_dir, start)
    return start, saved


def eval_before(args, run_eval, proto, start, master, log):
    """The summary, with the held-out evaluation before training: measured at step 0 and written to
    summary.json at once; a resumed run reads it back from there (if made the same way)."""
    summary = {"task": args.task, "policies": args.policies, "seed": args.seed, "steps": args.steps, "preset": args.preset}
    if not args.eval_n:
        return summary
    summary_path = os.path.join(args.out_dir, "summary.json")
    summary["eval"] = {"split": "test", "n": args.eval_n, **proto}
    old = json.load(open(summary_path)) if start and os.path.exists(summary_path) else {}
    if start == 0:
        summary["eval"]["before"] = run_eval()
        kill_point("eval_before", 0)
    elif all(old.get("eval", {}).get(k) == v for k, v in summary["eval"].items()):
        summary["eval"]["before"] = old["eval"].get("before")
    summary["success_before"] = (summary["eval"].get("before") or {}).get("success")
    if master and start == 0:  # kept now: a run killed later resumes with it
        write_json(summary_path, summary)
    log(f"held-out success before training: {summary['success_before']} ({proto['metric']}, {args.eval_n} test problems"
        f"{track.benchmark_line(summary['eval'].get('before'))})")
    return summary


def train_step(args, step, sampler, engine, policies, replicas, streams, objective, roles, device, rank, world,
               max_prompt_tokens):
    """Steps 1-4 of a training step: rollout, groups and advantages, one update per policy, new weights to
    the engine. Returns its metrics (timings included, evaluation not) and its samples."""
    dtype = getattr(torch, args.dtype)
    t0, sync0, switches0, env0 = time.time(), sampler.sync_s, sampler.switches, sampler.env_s
    # 1. rollout (time/env: the part of it spent stepping envs, in rollout's thread pool)
    samples, finals = play(args, sampler, step, rank, world, streams["branch"], max_prompt_tokens)
    kill_point("rollout", step + 1)
    t_rollout, t_env = time.time() - t0 - (sampler.sync_s - sync0), sampler.env_s - env0
    # 2. groups and advantages
    advantages = grouping.advantages([s.reward for s in samples], [s.key for s in samples], std_norm=bool(args.std_norm),
                                     norm=args.adv_norm)
    for s, adv in zip(samples, advantages):
        s.advantage = float(adv)
    # 3. update: each policy learns only from the groups routed to it (every rank calls every trained policy;
    # a frozen one, --train_roles, is never stepped: its weights and optimiser stay as they were)
    t1 = time.time()
    replicas.clear()  # stale, and the update wants the memory
    if args.sleep:
        engine.sleep()
    updates = {name: P.update(policy, [s for s in samples if s.policy == name], device, streams["shuffle"],
                              objective, args.temperature, args.micro_tokens, args.mini_batches, args.grad_clip,
                              args.kl_coef, tis_cap=args.tis_cap)
               for name, policy in policies.items() if name in args.train_roles or args.policies == "shared"}
    t_update = time.time() - t1
    kill_point("update", step + 1)
    # 4. new weights to the engine (per-role: each policy is pulled right before its role generates,
    # and that switch is timed inside the sampler)
    t2 = time.time()
    if args.sleep:
        engine.wake()
    push_weights(engine, sampler, policies, dtype, replicas, world)
    m = track.step_metrics(step + 1, samples, finals, roles, updates, policies, args.adv_norm)
    m["time/sync"] = time.time() - t2 + (sampler.sync_s - sync0)
    if args.device == "cuda":
        m.update(memory_metrics(rank, world))
    m["weight_switches"] = sampler.switches - switches0
    m["time/rollout"], m["time/env"], m["time/update"] = t_rollout, t_env, t_update
    return m, samples


def finish(args, summary, run_eval, proto, t_start, master, tracker, log):
    """The held-out evaluation after training, summary.json, and where everything went."""
    kill_point("eval_after", args.steps)
    if args.eval_n:
        summary["eval"]["after"] = run_eval()
        summary["success_after"] = summary["eval"]["after"]["success"]
        before, after = (summary["eval"].get(w) or {} for w in ("before", "after"))
        if after.get("by_source"):  # the paper's columns; success_before/after pool them
            summary["benchmarks"] = {src: {"n": b["n"], "after": b["success"], "after_se": b["success_se"],
                                           **({"before": before["by_source"][src]["success"],
                                               "before_se": before["by_source"][src]["success_se"]}
                                              if src in before.get("by_source", {}) else {})}
                                     for src, b in after["by_source"].items()}
        log(f"held-out success after training: {summary['success_after']:.3f} "
            f"(before: {summary['success_before']}; {proto['metric']}{track.benchmark_line(after)})")
    summary["wall_s"] = round(time.time() - t_start, 1)
    if master:
        write_json(os.path.join(args.out_dir, "summary.json"), summary)
        log(f"summary: {json.dumps(summary)}")
        ckpt = latest_checkpoint(args.out_dir)
        log(f"\ndone in {summary['wall_s']:.0f}s; everything is in {args.out_dir}/:")
        log(f"  metrics     {os.path.join(args.out_dir, 'metrics.jsonl')} (one line per step), samples.jsonl, summary.json")
        log(f"  checkpoint  {ckpt}" + (" (peft adapters: eval.py --merge DIR writes a full model)" if args.lora_rank else ""))
        log(f"  curves      python eval.py --plot {args.out_dir}")
        log(f"  evaluate    {eval_command(args, ckpt)}")
        if args.report_to == "tensorboard":
            log(f"  tensorboard tensorboard --logdir {os.path.join(args.out_dir, 'tensorboard')}")
    if tracker:
        if args.eval_n:
            tracker.log({"step": args.steps, "eval/success_after": summary["success_after"]})
        tracker.close()


def main(argv=None):
    args = get_args(argv)
    if args.plan:  # will it fit? the config alone, before any process group or weights
        import scale
        raise SystemExit(scale.plan_run(args))
    rank, world, local_rank = init_distributed(args.device, args.fsdp)
    master, launched = rank == 0, "RANK" in os.environ
    log = tqdm.write if master else (lambda s: None)
    device = f"cuda:{local_rank}" if args.device == "cuda" else "cpu"
    dtype = getattr(torch, args.dtype)  # the engine's; FSDP keeps fp32 master weights and computes in this
    t_start = time.time()
    if args.preset:
        log(f"preset {args.preset}: {json.dumps(PRESETS[args.preset])}")
    # the objective (an ablation of it is a new function in loss.py, named here)
    objective = functools.partial(loss.ppo_clip, eps_low=args.eps_low, eps_high=args.eps_high, kl_coef=args.kl_coef)
    ckpt = open_out_dir(args)
    if master and not args.preset and (why := no_cuda(args, argv)):  # the CPU presets mean the CPU
        print(f"train.py: WARNING: {why}: training {args.model} on the CPU. --device cuda to require a GPU, "
              f"--device cpu to mean it", file=sys.stderr, flush=True)

    # ---- model, tokenizer, one policy per name (shared: one; per-role: one per role), resume
    model_dir = tiny.resolve_model(args, master, log)
    planned = plan_at_start(args, model_dir, local_rank, world, master, log)  # refuses a run that will not fit
    torch.manual_seed(args.seed + rank)
    # our own seeded streams, one per decision, so an A/B of one does not move the other: tree sampling's
    # tie-breaks (rollout.pick_branch) and the mini-batch shuffle (policies.update)
    streams = {name: random.Random(f"{name}/{args.seed}/{rank}") for name in ("branch", "shuffle")}
    roles = make_env(args, "train", 0).roles
    tok, policies, max_prompt_tokens = load_model(args, model_dir, roles, ckpt, device, world, log)
    start, saved = resume(args, ckpt, policies, rank, world, master, log)

    # ---- engine and sampler (one engine serves every policy)
    with gpu_full(args, "the engine's start", rank):  # another process on the GPU, or no room for the KV cache
        engine = rollout.make_engine(args.engine, model_dir, device=args.device, dtype=args.dtype, seed=args.seed + rank,
                                     max_model_len=max_prompt_tokens + args.max_tokens,
                                     gpu_memory_utilization=args.gpu_memory_utilization, distributed=launched,
                                     sleep_mode=bool(args.sleep), lora_rank=args.lora_rank, max_loras=len(policies))
    replicas = {}  # per-role under FSDP with several ranks: see push_weights
    sampler = rollout.Sampler(engine, tok, lambda role: P.route(role, args.policies),
                              None if args.lora_rank else  # LoRA: adapters live in the engine, nothing to pull
                              lambda name: replicas[name] if name in replicas else policies[name].engine_weights(dtype),
                              overrides=args.role_sampling)
    push_weights(engine, sampler, policies, dtype, replicas, world)  # the engine started from --model; a resumed policy differs

    # ---- evaluation before training (a resumed run keeps its first one, if made the same way)
    proto = rollout.eval_protocol(args.task)  # eval.py's: the numbers are comparable
    # the held-out problems: every benchmark's share of --eval_n, eval.py's; rank 0 reads the test set at the first evaluation
    chosen = functools.cache(lambda: eval_set(args, rank, world))
    run_eval = functools.partial(evaluate, args, sampler, engine, proto, max_prompt_tokens, rank, world, chosen)
    summary = eval_before(args, run_eval, proto, start, master, log)

    # ---- random streams. They start here, after everything that seeds or draws at start-up (vLLM
    # re-seeds python, numpy and torch when its engine starts; then the weight push, the first evaluation):
    # a fresh run from the seed, as vLLM left them; a resumed one from its checkpoint.
    if saved:
        set_rng_states(saved["rng"], streams)
    else:
        rollout.seed_all(args.seed + rank)
    tracker = track.Tracker(args.report_to, args.out_dir, vars(args), start) if master and args.report_to != "none" else None
    if tracker and start == 0 and summary.get("success_before") is not None:
        tracker.log({"step": 0, "eval/success": summary["success_before"]})

    for step in tqdm(range(start, args.steps), desc="train", disable=not master, initial=start, total=args.steps):
        # 1-4. rollout -> groups and advantages -> one update per policy -> new weights to the engine
        with gpu_full(args, f"step {step + 1}", rank):  # a full GPU: one line naming the fix, the last checkpoint kept
            m, samples = train_step(args, step, sampler, engine, policies, replicas, streams, objective, roles,
                                    device, rank, world, max_prompt_tokens)
        if planned and step == start:  # the plan next to what the first step took
            log(f"memory at step {step + 1}: planned peak {planned / 2 ** 30:.1f} GiB per GPU; measured peak "
                f"{max(m['mem/peak_gib'])} GiB (torch allocator), GPU in use {max(m['mem/used_gib'])} GiB")
        # 5. evaluation, metrics, log, checkpoint
        if args.eval_n and args.eval_every and (step + 1) % args.eval_every == 0:
            ev = run_eval()
            m["eval/success"] = ev["success"]  # pooled; eval/<benchmark> each one when there are several
            m["eval/success_se"] = ev["success_se"]  # its standard error over the problems
            if len(ev.get("by_source", ())) > 1:
                m.update({f"eval/{src}": b["success"] for src, b in ev["by_source"].items()})
        if master:
            track.record_step(args, m, samples, roles, tracker, log)
        if (args.save_every and (step + 1) % args.save_every == 0) or step + 1 == args.steps:
            save_checkpoint(args.out_dir, step + 1, policies, tok, {"rng": rng_states(streams), "args": vars(args)},
                            args.keep_ckpts, rank, world, log)

    # ---- evaluation after training, summary
    finish(args, summary, run_eval, proto, t_start, master, tracker, log)
    if launched and args.engine != "vllm":  # vLLM's exit hook tears the process groups down itself
        barrier()  # together: a rank's teardown beside one still finishing aborted once in gloo (test_distributed)
        torch.distributed.destroy_process_group()
    return summary


if __name__ == "__main__":
    main()
