"""The trainer's log-probs of sampled responses: what policies.update differentiates.

The K samples of a tree group share their prompt, so it is computed once per group: prompt
and K responses go in ONE row whose attention mask lets each response see the prompt and itself only
(shared_prompt_logprobs). With flex_attention (--attention, CUDA) every group of a micro-batch is packed
into one row under a block mask, so masked blocks cost nothing; with sdpa (CPU, or --attention sdpa)
each group is a row with a dense [L, L] mask. Under flash-attention a micro-batch is one padding-free
packed row of whole sequences instead. lm_head runs in chunks of tokens (token_logprobs): the
[tokens, vocab] logits never exist at once. Logits are divided by the sampling temperature, as the
sampler did. Every micro-batch is one forward of every layer, which is what FSDP's
per-layer hooks and gradient checkpointing need. Each sample's logits are divided by ITS sampling
temperature (`sample.temperature`: per-role sampling may mix several in one policy), else by the
`temperature` passed in.

    python -m pytest -q test_policies.py
"""
import contextlib

import torch
from torch.utils.checkpoint import checkpoint

LOGP_CHUNK = 1024  # tokens per lm_head chunk (--logp_chunk): ~4 x chunk x vocab x 4 bytes live at once


class LogProbs(torch.nn.Module):
    """The module FSDP wraps as its root: one call = the log-probs of one micro-batch, so the root's
    parameters (embeddings, final norm, lm_head) are gathered around the whole computation."""

    def __init__(self, model, chunk=None, autocast=None):
        """autocast: a dtype to compute in (torch.autocast) over fp32 weights: the replicated (--fsdp 0)
        path's mixed precision; FSDP casts its gathered layers itself."""
        super().__init__()
        self.lm, self.chunk, self.autocast = model, LOGP_CHUNK if chunk is None else chunk, autocast

    def forward(self, samples, temperature, device):
        ctx = torch.autocast(torch.device(device).type, self.autocast) if self.autocast else contextlib.nullcontext()
        with ctx:  # clone: FSDP warns about returned views (in-place ops on them would skip its hooks)
            return [lp.clone() for lp in logprobs(self.lm, samples, temperature, device, self.chunk)]


def shares_prompt(model):
    """Whether a tree group's prompt is computed once (a custom attention mask; sdpa takes one) or
    repeated per sample (flash-attention's padding-free packed row takes no mask)."""
    return getattr(model.config, "_attn_implementation", None) in ("sdpa", "flex_attention")


def pack(samples, max_tokens, shared=True):
    """Micro-batches of at most ~max_tokens tokens, padding counted. A row is a prompt with every
    response that shares it (a tree group; split if longer than the budget) when shared=True, else one
    sample. Rows are sorted by length, so the rows of one micro-batch are nearly equally long. Few, full
    micro-batches matter on CPU: each one is a forward of every layer, whatever its size."""
    rows = {}
    for s in samples:
        rows.setdefault(tuple(s.prompt_ids) if shared else id(s), []).append(s)
    cost = lambda row: len(row[0].prompt_ids) + sum(len(s.response_ids) for s in row)
    parts = []
    for row in rows.values():
        part = []
        for s in sorted(row, key=lambda s: len(s.response_ids)):
            if part and cost(part + [s]) > max_tokens:
                parts.append(part)
                part = []
            part.append(s)
        parts.append(part)
    batch, longest = [], 0
    for row in sorted(parts, key=cost):
        if batch and (len(batch) + 1) * max(longest, cost(row)) > max_tokens:
            yield [s for r in batch for s in r]
            batch, longest = [], 0
        batch.append(row)
        longest = max(longest, cost(row))
    if batch:
        yield [s for r in batch for s in r]


def temperatures(samples, default):
    """Each sample's own sampling temperature (Sample.temperature; 0 = greedy or unknown: the default)."""
    return [getattr(s, "temperature", 0.0) or default for s in samples]


def token_logprobs(head, hidden, targets, temps, chunk=LOGP_CHUNK):
    """log softmax(head(h) / T)[target] for every row of hidden [N, H], `chunk` rows at a time.

    The [N, vocab] logits never exist at once: each chunk's logits are made in the model's dtype, taken
    to fp32 for the log-sum-exp, and dropped; with gradients on, a chunk is a checkpoint, so backward
    recomputes its logits instead of keeping them (at a 152k vocabulary, 8k tokens of fp32 logits are
    5 GB, and log_softmax and the gradients each add as much again). chunk <= 0: the whole matrix at
    once, as the trainer did before (bench.py's baseline)."""
    if chunk <= 0:
        return torch.log_softmax(head(hidden).float() / temps[:, None], -1).gather(-1, targets[:, None])[:, 0]

    def part(h, tgt, t):
        logits = head(h).float() / t[:, None]
        return logits.gather(-1, tgt[:, None])[:, 0] - torch.logsumexp(logits, -1)
    grad = torch.is_grad_enabled() and hidden.requires_grad
    out = []
    for i in range(0, len(targets), chunk):
        args = (hidden[i: i + chunk], targets[i: i + chunk], temps[i: i + chunk])
        out.append(checkpoint(part, *args, use_reentrant=False) if grad else part(*args))
    return torch.cat(out) if out else hidden.new_zeros(0, dtype=torch.float32)


def flex_ok(model, device):
    """flex_attention (a block-sparse mask: masked blocks are skipped) runs a training step where torch
    has it and can differentiate it (CUDA; torch 2.13 has no flex backward on the CPU) and the model
    class supports it."""
    try:
        from torch.nn.attention.flex_attention import flex_attention  # noqa: F401
    except ImportError:
        return False
    return torch.device(device).type == "cuda" and getattr(model, "_supports_flex_attn", False)


def set_attention(model, choice, device):
    """--attention: "flex" = flex_attention block masks (an error where flex_ok says no), "sdpa" = the
    model's own kernel with dense masks, "auto" = flex where flex_ok, else sdpa. Call before sharding."""
    if choice == "sdpa" or (choice == "auto" and not flex_ok(model, device)):
        return
    if not flex_ok(model, device):
        raise ValueError(f"--attention flex needs torch's flex_attention with a backward (CUDA here, not {device}) "
                         f"and a model class that supports it ({type(model).__name__})")
    model.set_attn_implementation("flex_attention")
    import torch._dynamo.config as dc  # compiled once per (bucketed) row length: allow that many
    for k in ("recompile_limit", "cache_size_limit"):
        if hasattr(dc, k):
            setattr(dc, k, max(getattr(dc, k), 64))


def attention_path(model):
    """What a log-prob forward of `model` does, in words (train.py logs it)."""
    impl = getattr(model.config, "_attn_implementation", None)
    return {"flex_attention": "flex_attention: each micro-batch is one packed row of tree groups, masked blocks skipped",
            "sdpa": "sdpa: one row per tree group with a dense [L, L] mask (prompt computed once)"}.get(
        impl, f"{impl}: padding-free packed rows, the prompt repeated per sample")


def logprobs(model, samples, temperature, device, chunk=LOGP_CHUNK):
    """Per-sample response log-probs of a micro-batch from pack(), in the order of `samples`."""
    if shares_prompt(model):
        return shared_prompt_logprobs(model, samples, temperature, device, chunk)
    return response_logprobs(model, samples, temperature, device, chunk)


def block_mask(visible, L, device, block=128):
    """flex_attention's BlockMask for mask_mod `visible` over an [L, L] square (L a multiple of `block`),
    built one row of blocks at a time: torch's create_block_mask evaluates the whole [L, L] square at once
    (gigabytes at L = 17k, the K=8 x 2k-token rows of the paper's shapes)."""
    from torch.nn.attention.flex_attention import BlockMask
    nb, kv = L // block, torch.arange(L, device=device)
    partial, full = [], []
    for i in range(nb):
        q = torch.arange(i * block, (i + 1) * block, device=device)
        seen = visible(0, 0, q[:, None], kv[None, :]).view(block, nb, block).sum((0, 2))  # visible pairs per kv block
        full.append(seen == block * block)
        partial.append((seen > 0) & (seen < block * block))

    def ordered(m):  # per q block: how many kv blocks, and their indices first
        m = torch.stack(m).to(torch.int32)[None, None]
        return m.sum(-1).to(torch.int32), torch.argsort(m, dim=-1, descending=True, stable=True).to(torch.int32)
    return BlockMask.from_kv_blocks(*ordered(partial), *ordered(full), BLOCK_SIZE=block, mask_mod=visible,
                                    seq_lengths=(L, L))


def _bucket(n):
    """Packed flex rows are padded to few lengths: flex_attention is compiled once per shape."""
    return max(128, 1 << (n - 1).bit_length()) if n <= 1024 else -(-n // 1024) * 1024


def shared_prompt_logprobs(model, samples, temperature, device, chunk=LOGP_CHUNK):
    """One row per distinct prompt: the prompt once, then every response that shares it (a tree group's
    K samples). Each response sees the prompt and its own earlier tokens only; its positions continue
    from the prompt's. Saves (K - 1) prompt forwards and backwards per group: most of the compute when
    responses are short. sdpa: rows right-padded, a dense [L, L] boolean mask each (padding sees only
    padding, so no softmax row is empty, and nothing real sees it). flex_attention: every row of the
    micro-batch is packed into ONE row (padded to a bucketed length) under a block mask built from the
    segments (group, and prompt / response k), so the kernel skips blocks no token may see: with K long
    responses that is most of the [L, L] square."""
    flex = getattr(model.config, "_attn_implementation", None) == "flex_attention"
    groups = {}
    for i, s in enumerate(samples):
        groups.setdefault(tuple(s.prompt_ids), []).append(i)
    built = []
    for P, idx in groups.items():
        n = len(P) - 1
        ids, pos, seg, starts = list(P[:-1]), list(range(n)), [0] * n, []
        for k, i in enumerate(idx):  # response k's input: last prompt token + response[:-1]
            q = [P[-1]] + list(samples[i].response_ids[:-1])
            starts.append(len(ids))
            ids += q
            pos += range(n, n + len(q))
            seg += [k + 1] * len(q)
        built.append((ids, pos, seg, starts, idx))
    if flex:  # one row: group g's tokens carry doc g; offsets shift each group's starts
        ids, pos, seg, doc, rows = [], [], [], [], []
        for g, (i_, p_, s_, st, idx) in enumerate(built):
            rows.append((0, [len(ids) + t for t in st], idx))
            ids += i_
            pos += p_
            seg += s_
            doc += [g] * len(i_)
        built_rows = [(ids, pos, seg)]
        B, L = 1, _bucket(len(ids))
    else:
        rows = [(b, st, idx) for b, (_, _, _, st, idx) in enumerate(built)]
        built_rows = [(i_, p_, s_) for i_, p_, s_, _, _ in built]
        B, L = len(built), max(len(b[0]) for b in built)
    ids_t = torch.zeros((B, L), dtype=torch.long)
    pos_t = torch.zeros((B, L), dtype=torch.long)
    seg_t = torch.full((B, L), -1)
    for b, (ids, pos, seg) in enumerate(built_rows):
        ids_t[b, : len(ids)], pos_t[b, : len(ids)], seg_t[b, : len(ids)] = (torch.tensor(v) for v in (ids, pos, seg))
    seg_t = seg_t.to(device)
    if flex:
        doc_t = torch.full((L,), -1, device=device)
        doc_t[: len(doc)] = torch.tensor(doc, device=device)
        sg = seg_t[0]

        def visible(b, h, q, kv):  # causal, same group, and the prompt or the same response
            return (kv <= q) & (doc_t[q] == doc_t[kv]) & ((sg[q] == sg[kv]) | (sg[kv] == 0))
        mask = block_mask(visible, L, device)
    else:
        mask = torch.ones(L, L, dtype=torch.bool, device=device).tril() & (
            (seg_t[:, :, None] == seg_t[:, None, :]) | (seg_t[:, None, :] == 0))  # causal; own response or prompt
        mask = mask[:, None]
    hidden = model.model(input_ids=ids_t.to(device), position_ids=pos_t.to(device), attention_mask=mask,
                         use_cache=False).last_hidden_state
    where, tgt, temp = [], [], []  # (row, position) of every response token's prediction, its target, its temperature
    ts = temperatures(samples, temperature)
    for b, starts, idx in rows:
        for st, i in zip(starts, idx):
            where += [(b, t) for t in range(st, st + len(samples[i].response_ids))]
            tgt += samples[i].response_ids
            temp += [ts[i]] * len(samples[i].response_ids)
    bt = torch.tensor(where, device=device)
    lp = token_logprobs(model.lm_head, hidden[bt[:, 0], bt[:, 1]], torch.tensor(tgt, device=device),
                        torch.tensor(temp, device=device), chunk)
    out, o = [None] * len(samples), 0
    for _, _, idx in rows:
        for i in idx:
            out[i] = lp[o: o + len(samples[i].response_ids)]
            o += len(samples[i].response_ids)
    return out


def response_logprobs(model, samples, temperature, device, chunk=LOGP_CHUNK):
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
    ts = temperatures(samples, temperature)
    h = torch.cat([r[len(s.prompt_ids) - 1: len(s.prompt_ids) + len(s.response_ids) - 1] for s, r in zip(samples, rows)])
    tgt = torch.tensor([t for s in samples for t in s.response_ids], device=device)
    temp = torch.tensor([t for s, t in zip(samples, ts) for _ in s.response_ids], device=device, dtype=torch.float32)
    return list(torch.split(token_logprobs(model.lm_head, h, tgt, temp, chunk), [len(s.response_ids) for s in samples]))
