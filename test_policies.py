"""PPO-clip loss, token-mean normalisation, packing, routing. python -m pytest -q test_policies.py"""
import functools
import math
import random
from types import SimpleNamespace

import pytest
import torch

import loss as L
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


def new_policy(tiny_dir, name="tool", warmup=0, schedule="constant"):
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32)
    return P.Policy(name, m, lr=1e-3, weight_decay=0.0, warmup=warmup, total_steps=10, schedule=schedule)


def test_padded_and_single_logprobs_agree(tiny_dir):
    pol = new_policy(tiny_dir)
    ss = make_samples(9)
    with torch.no_grad():
        together = P.response_logprobs(pol.model, ss, 0.9, "cpu")
        alone = [P.response_logprobs(pol.model, [s], 0.9, "cpu")[0] for s in ss]
    for a, b in zip(together, alone):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_token_mean_is_exact_under_micro_batching(tiny_dir):
    ss = make_samples(24)
    grads = []
    for micro in (100000, 40):  # one micro-batch vs many (shared-prompt groups split too)
        pol = new_policy(tiny_dir)
        copies = [Sample(**{k: getattr(s, k) for k in s.__dataclass_fields__}) for s in ss]
        m = update(pol, copies, args(micro_tokens=micro))
        # the accumulated gradient of the (single) optimiser step stays in .grad
        grads.append(torch.cat([p.grad.flatten() for p in pol.model.parameters()]))
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
        mbs = list(P.pack(ss, 64, shared))
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
        rows = P.shared_prompt_logprobs(pol.model, ss, 0.7, "cpu")
        alone = [P.response_logprobs(pol.model, [s], 0.7, "cpu")[0] for s in ss]
    assert len({tuple(s.prompt_ids) for s in ss}) > 1
    for a, b in zip(rows, alone):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    # and gradients flow through the masked rows exactly as through separate forwards
    pol.model.zero_grad()
    torch.cat(P.shared_prompt_logprobs(pol.model, ss, 0.7, "cpu")).sum().backward()
    g1 = torch.cat([p.grad.flatten() for p in pol.model.parameters()])
    pol.model.zero_grad()
    torch.cat([P.response_logprobs(pol.model, [s], 0.7, "cpu")[0] for s in ss]).sum().backward()
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
        shared = P.shared_prompt_logprobs(pol.model, ss, 1.0, "cpu")
        padded = P.response_logprobs(pol.model, ss, 1.0, "cpu")
        alone = [P.response_logprobs(pol.model, [dataclasses.replace(s, temperature=0.0)], s.temperature, "cpu")[0]
                 for s in ss]
        at_one = P.response_logprobs(pol.model, [dataclasses.replace(s, temperature=0.0) for s in ss], 1.0, "cpu")
    for a, b, c in zip(alone, shared, padded):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=0)
        torch.testing.assert_close(c, a, atol=1e-5, rtol=0)
    assert max((a - b).abs().max().item() for a, b, s in zip(alone, at_one, ss) if s.temperature != 1.0) > 1e-2
