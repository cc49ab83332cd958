"""The controls of table.py's rows (issue 34), each one flag: each test fails if its flag changes nothing.

    python -m pytest -q test_controls.py

--adv_norm agent (grouping.advantages, hand-computed in test_grouping.py; here: it reaches train.py's
update), --branch random (rollout.pick_branch), --local_reward 0 (the sparse team reward), --train_roles
(frozen roles stay bit-identical, full and LoRA). The tree-logic test uses test_rollout's scripted engine,
so the branch choice can be checked against known rewards."""
import json
import os
import random

import numpy as np
import pytest
import torch

import envs
import grouping
import rollout as R
from test_rollout import Scripted, plan_env

BASE = ["--task", "plan_path", "--size", "5", "--tool_mode", "direct", "--max_turns", "2", "--K", "3",
        "--problems", "2", "--max_tokens", "8", "--lr", "1e-3", "--device", "cpu", "--engine", "hf"]


# ---- --branch random -------------------------------------------------------------------------------
def test_random_branch_is_any_branch_and_deterministic_per_seed():
    rewards = [0.0, 5.0, 1.0, 2.0]
    assert {R.pick_branch(rewards, random.Random(s)) for s in range(40)} == {1}  # best: always the best
    picks = [R.pick_branch(rewards, random.Random(s), "random") for s in range(40)]
    assert set(picks) == {0, 1, 2, 3}  # random: every branch, the best one too
    assert picks == [R.pick_branch(rewards, random.Random(s), "random") for s in range(40)]  # per seed
    with pytest.raises(ValueError):
        R.pick_branch(rewards, random.Random(0), "worst")


def play(tok, branch, seed):
    """train.play under train.py's flags, on a scripted engine: (samples, finals)."""
    import train
    args = train.get_args(BASE + ["--model", "tiny", "--branch", branch])
    texts = ["UU", "garbage", "LR", "D", "RRRR", "", "L", "UDUD"]
    sampler = R.Sampler(Scripted(tok, texts), tok, lambda r: "shared", lambda n: {})
    return train.play(args, sampler, 0, 0, 1, random.Random(seed), 4096)


def test_branch_flag_reaches_train_play_and_changes_the_continued_branch(tok):
    def continued(samples):
        groups = {}
        for s in samples:
            groups.setdefault(s.key, []).append(s)
        return {k: ([x.extra.get("continued", False) for x in g], [x.reward for x in g]) for k, g in groups.items()}
    best = continued(play(tok, "best", 0)[0])
    assert all(r[flags.index(True)] == max(r) for flags, r in best.values())
    runs = [continued(play(tok, "random", s)[0]) for s in (0, 0, 1, 2, 3)]
    assert runs[0] == runs[1]  # the same seed: the same branches, the same samples
    # some episode went on from a branch that was not a best one (with the best rule none ever does)
    assert any(r[flags.index(True)] < max(r) for run in runs for flags, r in run.values())


# ---- --local_reward 0 ------------------------------------------------------------------------------
def test_local_reward_zero_leaves_the_team_outcome_alone(tiny_dir):
    import train
    dense = train.get_args(BASE + ["--model", tiny_dir])
    sparse = train.get_args(BASE + ["--model", tiny_dir, "--local_reward", "0", "--alpha", "2"])
    assert sparse.local_reward == 0.0
    for i in range(4):
        for text in ("garbage", "R", "RD"):  # unparseable (local -1), moves (local: progress)
            d, s = (envs.make(a.task, "train", i, **envs.task_options(a.task, a)) for a in (dense, sparse))
            rd, rs = d.step("tool", text), s.step("tool", text)
            assert rs == 2.0 * rs.team and rs.local == 0.0 and rd.team == rs.team
    assert envs.make("plan_path", "train", 0, size=5, tool_mode="direct").step("tool", "garbage") == -1.0  # dense: local


# ---- --adv_norm, --train_roles: one training step each ---------------------------------------------
def weights(d):
    from transformers import AutoModelForCausalLM
    return {k: v.clone() for k, v in AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).state_dict().items()}


def test_train_tool_only_keeps_the_planner_bit_identical_and_agent_norm_reaches_the_update(warm_dir, tmp_path):
    import train
    out = tmp_path / "run"
    train.main(BASE + ["--model", warm_dir, "--policies", "per-role", "--train_roles", "tool", "--adv_norm", "agent",
                       "--steps", "1", "--log_samples", "1000", "--out_dir", str(out)])
    init, ck = weights(warm_dir), out / "ckpt-000001"
    planner, tool = weights(ck / "planner"), weights(ck / "tool")
    assert all(torch.equal(planner[k], init[k]) for k in init)  # frozen: bit-identical
    assert any(not torch.equal(tool[k], init[k]) for k in init)  # trained: moved
    m = json.loads(open(out / "metrics.jsonl").readline())
    assert "grad_norm/tool" in m and "grad_norm/planner" not in m  # per-policy gradient norm, trained ones
    rows = [json.loads(l) for l in open(out / "samples.jsonl")]
    r, keys = [x["reward"] for x in rows], [tuple(x["key"]) for x in rows]
    np.testing.assert_allclose([x["advantage"] for x in rows], grouping.advantages(r, keys, norm="agent"), atol=1e-9)
    assert not np.allclose(grouping.advantages(r, keys, norm="agent"), grouping.advantages(r, keys))  # a real change


def test_train_roles_with_lora_keeps_the_frozen_adapter(warm_dir, tmp_path):
    import train
    import policies as P
    from transformers import AutoModelForCausalLM
    out = tmp_path / "lora"
    train.main(BASE + ["--model", warm_dir, "--policies", "per-role", "--lora_rank", "4", "--train_roles", "planner",
                       "--steps", "1", "--out_dir", str(out)])

    def adapters(ckpt):
        base = AutoModelForCausalLM.from_pretrained(warm_dir, dtype=torch.float32)
        pm = P.lora_model(base, ["tool", "planner"], 4, 8.0, "all-linear", os.path.abspath(warm_dir), seed=0)
        for name in ("tool", "planner") if ckpt else ():
            P.load_adapter_weights(pm, name, os.path.join(ckpt, name))
        return {n: p.detach().clone() for n, p in pm.named_parameters() if ".lora_" in n}
    init, after = adapters(None), adapters(str(out / "ckpt-000001"))
    tool = [n for n in init if ".tool." in n]
    assert tool and all(torch.equal(after[n], init[n]) for n in tool)  # frozen adapter: its init, bit for bit
    assert any(not torch.equal(after[n], init[n]) for n in init if ".planner." in n)


@pytest.mark.parametrize("extra,msg", [
    (["--policies", "per-role", "--train_roles", "tool,judge"], "--train_roles: unknown role judge"),
    (["--policies", "shared", "--train_roles", "tool"], "--train_roles needs --policies per-role"),
])
def test_train_roles_errors_are_one_line(extra, msg, tiny_dir, capsys):
    import train
    with pytest.raises(SystemExit) as e:
        train.get_args(BASE + ["--model", tiny_dir] + extra)
    err = capsys.readouterr().err
    assert e.value.code == 2 and msg in err and len(err.strip().splitlines()) == 1
