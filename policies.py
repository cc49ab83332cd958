"""Shared or per-role policies: models, log-probs, the PPO-clip loss and step, weight export.

Routing: `route(role, mode)` is the ONE place that says which policy serves and learns from a role:
"shared" -> every role maps to policy "shared"; "per-role" -> each role has its own policy, and a role's
groups train only its own model.

Log-probs: the K samples of a tree group share their prompt, so it is computed once per group and
its KV cache reused by the K responses (shared_prompt_logprobs). Other samples go in length-sorted
micro-batches: one padding-free packed row under flash-attention (GPU), right-padded rows otherwise. Logits are divided by the
sampling temperature, as the sampler did.

Loss (PPO-clip, no value net): per response token, -min(r*A, clip(r, 1-eps_low, 1+eps_high)*A), plus
optionally kl_coef * k3(pi || ref). Token-mean over ALL response tokens of the policy's mini-batch (the
denominator is fixed before micro-batching, so gradient accumulation gives the same gradient as one
big batch). Samples with A = 0 contribute exactly zero gradient without KL, so their compute is skipped.

    python -m pytest -q test_policies.py
"""
import math
import warnings

import torch


def route(role, mode):
    return "shared" if mode == "shared" else role


def policy_names(roles, mode):
    return list(dict.fromkeys(route(r, mode) for r in roles))


class Policy:
    def __init__(self, name, model, lr, weight_decay, warmup, total_steps, schedule="constant", ref=None):
        self.name, self.model, self.ref = name, model, ref
        self.opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, betas=(0.9, 0.999))

        def lr_at(step):  # linear warmup, then constant or cosine to 10%
            if step < warmup:
                return (step + 1) / warmup
            if schedule == "cosine":
                t = (step - warmup) / max(1, total_steps - warmup)
                return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, t)))
            return 1.0
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lr_at)

    def state_dict_for_engine(self):
        """Weights as the engine wants them: state_dict() (tied embeddings included), detached."""
        return {k: v.detach() for k, v in self.model.state_dict().items()}


def pack(samples, max_tokens):
    """Micro-batches of at most ~max_tokens tokens. Samples that share a prompt (a tree group) go
    together, so the prompt is computed once for all of them (see shared_prompt_logprobs); the rest
    are sorted by length and batched, so rows in one micro-batch are nearly equally long."""
    groups = {}
    for s in samples:
        groups.setdefault(tuple(s.prompt_ids), []).append(s)
    singles = []
    for g in groups.values():
        if len(g) == 1 or len(g[0].prompt_ids) < 2:
            singles += g
            continue
        chunk = []
        for s in sorted(g, key=lambda s: len(s.response_ids)):
            if chunk and len(g[0].prompt_ids) + (len(chunk) + 1) * len(s.response_ids) > max_tokens:
                yield chunk
                chunk = []
            chunk.append(s)
        yield chunk
    batch, longest = [], 0
    for s in sorted(singles, key=lambda s: len(s.prompt_ids) + len(s.response_ids)):
        L = len(s.prompt_ids) + len(s.response_ids)
        if batch and (len(batch) + 1) * max(longest, L) > max_tokens:
            yield batch
            batch, longest = [], 0
        batch.append(s)
        longest = max(longest, L)
    if batch:
        yield batch


def logprobs(model, samples, temperature, device):
    """Per-sample response log-probs of a micro-batch from pack()."""
    p = samples[0].prompt_ids
    if len(samples) > 1 and len(p) >= 2 and all(s.prompt_ids == p for s in samples):
        return shared_prompt_logprobs(model, samples, temperature, device)
    return response_logprobs(model, samples, temperature, device)


def shared_prompt_logprobs(model, samples, temperature, device):
    """The K samples of a tree group share one prompt: run the prompt once, repeat its KV cache K
    times, and run only the K responses on top (gradients flow back through the cache). Saves
    (K - 1) prompt forwards and backwards per group: most of the compute when responses are short."""
    P = samples[0].prompt_ids
    K, R = len(samples), max(len(s.response_ids) for s in samples)
    head = model.model(input_ids=torch.tensor([P[:-1]], device=device), use_cache=True)
    cache = head.past_key_values
    cache.batch_repeat_interleave(K)
    ids = torch.zeros((K, R), dtype=torch.long)
    att = torch.zeros((K, len(P) - 1 + R), dtype=torch.long)
    att[:, : len(P) - 1] = 1
    for b, s in enumerate(samples):  # input: last prompt token + response[:-1]; right padded
        q = [P[-1]] + list(s.response_ids[:-1])
        ids[b, : len(q)] = torch.tensor(q)
        att[b, len(P) - 1: len(P) - 1 + len(q)] = 1
    hidden = model.model(input_ids=ids.to(device), attention_mask=att.to(device), past_key_values=cache,
                         use_cache=True).last_hidden_state
    out = []
    for b, s in enumerate(samples):
        logits = model.lm_head(hidden[b, : len(s.response_ids)]).float() / temperature
        tgt = torch.tensor(s.response_ids, device=device)
        out.append(torch.log_softmax(logits, -1).gather(-1, tgt[:, None])[:, 0])
    return out


def response_logprobs(model, samples, temperature, device):
    """Log-prob of each response token under `model`, one forward. Returns a list of 1-D tensors.

    With flash-attention (GPU) the micro-batch is one packed row: sequences concatenated, position ids
    restarting at 0, which transformers turns into variable-length attention: no compute on padding.
    Other attention kernels (CPU sdpa) would build a dense [L, L] block mask for a packed row, which
    costs more than the little padding of length-sorted rows, so there we right-pad instead."""
    seqs = [list(s.prompt_ids) + list(s.response_ids) for s in samples]
    if "flash" in str(getattr(model.config, "_attn_implementation", "")):
        ids = torch.tensor([[t for q in seqs for t in q]], device=device)
        pos = torch.tensor([[p for q in seqs for p in range(len(q))]], device=device)
        hidden = model.model(input_ids=ids, position_ids=pos, use_cache=False).last_hidden_state[0]
        offsets = [sum(map(len, seqs[:i])) for i in range(len(seqs))]
        rows = [hidden[o: o + len(q)] for o, q in zip(offsets, seqs)]
    else:
        L = max(map(len, seqs))
        ids = torch.zeros((len(seqs), L), dtype=torch.long)
        att = torch.zeros((len(seqs), L), dtype=torch.long)
        for b, q in enumerate(seqs):  # right padding: causal attention never looks at it
            ids[b, : len(q)] = torch.tensor(q)
            att[b, : len(q)] = 1
        hidden = model.model(input_ids=ids.to(device), attention_mask=att.to(device), use_cache=False).last_hidden_state
        rows = [hidden[b] for b in range(len(seqs))]
    out = []
    for s, h in zip(samples, rows):
        P, R = len(s.prompt_ids), len(s.response_ids)
        logits = model.lm_head(h[P - 1: P + R - 1]).float() / temperature  # only rows predicting the response
        tgt = torch.tensor(s.response_ids, device=device)
        out.append(torch.log_softmax(logits, -1).gather(-1, tgt[:, None])[:, 0])
    return out


def ppo_loss(logp, old_logp, adv, eps_low=0.2, eps_high=0.2, denom=None, ref_logp=None, kl_coef=0.0):
    """PPO-clip token loss summed and divided by `denom` (the token count of the whole mini-batch).
    logp, old_logp, ref_logp: [T] per token; adv: [T] (the sample advantage broadcast to its tokens)."""
    ratio = torch.exp(logp - old_logp)
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    tok = -torch.minimum(ratio * adv, clipped * adv)
    if ref_logp is not None and kl_coef > 0:
        d = ref_logp - logp
        tok = tok + kl_coef * (torch.exp(d) - d - 1)  # k3 estimator of KL(pi || ref), unbiased, >= 0
    denom = denom if denom is not None else logp.numel()
    clipfrac = ((ratio < 1 - eps_low) | (ratio > 1 + eps_high)).float().sum()
    return tok.sum() / denom, clipfrac


def all_reduce_(t):
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.all_reduce(t)
    return t


def update(policy, samples, args, device, rng):
    """One PPO-clip update of `policy` on its samples (sample.advantage already set). Returns metrics."""
    model = policy.model
    m = {"samples": len(samples), "skipped_steps": 0, "clipfrac": 0.0, "loss": 0.0, "grad_norm": 0.0,
         "logp_gap": 0.0}
    model.eval()
    # old log-probs, recomputed by the trainer before any optimiser step (and the sampler/trainer gap)
    with torch.no_grad():
        for mb in pack(samples, args.micro_tokens):
            for s, lp in zip(mb, logprobs(model, mb, args.temperature, device)):
                s.extra["old_logp"] = lp
                if s.logprobs and args.temperature > 0:
                    gap = (lp.cpu() - torch.tensor(s.logprobs, dtype=torch.float32)).abs().max().item()
                    m["logp_gap"] = max(m["logp_gap"], gap)
                if policy.ref is not None and args.kl_coef > 0:
                    s.extra["ref_logp"] = response_logprobs(policy.ref, [s], args.temperature, device)[0]
    model.train()
    # mini-batches of whole groups (a group's samples share a prompt: computed once), shuffled; every
    # rank runs the same number of optimiser steps, so data-parallel all-reduces always pair up
    groups = {}
    for s in samples:
        groups.setdefault(tuple(s.prompt_ids), []).append(s)
    groups = list(groups.values())
    rng.shuffle(groups)
    n_mini = max(1, args.mini_batches)
    minis = [[s for g in groups[k::n_mini] for s in g] for k in range(n_mini)]
    for mini in minis:
        denom = all_reduce_(torch.tensor(float(sum(len(s.response_ids) for s in mini)))).item()
        if denom == 0:  # no tokens for this policy on any rank: nothing to learn, no step
            continue
        live = [s for s in mini if s.advantage != 0.0 or args.kl_coef > 0]
        policy.opt.zero_grad(set_to_none=False)
        for p in model.parameters():  # grads must exist on every rank for the all-reduce below
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        loss_sum, clip_sum = 0.0, 0.0
        for mb in pack(live, args.micro_tokens):
            lps = logprobs(model, mb, args.temperature, device)
            logp = torch.cat(lps)
            old = torch.cat([s.extra["old_logp"] for s in mb])
            adv = torch.cat([torch.full((len(s.response_ids),), s.advantage, device=device) for s in mb])
            ref = torch.cat([s.extra["ref_logp"] for s in mb]) if "ref_logp" in mb[0].extra else None
            loss, clip = ppo_loss(logp, old, adv, args.eps_low, args.eps_high, denom, ref, args.kl_coef)
            loss.backward()
            loss_sum += loss.item()
            clip_sum += clip.item()
        for p in model.parameters():  # data parallel: the token-mean over all ranks is a sum of grads
            if p.grad is not None:
                all_reduce_(p.grad)
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        if not (math.isfinite(loss_sum) and torch.isfinite(gn)):
            warnings.warn(f"policy {policy.name}: non-finite loss/grad ({loss_sum}, {gn}); step skipped")
            policy.opt.zero_grad(set_to_none=False)
            m["skipped_steps"] += 1
        else:
            policy.opt.step()
        policy.sched.step()
        m["loss"] += loss_sum / n_mini
        m["grad_norm"] = max(m["grad_norm"], float(gn))
        m["clipfrac"] += clip_sum / max(denom, 1.0) / n_mini
    model.eval()
    for s in samples:
        s.extra.clear()
    return m
