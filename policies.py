"""Shared or per-role policies: models, the update step (objective: loss.py, log-probs: logprobs.py), weight export.

Routing: `route(role, mode)` is the ONE place that says which policy serves and learns from a role:
"shared" -> every role maps to policy "shared"; "per-role" -> each role has its own policy, and a role's
groups train only its own model.


Log-probs (the forward that update differentiates): logprobs.py.

Update (`update`): plumbing around ONE objective, `loss_fn` (loss.py: PPO-clip by default; its
contract is there). The token-mean's denominator is the whole mini-batch's token count, fixed before
micro-batching, so gradient accumulation gives the same gradient as one big batch. Samples with A = 0
contribute exactly zero gradient to PPO-clip without KL, so their compute is skipped.

LoRA (`lora_model`, --lora_rank R): ONE frozen base carries one peft adapter per policy, named after it
(shared: one; per-role: one per role). Every policy's `model` and `net` are then the same objects; a policy
trains, exports and checkpoints only its own adapter (`params`, `engine_weights`), and `use()` makes its
adapter the active one before any forward. The KL reference is the base itself (adapters disabled).

Data parallel (torchrun): either FSDP2 (`shard`: fully_shard per decoder layer + a root around the
log-prob forward, bf16 mixed precision on GPU) or replicated models with summed gradients. Either way
every loss is divided by the token count of the whole mini-batch over ALL ranks and gradients are
summed, so the update equals the 1-process update on the union of the ranks' samples. Under FSDP each
forward/backward is a collective per layer, so every rank runs the same number of micro-steps (short
ranks run zero-weight dummies): a rank with no samples for a policy still takes part, never hangs.

    python -m pytest -q test_policies.py
"""
import math
import re
import warnings
from types import SimpleNamespace

import torch

from common import all_reduce_, read_adapter
from logprobs import LogProbs, pack, response_logprobs, shares_prompt


def route(role, mode):
    return "shared" if mode == "shared" else role


def policy_names(roles, mode):
    return list(dict.fromkeys(route(r, mode) for r in roles))


def shard(net, mesh, bf16):
    """FSDP2: one unit per decoder layer, the root around the rest. Parameters stay fp32 (the optimiser's
    master copy); with bf16 they are gathered and computed in bf16, gradients reduced in fp32."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else MixedPrecisionPolicy()
    units = list(net.lm.model.layers) + [net]
    for u in units:
        fully_shard(u, mesh=mesh, mp_policy=mp)
    for u in units:  # the loss is already a global token-mean: SUM the shards' gradients, never average
        u.set_gradient_divide_factor(1.0)
        u.set_force_sum_reduction_for_comms(True)  # gloo has no pre-multiplied sum


def is_dtensor(t):
    from torch.distributed.tensor import DTensor
    return isinstance(t, DTensor)


def lora_model(model, names, rank, alpha, targets, base_name, seed=0):
    """Wrap `model` (frozen from now on) with one LoRA adapter per policy name. B = 0 at the start (peft's
    init), so every adapter starts as the base model. targets: "all-linear" (every linear layer of the
    decoder, not lm_head) or a list of module names. A's random init is drawn from its own seed, on the
    CPU (call this before moving the model): every rank of a run draws the same A (FSDP shards ONE
    tensor), whatever the world size, and the caller's RNG streams do not move."""
    from peft import LoraConfig, get_peft_model
    cfg = LoraConfig(r=rank, lora_alpha=alpha, target_modules=targets, lora_dropout=0.0, bias="none",
                     base_model_name_or_path=base_name)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        pm = get_peft_model(model, cfg, adapter_name=names[0])
        for n in names[1:]:
            pm.add_adapter(n, cfg)
    train_adapters_only(pm)
    return pm


def train_adapters_only(pm):
    """The base frozen, EVERY adapter trainable, always: FSDP sees one fixed set of trainable parameters
    (an inactive adapter gets no gradient: it takes no part in the forward)."""
    for n, p in pm.named_parameters():
        p.requires_grad_(".lora_" in n)


def load_adapter_weights(pm, name, adapter_dir):
    """A peft adapter directory's weights into adapter `name` (its config must match the run's)."""
    from peft import set_peft_model_state_dict
    res = set_peft_model_state_dict(pm, read_adapter(adapter_dir), adapter_name=name)
    if getattr(res, "unexpected_keys", None):
        raise OSError(f"{adapter_dir}: weights that fit no adapter layer, e.g. {res.unexpected_keys[0]}")


def tied_names(model):
    """{name: the earlier name of the same parameter} for tied parameters (lm_head.weight ->
    model.embed_tokens.weight with tied embeddings)."""
    first, tied = {}, {}
    for k, p in model.named_parameters(remove_duplicate=False):
        if id(p) in first:
            tied[k] = first[id(p)]
        first.setdefault(id(p), k)
    return tied


class Policy:
    def __init__(self, name, model, lr, weight_decay, warmup, total_steps, schedule="constant", ref=None,
                 mesh=None, bf16=False, grad_ckpt=False, peft=None, net=None, logp_chunk=None):
        """mesh: a 1-D device mesh to shard the model over with FSDP2 (None: a plain model).
        bf16: compute in bf16 over the model's fp32 weights (FSDP's mixed precision; without a mesh, autocast).
        peft: the PeftModel from lora_model() when `model` carries adapters (this policy's is `name`);
        net: the LogProbs module every adapter of that base shares (already sharded when mesh is set).
        logp_chunk: tokens per lm_head chunk of the log-probs (logprobs.token_logprobs)."""
        self.name, self.model, self.ref, self.peft = name, model, ref, peft
        self.adapter = name if peft is not None else None
        if grad_ckpt and net is None:  # recompute each layer in backward: activations of one layer at a time
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.sharded = mesh is not None
        # bf16 without FSDP: fp32 master weights (AdamW's steps at lr 1e-6 vanish in bf16), bf16 compute
        mixed = torch.bfloat16 if bf16 and not self.sharded and next(model.parameters()).dtype == torch.float32 else None
        self.net = net if net is not None else LogProbs(model, logp_chunk, mixed)
        if self.sharded and net is None:
            shard(self.net, mesh, bf16)
        if self.adapter:  # only this adapter's A and B matrices: gradients and AdamW state for nothing else
            own = re.compile(rf"\.lora_[AB]\.{re.escape(name)}\.")
            self.params = [p for n, p in model.named_parameters() if own.search(n)]
        else:
            self.params = list(model.parameters())
        self.opt = torch.optim.AdamW(self.params, lr=lr, weight_decay=weight_decay, betas=(0.9, 0.999))

        def lr_at(step):  # linear warmup, then constant or cosine to 10%
            if step < warmup:
                return (step + 1) / warmup
            if schedule == "cosine":
                t = (step - warmup) / max(1, total_steps - warmup)
                return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, t)))
            return 1.0
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lr_at)

    def use(self):
        """Make this policy's adapter the active one (no-op without LoRA). peft's set_adapter freezes the
        other adapters: undone, so the set of trainable parameters never changes."""
        if self.adapter and self.peft.active_adapter != self.adapter:
            self.peft.set_adapter(self.adapter)
            train_adapters_only(self.peft)

    @property
    def lora_config(self):
        return self.peft.peft_config[self.adapter] if self.adapter else None

    def engine_weights(self, dtype=None):
        """(name, full tensor) one at a time: the whole model in state_dict() order, or with LoRA only this
        policy's adapter, named as in a peft adapter file. Under FSDP each is all-gathered when reached (a
        collective: every rank must drain the iterator), so no full copy of the model exists at once.
        A tied tensor is gathered and cast once and yielded under each of its names, one right after the
        other (vLLM 0.32's in-place reload loads lm_head as a layer of its own: without its name it keeps
        the old values). dtype: cast to the engine's dtype."""
        tied = {}
        if self.adapter:
            from peft import get_peft_model_state_dict
            items = get_peft_model_state_dict(self.peft, adapter_name=self.adapter).items()
        else:
            tied = tied_names(self.model)
            items = self.model.state_dict().items()
        for k, v in items:
            if k in tied:
                continue
            v = v.full_tensor() if is_dtensor(v) else v
            v = v.detach() if dtype is None else v.detach().to(dtype)
            yield k, v
            for alias in (a for a, src in tied.items() if src == k):
                yield alias, v

    def trainer_state(self):
        """Optimiser and scheduler state; under FSDP this rank's shards, as plain tensors."""
        opt = self.opt.state_dict()
        opt["state"] = {i: {k: v.to_local() if is_dtensor(v) else v for k, v in s.items()}
                        for i, s in opt["state"].items()}
        return {"opt": opt, "sched": self.sched.state_dict()}

    def load_trainer_state(self, st):
        self.opt.load_state_dict(st["opt"])
        self.sched.load_state_dict(st["sched"])
        from torch.distributed.tensor import DTensor
        for p in (p for g in self.opt.param_groups for p in g["params"]):
            for k, v in self.opt.state.get(p, {}).items():  # this rank's shards back into their DTensors
                if is_dtensor(p) and not is_dtensor(v) and v.dim() > 0:
                    self.opt.state[p][k] = DTensor.from_local(v, p.device_mesh, p.placements, run_check=False,
                                                              shape=p.shape, stride=p.stride())


_DUMMY = [SimpleNamespace(prompt_ids=[0], response_ids=[0], advantage=0.0, extra={})]


def lockstep(mbs, sharded):
    """Under FSDP every micro-step is a collective per layer: all ranks run as many micro-steps as the
    busiest one; the others pad with a 2-token dummy whose loss is multiplied by 0 (None marks it)."""
    if not sharded:
        return mbs
    n = int(all_reduce_(torch.tensor(len(mbs)), "max").item())
    return mbs + [None] * (n - len(mbs))


def settle(policy):
    """FSDP keeps the root's parameters gathered after a forward, for the backward that normally
    follows. After forwards with no backward they would stay so (and go stale at the optimiser step):
    shard them again."""
    if policy.sharded:
        policy.net.reshard()


def ref_logprobs(policy, mb, temperature, device):
    """Log-probs under the frozen reference of --kl_coef: with LoRA the base itself (adapters off; under
    FSDP a collective, so every rank calls it for every micro-step, dummies included), else the policy's
    replicated reference model (no collectives). peft's disable_adapter freezes every adapter but the
    active one on exit: undone, so the set of trainable parameters never changes (FSDP)."""
    if policy.adapter:
        try:
            with policy.peft.disable_adapter():
                return policy.net(mb or _DUMMY, temperature, device)
        finally:
            train_adapters_only(policy.peft)
    if mb is None or policy.ref is None:
        return None
    return [response_logprobs(policy.ref, [s], temperature, device)[0] for s in mb]


def tis_weights(mb, old, cap, temperature, acc):
    """Per-token min(exp(trainer logp - sampler logp), cap) of a micro-batch (1 where the sampler gave
    no log-probs, or sampled greedily); acc += (weight sum, token count) and max(uncapped ratio)."""
    samp = torch.cat([torch.tensor(s.logprobs if s.logprobs and temperature > 0 else [float("nan")] * len(s.response_ids),
                                   dtype=torch.float32) for s in mb]).to(old.device)
    ratio = torch.exp(old.float() - samp).nan_to_num(1.0)
    w = ratio.clamp(max=cap)
    acc[0] += w.sum().item()
    acc[1] += w.numel()
    acc[2] = max(acc[2], ratio.max().item() if ratio.numel() else 0.0)
    return w.to(old.dtype)


def update(policy, samples, device, rng, loss_fn, temperature=1.0, micro_tokens=4096, mini_batches=1,
           grad_clip=1.0, kl_coef=0.0, skip_zero_adv=True, tis_cap=0.0, old_pass=False):
    """One update of `policy` on its samples (sample.advantage already set) with `loss_fn` (the
    objective: loss.ppo_clip, or anything with its contract). Returns metrics summed/maxed over ranks:
    loss, grad_norm, logp_gap, skipped_steps, samples, trained (samples and response tokens that went
    through a backward: zero advantages are skipped without KL), and every stat loss_fn returns as a token-mean
    (those of the union of the ranks' samples). kl_coef > 0: reference log-probs are computed
    (ref_logprobs) and no sample is skipped. Every rank must call it for every
    policy, in the same order, even with no samples.

    Old log-probs: nothing has moved the weights before the first mini-batch's training forward, so its
    old log-probs ARE that forward's, detached (as TRL does); a separate no-grad pass before the first step
    computes only those of the later mini-batches' live samples (they must see the weights of before it).
    logp_gap (sampler vs trainer) is measured on the samples whose log-probs the trainer computes.
    old_pass=True: the separate pass over every sample, zero advantages too (what the trainer did before;
    bench.py measures the saving).
    tis_cap C > 0: truncated importance sampling for the sampler/trainer mismatch: each token's advantage
    is weighted by min(exp(old_logp - sampler_logp), C) (detached; 1 where the sampler gave no log-probs)."""
    model, net, sharded = policy.model, policy.net, policy.sharded
    m = {"samples": len(samples), "skipped_steps": 0, "loss": 0.0, "grad_norm": 0.0, "logp_gap": 0.0}
    # the names of loss_fn's stats, from the function itself on no tokens: every rank reduces the same
    # names in the same order, also a rank with no samples
    names = sorted(loss_fn(*(torch.zeros(0, device=device),) * 3, [], 1.0)[1])
    stats = dict.fromkeys(names, 0.0)  # name -> token-mean, averaged over mini-batches
    tis = [0.0, 0.0, 0.0]  # weight sum, token count, largest uncapped ratio
    trained = [0, 0]  # samples and response tokens that went through a backward (this rank's)
    n_mini = max(1, mini_batches)
    policy.use()
    model.eval()

    def gap(s, lp):  # sampler vs trainer, on this sample's tokens
        if s.logprobs and temperature > 0:
            d = (lp.detach().cpu() - torch.tensor(s.logprobs, dtype=torch.float32)).abs().max().item()
            m["logp_gap"] = max(m["logp_gap"], d)
    # mini-batches of whole groups (a group's samples share a prompt: computed once), shuffled; every
    # rank runs the same number of optimiser steps, so data-parallel all-reduces always pair up
    groups = {}
    for s in samples:
        groups.setdefault(tuple(s.prompt_ids), []).append(s)
    groups = list(groups.values())
    rng.shuffle(groups)
    minis = [[s for g in groups[k::n_mini] for s in g] for k in range(n_mini)]
    lives = [[s for s in mini if s.advantage != 0.0 or kl_coef > 0 or not skip_zero_adv] for mini in minis]
    # before any optimiser step, what later steps need: the old log-probs of the live samples of mini-batches
    # 2.. (the first one's ARE its training forward's, detached: no step has moved the weights yet), of every
    # sample with old_pass (what the trainer did before; bench.py measures it), and the KL reference's
    # (kl_coef > 0: every sample is live; its old log-probs then come from this pass too)
    separate_old = n_mini > 1 or old_pass
    if separate_old or kl_coef > 0:
        rows = samples if old_pass or kl_coef > 0 else [s for live in lives[1:] for s in live]
        with torch.no_grad():
            for mb in lockstep(list(pack(rows, micro_tokens, shares_prompt(model))), sharded):
                if separate_old:
                    for s, lp in zip(mb or [], net(mb or _DUMMY, temperature, device)):
                        s.extra["old_logp"] = lp
                        gap(s, lp)
                refs = ref_logprobs(policy, mb, temperature, device) if kl_coef > 0 else None
                for s, ref in zip(mb or [], refs or []):
                    s.extra["ref_logp"] = ref
    settle(policy)
    model.train()
    for mini, live in zip(minis, lives):
        denom = all_reduce_(torch.tensor(float(sum(len(s.response_ids) for s in mini)))).item()
        if denom == 0:  # no tokens for this policy on any rank: nothing to learn, no step
            continue
        trained[0] += len(live)
        trained[1] += sum(len(s.response_ids) for s in live)
        policy.opt.zero_grad(set_to_none=False)
        for p in policy.params:  # grads must exist on every rank for the reductions below
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        loss_sum, sums = torch.zeros(1, dtype=torch.float64), {}
        for mb in lockstep(list(pack(live, micro_tokens, shares_prompt(model))), sharded):
            lps = net(mb or _DUMMY, temperature, device)
            if mb is None:  # joins the layers' collectives, adds nothing
                (torch.cat(lps).sum() * 0.0).backward()
                continue
            for s, lp in zip(mb, lps):
                if "old_logp" not in s.extra:  # the first mini-batch's (see above)
                    s.extra["old_logp"] = lp.detach()
                    gap(s, lp)
            ref = torch.cat([s.extra["ref_logp"] for s in mb]) if "ref_logp" in mb[0].extra else None
            old = torch.cat([s.extra["old_logp"] for s in mb])
            adv = torch.cat([torch.full((len(s.response_ids),), s.advantage, device=device) for s in mb])
            if tis_cap > 0:
                adv = adv * tis_weights(mb, old, tis_cap, temperature, tis)
            loss, st = loss_fn(torch.cat(lps), old, adv, [len(s.response_ids) for s in mb], denom, ref_logp=ref)
            loss.backward()
            loss_sum += loss.item()
            for k, v in st.items():
                sums[k] = sums.get(k, 0.0) + float(v)
        settle(policy)
        if not sharded:  # replicated models: the token-mean over all ranks is a sum of gradients
            for p in policy.params:  # (FSDP already reduce-scattered them, summed, in backward)
                all_reduce_(p.grad)
        # global, so every rank skips or steps alike
        red = all_reduce_(torch.tensor([loss_sum.item()] + [sums.get(k, 0.0) for k in names], dtype=torch.float64)).tolist()
        gn = torch.nn.utils.clip_grad_norm_(policy.params, grad_clip)
        gn = gn.full_tensor() if is_dtensor(gn) else gn
        if not (math.isfinite(red[0]) and torch.isfinite(gn)):
            warnings.warn(f"policy {policy.name}: non-finite loss/grad ({red[0]}, {gn}); step skipped")
            m["skipped_steps"] += 1
        else:
            policy.opt.step()
        # freed, not zeroed: the rollout after the update holds no gradients (a model's worth of memory);
        # the next mini-batch makes them again
        policy.opt.zero_grad(set_to_none=True)
        m["loss"] += red[0] / n_mini
        m["grad_norm"] = max(m["grad_norm"], float(gn))
        for k, v in zip(names, red[1:]):
            stats[k] += v / max(denom, 1.0) / n_mini
    policy.sched.step()  # once per training step, not per mini-batch: --warmup and --steps count steps
    model.eval()
    m["logp_gap"] = all_reduce_(torch.tensor(m["logp_gap"]), "max").item()
    m["trained"], m["trained_tokens"] = (int(x) for x in all_reduce_(torch.tensor(trained, dtype=torch.float64)).tolist())
    if tis_cap > 0:
        w, n = all_reduce_(torch.tensor(tis[:2], dtype=torch.float64)).tolist()
        m["tis/weight_mean"], m["tis/ratio_max"] = w / max(n, 1.0), all_reduce_(torch.tensor(tis[2]), "max").item()
    for s in samples:
        s.extra.clear()
    return {**m, **stats}
