"""The update at the paper's shapes: FLOPs and memory, measured (bench.py --sections scale) and planned
(train.py --plan), for Qwen3 shapes built from their config alone (random weights, no hub, no download).

    python bench.py --sections scale            # CPU: chunked log-probs and block masks, before vs after (~10 min)
    python bench.py --sections scale --device cuda --shape qwen3-1.7b --prompt 1024 --K 8 --response 1024,2048 \
        --grad_ckpt 0,1 --regime per-role       # GPU: tokens/s, MFU against a bf16 matmul, peak memory, --plan's guess
    python train.py --model Qwen/Qwen3-1.7B --policies per-role --plan     # will it fit? (config.json only)
    python -m pytest -q test_scale.py

Measured (`measure`): one update (forward, backward, AdamW step) of every policy on G tree groups of
a prompt and K responses, through policies.update, the trainer's own code; each configuration in its own
process so that peak memory is its own (GPU: torch's allocator; CPU: the process's peak RSS). "before" =
the whole [tokens, vocab] logits at once, dense [L, L] masks and a separate old-log-prob pass; "after" =
lm_head in chunks, flex_attention block masks where torch can train them (CUDA), old log-probs from the
training forward; "old-pass" = after with the separate pass (what taking them from the forward saves). On CUDA the trainer is FSDP2 on one rank with bf16 compute and fp32 master weights, as
train.py runs it.

FLOPs (`update_flops`): model FLOPs, 2 per multiply-add: every linear layer per token, lm_head on response
tokens only, attention over the (query, key) pairs a token may see (4 x heads x head_dim each); backward
is twice the forward (LoRA: the frozen weights get no weight gradient, so linear layers count once);
recomputation (--grad_ckpt) and repeated prompts are not counted: MFU, not hardware utilisation.

Planned (`plan`): bytes per GPU from the config: trainer state + FSDP's gathered layers + activations of
one micro-batch + one lm_head chunk's logits + the engine's share, in the update and in the rollout (with
a role switch's transient), then the margin: CUDA context, NCCL's buffers, the allocator's reserved over
allocated (the constants above `plan`). The activation count is per token and layer, from the tensors a Qwen3 decoder
layer keeps for backward (`act_bytes`). For a run's own flags: `run_kwargs` (what train.py's flags mean for
the plan), `plan_run` (train.py --plan) and `run_verdict` (train.py's check at start on CUDA).
"""
import json
import os
import resource
import subprocess
import sys
import time

import torch

GiB = 2 ** 30
SHAPES = {  # Qwen3 (tied embeddings, head_dim 128, 151,936 tokens), and small shapes a 2-core CPU runs
    "qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8),
    "qwen3-1.7b": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8),
    "qwen3-4b": dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8),
    "smollm2-135m": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                         num_key_value_heads=3, head_dim=64, vocab_size=49152),  # its dims, as a Qwen3
    "cpu-152k": dict(hidden_size=256, intermediate_size=768, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=64),
    "cpu-small": dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=4, num_attention_heads=8,
                      num_key_value_heads=4, head_dim=64, vocab_size=32768),
}


def shape_config(name):
    from transformers import Qwen3Config
    kw = dict(vocab_size=151936, head_dim=128, tie_word_embeddings=True, max_position_embeddings=40960,
              rope_theta=1e6, rms_norm_eps=1e-6)
    kw.update(SHAPES[name])
    return Qwen3Config(**kw)


def load_config(model):
    """A named shape (or a hub id naming one: Qwen/Qwen3-1.7B), a model dir (its config.json only) or a hub
    id already in the local cache."""
    if model.lower().split("/")[-1] in SHAPES:
        return shape_config(model.lower().split("/")[-1])
    from transformers import AutoConfig
    path = os.path.join(model, "config.json") if os.path.isdir(model) else model
    if os.path.isfile(path):
        return AutoConfig.from_pretrained(os.path.dirname(path) or ".")
    try:
        return AutoConfig.from_pretrained(model)
    except OSError:
        raise ValueError(f"--plan needs {model!r}'s config.json: a local dir, a cached hub id, or one of {sorted(SHAPES)}")


# ---- counts -------------------------------------------------------------------------------------------
def dims(cfg):
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd


def layer_params(cfg):
    H, I, q, kv = dims(cfg)
    return H * (q + 2 * kv) + q * H + 3 * H * I


def n_params(cfg):
    V, H = cfg.vocab_size, cfg.hidden_size
    return cfg.num_hidden_layers * layer_params(cfg) + V * H * (1 if cfg.tie_word_embeddings else 2)


def lora_params(cfg, rank):
    """A and B of every linear layer of the decoder (all-linear: q, k, v, o, gate, up, down)."""
    H, I, q, kv = dims(cfg)
    return cfg.num_hidden_layers * rank * ((H + q) + 2 * (H + kv) + (q + H) + 2 * (H + I) + (I + H))


def pairs(P, K, R):
    """(query, key) pairs a shared-prompt row may attend: the prompt causally, each response to the prompt
    and its own earlier tokens."""
    return P * (P + 1) // 2 + K * (R * P + R * (R + 1) // 2)


def update_flops(cfg, groups, lora=False):
    """Model FLOPs of one update over `groups` [(prompt, K, response length)]."""
    H, _, q, _ = dims(cfg)
    tokens = sum(P + K * R for P, K, R in groups)
    resp = sum(K * R for _, K, R in groups)
    linear = 2 * (cfg.num_hidden_layers * layer_params(cfg) * tokens + cfg.vocab_size * H * resp)
    attn = 4 * q * cfg.num_hidden_layers * sum(pairs(*g) for g in groups)
    return (2 if lora else 3) * linear + 3 * attn


def act_bytes(cfg, b=2):
    """Bytes one token keeps for backward in one decoder layer, compute dtype of b bytes: each RMSNorm
    an fp32 copy and its output (two of H, the q/k norms over q and kv), q, k and v after RoPE, the
    attention output and o_proj's input, the attention's log-sum-exp (fp32 per head), and the MLP's gate,
    its activation, up and their product (4 of I)."""
    H, I, q, kv = dims(cfg)
    fp32 = 4
    norms = 2 * H * (fp32 + b) + (q + kv) * (fp32 + b)
    attn = b * (q + 2 * kv) + b * q + b * q + fp32 * cfg.num_attention_heads  # q, k, v; output; o_proj input; lse
    mlp = 4 * b * I
    return norms + attn + mlp


# The margin: what a process needs beyond torch's tensors (docs/scale.md). Measured on the H200's out-of-memory
# row (docs/scale-h200.jsonl): bench.py's parent, a CUDA context with cuBLAS and a matmul's tensors, held 1002
# MiB; the failing process had 132.58 GiB in use, 126.81 GiB allocated: 4.8 GiB over it besides its context,
# after the allocator had given its free cache back to retry, 3.8% it could not return (fragmentation).
CUDA_CONTEXT = 1.0 * GiB  # per process (trainer and engine share one); a trainer loads more kernels than bench
FRAGMENTATION = 0.05  # of torch's allocations at the peak (3.8% measured, rounded up)
FRAGMENTATION_EXPANDABLE = 0.01  # expandable_segments:True unmaps free pages (assumed, not measured)
# assumed: one NCCL communicator over several GPUs keeps 0.5-1.6 GiB per GPU (NVIDIA/nccl issues 964, 864;
# NVLS adds to it, NCCL_NVLS_ENABLE=0 returns that); one rank opens no peer buffers
NCCL_BUFFERS = 1.5 * GiB


def plan(cfg, policies=1, lora_rank=0, world=1, fsdp=True, bf16=True, micro_tokens=8192, grad_ckpt=False,
         logp_chunk=1024, kl=False, engine_bytes=0, rollout_bytes=0, replica_bytes=0, switch_bytes=0,
         expandable=False):
    """Expected peak bytes per GPU, by part. fsdp: fp32 master weights sharded over `world` ranks, bf16
    compute (bf16) with 2 layers gathered at a time (the one running, the one prefetched); else the fp32
    model on every rank, computed under autocast (bf16), or with LoRA a frozen base in the compute dtype.
    Activations: one micro-batch of micro_tokens tokens (all of them response tokens: the worst case for
    the logits). engine_bytes: what the engine holds during the update (0 with --sleep 1); rollout_bytes:
    its share during the rollout (back at its wake after the update), beside the trainer's weights and AdamW
    moments (gradients are freed after each step) and replica_bytes (per-role on several ranks: each
    policy's engine-dtype copy); switch_bytes: the rollout's transient of a role switch or weight push
    (run_kwargs). "update phase" and "rollout phase" are what torch and the engine hold; "total" is the
    larger phase plus the process's CUDA context, NCCL's buffers (several ranks) and the allocator's
    margin over torch's allocations (FRAGMENTATION, less with expandable segments)."""
    N, L, V, H = n_params(cfg), cfg.num_hidden_layers, cfg.vocab_size, cfg.hidden_size
    b = 2 if bf16 else 4
    store = 4 if fsdp or not lora_rank else b  # per stored parameter (and gradient, each AdamW moment): fp32
    # master weights on every full fine-tuning path; a LoRA base without FSDP is frozen in the compute dtype
    shard = world if fsdp else 1
    part = {}
    if lora_rank:  # one frozen base, one adapter per policy (params, grads, 2 moments in fp32)
        part["trainer state"] = N * store / shard + policies * lora_params(cfg, lora_rank) * 16 / shard
        held = N * store / shard + policies * lora_params(cfg, lora_rank) * 12 / shard
    else:
        part["trainer state"] = policies * N * 4 * store / shard
        held = policies * N * 3 * store / shard
    if kl and not lora_rank:
        part["KL reference"] = policies * N * b
    if fsdp:  # gathered compute copies + unsharded gradients of two layers, and the root (embeddings, lm_head)
        grad = 0 if lora_rank else b + 4
        part["FSDP gathered"] = (2 * layer_params(cfg) + V * H) * (b + grad)
    elif bf16 and not lora_rank:  # autocast's bf16 copy of each weight, kept through one forward and backward
        part["autocast copies"] = N * b
    tok_layer = act_bytes(cfg, b)
    T = micro_tokens
    if grad_ckpt:  # every layer's input, then one layer's activations at a time (twice: forward and backward)
        part["activations"] = L * T * H * b + 2 * T * tok_layer
    else:
        part["activations"] = L * T * tok_layer
    C = min(logp_chunk, T) if logp_chunk > 0 else T
    part["logits"] = C * V * (b + 3 * 4)  # one chunk: model-dtype logits, fp32 copy, its softmax and gradient
    if engine_bytes:
        part["engine"] = engine_bytes
    part["update phase"] = sum(part.values())
    frag = FRAGMENTATION_EXPANDABLE if expandable else FRAGMENTATION
    phases = [(part["update phase"], part["update phase"] - engine_bytes)]  # (bytes, of them torch's)
    if rollout_bytes or replica_bytes:  # the rollout holds weights, AdamW's moments and the engine: no
        # activations, and no gradients (policies.update frees them after each optimiser step)
        part["rollout phase"] = held + part.get("KL reference", 0) + rollout_bytes + replica_bytes
        part["role switch"] = switch_bytes
        phases.append((part["rollout phase"] + switch_bytes, part["rollout phase"] + switch_bytes - rollout_bytes))
    peak, torch_bytes = max(phases, key=lambda ph: ph[0] + frag * ph[1])
    part["CUDA context"] = CUDA_CONTEXT
    part["NCCL buffers"] = NCCL_BUFFERS if world > 1 else 0
    part["allocator margin"] = frag * torch_bytes
    part["total"] = peak + part["CUDA context"] + part["NCCL buffers"] + part["allocator margin"]
    return part


def fits(cfg, gpu_bytes, **kw):
    """None when the plan fits, else the first changes (in the order a user would try them) that do."""
    if plan(cfg, **kw)["total"] <= gpu_bytes:
        return None
    tries = [dict(expandable=True)] if not kw.get("expandable") else []
    tries += [dict(grad_ckpt=True)] + [dict(grad_ckpt=True, micro_tokens=m) for m in (4096, 2048)]
    if kw.get("engine_bytes"):
        tries += [dict(grad_ckpt=True, engine_bytes=0)]
    if kw.get("fsdp", True):
        tries += [dict(grad_ckpt=True, world=w) for w in (2, 4, 8) if w > kw.get("world", 1)]
    if not kw.get("lora_rank"):
        tries += [dict(grad_ckpt=True, lora_rank=16), dict(grad_ckpt=True, lora_rank=16, micro_tokens=2048)]
    for t in tries:
        if plan(cfg, **{**kw, **t})["total"] <= gpu_bytes:
            return t
    return {}


def print_plan(cfg, name, gpu_gib, **kw):
    p = plan(cfg, **kw)
    ok = p["total"] <= gpu_gib * GiB
    print(f"plan for {name} ({n_params(cfg) / 1e9:.2f}B parameters), per GPU: " +
          ", ".join(f"{k}={v / GiB:.1f} GiB" if k.endswith("bytes") else f"{k}={v}" for k, v in kw.items()))
    frag = FRAGMENTATION_EXPANDABLE if kw.get("expandable") else FRAGMENTATION
    rest = p["CUDA context"] + p["NCCL buffers"] + p["allocator margin"]
    peak = "update phase" if abs(p["total"] - rest - p["update phase"]) < 1 else "rollout phase + role switch"
    why = {"update phase": "the parts above" + (" (the engine awake)" if kw.get("engine_bytes") else ""),
           "rollout phase": "weights, AdamW moments, the engine's share (back at its wake after the update)",
           "role switch": "rollout: a policy's largest tensor gathered, cast and loaded into the engine",
           "CUDA context": "per process (1002 MiB measured on an H200, with cuBLAS)",
           "NCCL buffers": "several ranks: one communicator (assumed)",
           "allocator margin": f"{frag:.0%} of torch's tensors at the peak: reserved over allocated",
           "total": f"{peak} + the three above"}
    for k, v in p.items():
        print(f"  {k:17s} {v / GiB:8.2f} GiB" + (f"   {why[k]}" if k in why else ""))
    print(f"  {'fits' if ok else 'does NOT fit'} in {gpu_gib:g} GiB")
    if not ok:
        print("  would fit with: " + fix_flags(fits(cfg, gpu_gib * GiB, **kw)))
    return ok


def fix_flags(fix):
    """fits()'s answer as the flags a user adds."""
    if not fix:
        return ("none of PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, --grad_ckpt 1, smaller --micro_tokens, "
                "--sleep 1, more ranks or --lora_rank 16")
    said = {"expandable": "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "grad_ckpt": "--grad_ckpt 1",
            "engine_bytes": "--sleep 1"}
    flags = {"micro_tokens": "--micro_tokens", "world": "torchrun --nproc_per_node", "lora_rank": "--lora_rank"}
    return " ".join(said.get(k) or f"{flags[k]} {int(v)}" for k, v in fix.items())


def run_kwargs(args, cfg, gpu_bytes, world):
    """plan()'s arguments for this run's flags on `world` GPUs of gpu_bytes each (the engine takes
    --gpu_memory_utilization of it), and this process's PYTORCH_CUDA_ALLOC_CONF. On a machine without a GPU
    it plans for one (bf16 unless --dtype float32 was given on a GPU box). The role switch: the sampler
    pulls a policy's weights into the engine one tensor at a time (train.push_weights, Policy.engine_weights),
    under FSDP each gathered in fp32, then cast: the largest tensor (the embedding) in fp32 and in the
    engine's dtype at once; the HF engine loads a whole state dict at once. With LoRA only adapters move: nothing to count."""
    import policies as P
    from common import task_roles
    bf16 = args.dtype == "bfloat16" or args.device == "cpu"
    n, b = n_params(cfg), 2 if bf16 else 4
    names = P.policy_names(task_roles(args), args.policies)
    share = args.gpu_memory_utilization * gpu_bytes if args.engine == "vllm" else n * b
    replicas = len(names) * n * b if world > 1 and len(names) > 1 and not args.lora_rank else 0
    H, I, q, _ = dims(cfg)
    largest = max(cfg.vocab_size * H, H * I, H * q)
    fsdp = args.fsdp != 0
    switch = 0 if args.lora_rank else (4 * fsdp) * largest + (n if args.engine == "hf" else largest) * b
    conf = os.environ.get("PYTORCH_ALLOC_CONF") or os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or ""  # torch's order
    return dict(policies=len(names), lora_rank=args.lora_rank, world=world, fsdp=fsdp, bf16=bf16,
                micro_tokens=args.micro_tokens, grad_ckpt=bool(args.grad_ckpt), logp_chunk=args.logp_chunk,
                kl=args.kl_coef > 0, engine_bytes=0 if args.sleep else share, rollout_bytes=share,
                replica_bytes=replicas, switch_bytes=switch, expandable="expandable_segments:True" in conf)


def run_verdict(args, cfg, gpu_bytes, world):
    """(planned peak bytes per GPU, None if that fits gpu_bytes, else the one-line refusal naming the
    flags that would fit). What train.py checks at start on CUDA, with the GPU's own memory."""
    kw = run_kwargs(args, cfg, gpu_bytes, world)
    total = plan(cfg, **kw)["total"]
    if total <= gpu_bytes:
        return total, None
    fix = fits(cfg, gpu_bytes, **kw)
    return total, (f"the memory plan says this run needs {total / GiB:.1f} GiB per GPU and the GPU has "
                   f"{gpu_bytes / GiB:.1f} GiB: " + (f"add {fix_flags(fix)}" if fix else fix_flags(fix)
                   + " makes it fit") + " (--plan prints the plan; --plan_check 0 runs it anyway)")


def plan_run(args):
    """train.py --plan: the plan for this run's settings (its WORLD_SIZE), weights never loaded; 0 if it fits."""
    from common import die
    try:
        cfg = load_config(args.tiny_dir if args.model == "tiny" else args.model)
    except (ValueError, OSError) as e:
        die(str(e).splitlines()[0])
    world = int(os.environ.get("WORLD_SIZE", 1))
    kw = run_kwargs(args, cfg, args.plan_gpu_gib * GiB, world)
    return 0 if print_plan(cfg, args.model, args.plan_gpu_gib, **kw) else 1


# ---- measured -----------------------------------------------------------------------------------------
def matmul_tflops(device, dtype, n, reps=5):
    """The speed of one square matmul here and now: the peak MFU is measured against."""
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(2):
        a @ b
    sync()
    t = time.time()
    for _ in range(reps):
        a @ b
    sync()
    return 2 * n ** 3 * reps / (time.time() - t) / 1e12


def samples_for(groups, roles, seed=0):
    """G tree groups of random token ids: group g's prompt and K responses, for role g % len(roles)."""
    import random
    from rollout import Sample
    g = random.Random(seed)
    out = []
    for i, (P, K, R) in enumerate(groups):
        p = [g.randrange(3, 30000) for _ in range(P)]
        role = roles[i % len(roles)]
        for k in range(K):
            s = Sample(p, [g.randrange(3, 30000) for _ in range(R)], [], 0.0, (i, 0, role), role, role, False)
            s.advantage = 1.0 if k % 2 else -1.0  # A = 0 would be skipped
            out.append(s)
    return out


def peak_bytes(device):
    if device == "cuda":
        return torch.cuda.max_memory_allocated()
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def measure(c):
    """One configuration, in THIS process (bench.py runs each in its own). Returns the numbers as a dict."""
    import random
    import loss
    import logprobs as LP
    import policies as P
    from transformers import AutoModelForCausalLM
    dev, cfg = c["device"], shape_config(c["shape"])
    after = c["variant"] in ("after", "old-pass")  # old-pass: after, but with the separate old-log-prob pass
    mesh = None
    if dev == "cuda":  # FSDP2 on one rank, bf16 compute, fp32 master weights: train.py's GPU path
        from common import init_distributed
        from torch.distributed.device_mesh import init_device_mesh
        init_distributed("cuda", True)
        mesh = init_device_mesh("cuda", (1,))
    roles = ["tool", "planner"] if c["regime"] != "shared" else ["shared"]
    groups = [(c["prompt"], c["K"], c["response"])] * c["groups"]
    torch.manual_seed(0)

    def model():
        with torch.device(dev):
            m = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
        if after:
            LP.set_attention(m, "auto", dev)
        return m.eval()
    chunk = c["logp_chunk"] if after else 0
    kw = dict(mesh=mesh, bf16=dev == "cuda", logp_chunk=chunk)
    if c["regime"] == "lora":
        base = model()
        if c["grad_ckpt"]:
            base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        pm = P.lora_model(base, roles, c["lora_rank"], 2 * c["lora_rank"], "all-linear", "random")
        net = LP.LogProbs(base, chunk)
        if mesh is not None:
            P.shard(net, mesh, True)
        pols = [P.Policy(r, base, 1e-5, 0.0, 0, 10, peft=pm, net=net, **kw) for r in roles]
    else:
        pols = [P.Policy(r, model(), 1e-6, 0.0, 0, 10, grad_ckpt=bool(c["grad_ckpt"]), **kw) for r in roles]
    attention = LP.attention_path(pols[0].model).split(":")[0]
    samples = samples_for(groups, roles)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    def one_update():
        for s in samples:
            s.extra.clear()
        for pol in pols:
            P.update(pol, [s for s in samples if s.policy == pol.name], dev, random.Random(0), loss.ppo_clip, 1.0,
                     c["micro_tokens"], 1, 1.0, 0.0, old_pass=c["variant"] != "after")
        sync()
    times = []
    for step in range(1 + c["steps"]):  # the first is a warm-up (kernels compiled, allocator grown)
        sync()
        t = time.time()
        one_update()
        times.append(time.time() - t)
    dt = min(times[1:]) if len(times) > 1 else times[0]
    prof = profiled(one_update, dev, c["profile"]) if c.get("profile") else None  # after the timing: no overhead in it
    state = 0  # what FSDP shards: trainable parameters, their gradients, AdamW's moments; a LoRA base
    for pol in pols:
        for p in pol.params:
            state += p.numel() * p.element_size() * 2
            state += sum(v.numel() * v.element_size() for v in pol.opt.state.get(p, {}).values() if v.dim())
    if c["regime"] == "lora":
        state += sum(p.numel() * p.element_size() for p in pols[0].model.parameters() if not p.requires_grad)
    flops = update_flops(cfg, groups, lora=c["regime"] == "lora")
    tokens = sum(P_ + K * R for P_, K, R in groups)
    return dict(c, attention=attention, seconds=dt, tokens_per_s=tokens / dt, tflops=flops / dt / 1e12,
                peak_bytes=peak_bytes(dev), state_bytes=state, params=n_params(cfg), **({"profiled": prof} if prof else {}))


def profiled(run, dev, top=12):
    """One call of run() under torch.profiler: each op's self time (on CUDA the device time of the kernels it
    launched, on CPU its CPU time), by category and the top ops. Category: optimizer / attention when the op
    runs inside one (AdamW's elementwise ops, sdpa's matmuls), else by its own name (matmul, casts and
    copies, communication), else other (elementwise ops, norms, softmax, ...)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev == "cuda" else [])) as p:
        run()
    has = lambda names, keys: any(k in n.lower() for n in names for k in keys)
    ops, cats = {}, {}
    for e in p.events():
        if e.device_type != DeviceType.CPU:  # a kernel counts through the op that launched it
            continue
        ms = (e.self_device_time_total if dev == "cuda" else e.self_cpu_time_total) / 1e3
        if ms <= 0:
            continue
        up, q = [e.name], e.cpu_parent
        while q is not None:
            up.append(q.name)
            q = q.cpu_parent
        cat = ("optimizer" if has(up, ("optimizer.step", "adam")) else
               "communication" if has(up, ("nccl", "all_gather", "reduce_scatter", "c10d")) else
               "attention" if has(up, ("attention", "flex")) else
               "matmul" if has(up[:1], ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul")) else
               "casts and copies" if has(up[:1], ("copy", "aten::to", "aten::cat")) else "other")
        cats[cat] = cats.get(cat, 0.0) + ms
        o = ops.setdefault(e.name, [e.name, 0.0, 0])
        o[1], o[2] = o[1] + ms, o[2] + 1
    return dict(total_ms=sum(cats.values()), categories=cats, top=sorted(ops.values(), key=lambda o: -o[1])[:top])


def logits_step(c):
    """The log-prob step alone: T response tokens' hidden states through lm_head (V x H) to log-probs,
    forward and backward, whole matrix (chunk 0) or chunked. Returns seconds and peak bytes."""
    import logprobs as LP
    dev, V, H, T = c["device"], c["vocab"], c["hidden"], c["tokens"]
    dt = torch.bfloat16 if dev == "cuda" else torch.float32
    g = torch.Generator(device=dev).manual_seed(0)
    head = torch.nn.Linear(H, V, bias=False, device=dev, dtype=dt)
    h = torch.randn(T, H, device=dev, dtype=dt, generator=g, requires_grad=True)
    tgt = torch.randint(0, V, (T,), device=dev, generator=g)
    temp = torch.ones(T, device=dev)
    if dev == "cuda":  # a warm-up first (cuBLAS handles, kernels); its memory is freed before the measured call
        LP.token_logprobs(head, h[:256], tgt[:256], temp[:256], c["chunk"]).sum().backward()
        h.grad = head.weight.grad = None
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated() if dev == "cuda" else peak_bytes(dev)
    t = time.time()
    LP.token_logprobs(head, h, tgt, temp, c["chunk"]).sum().backward()
    if dev == "cuda":
        torch.cuda.synchronize()
    return dict(c, seconds=time.time() - t, peak_bytes=peak_bytes(dev), base_bytes=base)


def row_forward(c):
    """One shared-prompt row (prompt + K responses) forward without gradients (old log-probs, KL reference,
    evaluation): dense mask vs flex block mask, on the given shape. Returns the best seconds of 3."""
    import logprobs as LP
    from transformers import AutoModelForCausalLM
    dev, cfg = c["device"], shape_config(c["shape"])
    torch.manual_seed(0)
    with torch.device(dev):
        m = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    if c["attention"] == "flex":
        m.set_attn_implementation("flex_attention")
    ss = samples_for([(c["prompt"], c["K"], c["response"])], ["x"])
    best = []
    with torch.no_grad():
        for _ in range(4):  # the first compiles flex_attention
            t = time.time()
            LP.shared_prompt_logprobs(m, ss, 1.0, dev)
            best.append(time.time() - t)
    return dict(c, seconds=min(best[1:]), first_s=best[0])


def run_isolated(kind, c, timeout=3600):
    """`kind`(c) in a fresh python: its own peak memory, and an out-of-memory kills only it."""
    code = f"import json, sys, scale; print('RESULT ' + json.dumps(scale.{kind}(json.loads(sys.argv[1]))))"
    try:
        r = subprocess.run([sys.executable, "-c", code, json.dumps(c)], capture_output=True, text=True, timeout=timeout,
                           cwd=os.path.dirname(os.path.abspath(__file__)))
    except subprocess.TimeoutExpired:
        return dict(c, error=f"timeout after {timeout}s")
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    err = [x for x in r.stderr.strip().splitlines() if x.strip()]
    return dict(c, error=(err[-1] if err else f"exit {r.returncode}")[:300])


def bench(a):
    """bench.py --sections scale: the parts in the order given, every configuration of the flags."""
    dev = a.device
    peak = matmul_tflops(dev, torch.bfloat16 if dev == "cuda" else torch.float32, 8192 if dev == "cuda" else 2048)
    print(f"scale: {'bf16' if dev == 'cuda' else 'fp32'} matmul {peak:.1f} TFLOP/s here (the MFU reference), torch "
          f"{torch.__version__}" + (f", {torch.cuda.get_device_name()}" if dev == "cuda" else f", {os.cpu_count()} cores"),
          flush=True)
    rows = []

    def keep(r, **kw):  # printed and written as measured: a run cut short keeps what it had
        rows.append(dict(r, **kw))
        if a.json:
            with open(a.json, "a") as f:
                f.write(json.dumps(rows[-1]) + "\n")
        return rows[-1]
    for part in a.parts:
        {"logits": bench_logits, "row": bench_row, "update": bench_update}[part](a, keep, peak)
    return rows


def say(*args):
    print(*args, flush=True)


def bench_logits(a, keep, peak):
    """Item 1 alone: lm_head -> log-probs at a 152k vocabulary, whole matrix vs chunks."""
    res = []
    for chunk in (0, a.logp_chunk):
        r = keep(run_isolated("logits_step", dict(device=a.device, vocab=151936, hidden=a.logits_hidden,
                                                  tokens=a.logits_tokens, chunk=chunk)), part="logits")
        res.append(r)
        say(f"logits {a.logits_tokens} tokens x 151936 vocab (hidden {a.logits_hidden}), "
            f"{'whole matrix' if chunk == 0 else f'chunks of {chunk}'}: " + (r.get("error") or
            f"{r['seconds']:.2f}s, peak {(r['peak_bytes'] - r['base_bytes']) / GiB:.2f} GiB above the inputs"))
    if not any("error" in r for r in res):
        b, c = res
        say(f"logits: peak memory {(b['peak_bytes'] - b['base_bytes']) / max(1, c['peak_bytes'] - c['base_bytes']):.1f}x "
            f"lower, time {b['seconds'] / c['seconds']:.2f}x")


def bench_row(a, keep, peak):
    """Item 2 where this torch runs it everywhere: a shared-prompt row's forward (CPU has no flex backward)."""
    res = {}
    for att in ("sdpa", "flex"):
        r = keep(run_isolated("row_forward", dict(device=a.device, shape=a.row_shape, prompt=a.prompt, K=a.K,
                                                  response=a.row_response, attention=att)), part="row")
        res[att] = r
        say(f"row forward ({a.row_shape}, prompt {a.prompt} + {a.K} x {a.row_response}), {att}: " +
            (r.get("error") or f"{r['seconds']:.2f}s (first call {r['first_s']:.1f}s)"))
    if all("error" not in r for r in res.values()):
        say(f"row forward: flex block mask {res['sdpa']['seconds'] / res['flex']['seconds']:.2f}x faster than the dense mask")


def bench_update(a, keep, peak):
    """Whole updates through policies.update, per shape, response length, regime, --grad_ckpt, variant."""
    dev = a.device
    for shape in a.shape:
        cfg = shape_config(shape)
        for R in a.response:
            for regime in a.regime:
                for ck in a.grad_ckpt:
                    pair = {}
                    for variant in a.variants:
                        c = dict(device=dev, shape=shape, prompt=a.prompt, K=a.K, response=R, groups=a.groups,
                                 regime=regime, grad_ckpt=ck, variant=variant, micro_tokens=a.micro_tokens,
                                 logp_chunk=a.logp_chunk, steps=a.steps, lora_rank=a.lora_rank, profile=a.profile)
                        mb = min(a.micro_tokens, a.prompt + a.K * R)  # the largest micro-batch it runs
                        est = plan(cfg, policies=1 if regime == "shared" else 2, lora_rank=a.lora_rank if regime == "lora" else 0,
                                   fsdp=dev == "cuda", bf16=dev == "cuda", micro_tokens=mb, grad_ckpt=bool(ck),
                                   logp_chunk=0 if variant == "before" else a.logp_chunk)
                        r = pair[variant] = keep(run_isolated("measure", c), part="update", plan=est, matmul_tflops=peak)
                        est = est["update phase"]  # torch's allocations: what max_memory_allocated measures
                        head = f"update {shape} {regime} P{a.prompt} K{a.K} R{R} x{a.groups} ckpt{ck} {variant:6s}"
                        if "error" in r:
                            say(f"{head}: {r['error']}")
                            continue
                        sim = r["peak_bytes"] - r["state_bytes"] * 7 / 8
                        mem = (f"peak {r['peak_bytes'] / GiB:.2f} GiB (plan {est / GiB:.2f}; with 8 ranks' shards "
                               f"{sim / GiB:.2f})" if dev == "cuda" else f"peak RSS {r['peak_bytes'] / GiB:.2f} GiB")
                        say(f"{head}: {r['attention']}, {r['seconds']:.2f}s, {r['tokens_per_s']:.0f} tok/s, "
                            f"{r['tflops']:.2f} TFLOP/s = {r['tflops'] / peak:.0%} of the matmul, {mem}")
                        if "profiled" in r:
                            pr = r["profiled"]
                            say(f"  profile ({'device' if dev == 'cuda' else 'CPU'} self time {pr['total_ms']:.0f} ms): " + ", ".join(
                                f"{k} {v / pr['total_ms']:.0%}" for k, v in sorted(pr["categories"].items(), key=lambda kv: -kv[1])))
                            for name, ms, n in pr["top"]:
                                say(f"    {ms:9.1f} ms {n:6d}x  {name[:100]}")
                    if "before" in pair and "after" in pair and not any("error" in r for r in pair.values()):
                        b, c = pair["before"], pair["after"]
                        say(f"  after vs before: {b['seconds'] / c['seconds']:.2f}x faster, peak "
                            f"{b['peak_bytes'] / c['peak_bytes']:.2f}x lower")
                    if "after" in pair and "old-pass" in pair and not any("error" in r for r in pair.values()):
                        o, c = pair["old-pass"], pair["after"]
                        say(f"  old log-probs from the training forward: {o['seconds'] - c['seconds']:.1f}s of "
                            f"{o['seconds']:.1f}s saved ({o['seconds'] / c['seconds']:.2f}x)")
