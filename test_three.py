"""Three agents (issue 34 item 2): math's `--workflow mas3`, tool -> checker -> reasoner, as a task and
through training (shared, per-role, LoRA; HF and vLLM engines), checkpoints, eval.py and --role_model.

    python -m pytest -q test_three.py
"""
import json
import os
import random
import subprocess
import sys

import pytest

import envs

HERE = os.path.dirname(os.path.abspath(__file__))
ROLES3 = ("tool", "checker", "reasoner")


def mk3(i=0, split="test", **kw):
    return envs.make("math", split, i, data="offline", workflow="mas3", **kw)


def tool_outputs(env):
    """Programs whose output is right, wrong and missing (no code / a crash)."""
    return {"right": env.reference("tool"), "wrong": "```python\nprint(-987654)\n```",
            "none": "```python\nraise SystemExit(1)\n```"}


# ---- the checker's reward: the attacks first ------------------------------------------------------------
def test_a_constant_or_hedging_checker_never_beats_an_honest_one():
    """Attack: a checker that always objects, never objects, or says both words. On EVERY state the honest
    verdict's reward is >= each attack's, and over states where the tool is right and wrong each constant
    checker earns strictly less on average; a hedge is no verdict (format penalty). The checker's verdict
    never decides success: the reasoner's final answer does."""
    strategies = {"honest": None, "always-ok": "ok", "always-object": "object", "hedge": "ok, or maybe object",
                  "silent": "I am not sure."}
    totals = {k: 0.0 for k in strategies}
    n = 0
    for i in range(4):
        for kind, program in tool_outputs(mk3(i)).items():
            rewards = {}
            for name, text in strategies.items():
                e = mk3(i, max_turns=1)
                e.step("tool", program)
                text = e.reference("checker") if text is None else text
                rewards[name] = e.step("checker", text)
                e.step("reasoner", e.reference("reasoner"))
                assert e.done and e.success  # a right final answer succeeds whatever the checker said
            assert all(rewards["honest"] >= r for r in rewards.values()), (i, kind, rewards)
            assert rewards["honest"] == 1.0 and rewards["hedge"] == rewards["silent"] == -1.0
            for k, r in rewards.items():
                totals[k] += r
            n += 1
    means = {k: v / n for k, v in totals.items()}
    assert means["honest"] == 1.0 and all(means[k] < 1.0 for k in strategies if k != "honest"), means
    # and a right checker does not rescue a wrong final answer
    e = mk3(0, max_turns=1)
    e.step("tool", tool_outputs(e)["right"])
    assert e.step("checker", e.reference("checker")) == 1.0
    e.step("reasoner", "\\boxed{-987654}")
    assert e.done and not e.success


def test_checker_reward_rule_is_in_the_readme():
    readme = open(os.path.join(HERE, "README.md")).read()
    row = next(ln for ln in readme.splitlines() if ln.startswith("| `math` |"))
    assert "checker" in row and "mas3" in row and "object" in row


# ---- the workflow as a task --------------------------------------------------------------------------
def test_mas3_roles_prompts_and_turns():
    e = mk3(1, max_turns=3)
    assert e.roles == ROLES3
    program = "```python\nx = 6 * 7\nprint(x)\n```"
    e.step("tool", program)
    seen = e.prompt("checker")[0]["content"]
    assert "x = 6 * 7" in seen and "printed: 42" in seen  # the checker reads the program and its output
    e.step("checker", "object")
    assert "Checker said: object" in e.prompt("reasoner")[0]["content"]
    e.step("reasoner", "\\boxed{42}")  # agrees with the tool, but the checker objected: another turn
    assert not e.done and e.turn == 1
    assert "checker said object" in e.prompt("tool")[0]["content"]
    c = e.clone()
    c.step("tool", program)
    c.step("checker", "ok")
    c.step("reasoner", "\\boxed{42}")  # agreement the checker let pass ends the episode
    assert c.done and c.turn == 2 and len(e.history) == 1
    with pytest.raises(ValueError, match="has no role"):
        envs.make("math", "test", 0, data="offline").step("checker", "ok")  # the two-role workflow has none
    with pytest.raises(ValueError, match="workflow must be"):
        envs.make("plan_path", workflow="mas3")  # only math has a three-role workflow


def test_mas3_is_a_flag_and_only_math_takes_it(capsys):
    import train
    a = train.get_args(["--task", "math", "--data", "offline", "--workflow", "mas3", "--eval_n", "0"])
    assert a.workflow == "mas3"
    with pytest.raises(SystemExit):
        train.get_args(["--task", "plan_path", "--workflow", "mas3", "--eval_n", "0"])
    assert "workflow must be" in capsys.readouterr().err
    rng = random.Random(0)
    assert {mk3().random_answer("checker", rng) for _ in range(20)} == {"ok", "object"}


# ---- N = 3 through policies, engines and training ---------------------------------------------------------
def test_each_of_three_adapters_moves_only_itself(tiny_dir):
    """Per-role LoRA with three roles: an update of one role's policy moves its adapter alone."""
    import torch
    import test_policies as TP
    from test_lora import lora_policies, snapshot
    pm, pols = lora_policies(tiny_dir, ROLES3)
    for name in ROLES3:
        before = snapshot(pm)
        m = TP.update(pols[name], TP.make_samples(12, seed=len(name)), TP.args(), rng=random.Random(0))
        assert m["grad_norm"] > 0
        moved = {k for k in before if not torch.equal(before[k], snapshot(pm)[k])}
        assert moved and all(f".{name}." in k and ".lora_" in k for k in moved), sorted(moved)[:3]


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["vllm", "hf"])
def test_three_roles_sample_under_their_own_adapters(tiny_dir, engine, monkeypatch, keep_engines):
    """A tree rollout of mas3 on one engine holding three different adapters (per-role routing): every
    group is one role's K samples of one prompt, and each sample's engine log-probs are its own role's
    adapter's (the trainer's), not another role's."""
    import torch
    import logprobs as LP
    import policies as P
    import rollout as R
    from test_lora import lora_policies
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    pm, pols = lora_policies(tiny_dir, ROLES3)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # B = 0 at init: give each adapter its own non-zero B
        for n, p in pm.named_parameters():
            if ".lora_B." in n:
                p.add_(torch.randn(p.shape, generator=g) * 0.2)
    # an in-process vLLM engine exports LOCAL_WORLD_SIZE: monkeypatch puts the variable back as it was
    monkeypatch.setenv("LOCAL_WORLD_SIZE", os.environ.get("LOCAL_WORLD_SIZE", "1"))
    eng = R.make_engine(engine, tiny_dir, max_model_len=512, seed=0, lora_rank=8, max_loras=len(ROLES3))
    keep_engines.append(eng)  # see conftest.keep_engines
    for name, pol in pols.items():
        pol.use()
        eng.load_adapter(name, pol.engine_weights(), pm.peft_config[name])
    sampler = R.Sampler(eng, tok, lambda role: P.route(role, "per-role"), None)
    envs3 = [envs.make("math", "train", i, data="arith", workflow="mas3", max_turns=1) for i in range(2)]
    samples, _ = R.tree_rollout(envs3, sampler, 2, 1.0, 6, random.Random(0), max_prompt_tokens=500)
    assert [s.role for s in samples[::2]] == [r for r in ROLES3 for _ in envs3]  # role by role, whole groups
    assert all(s.policy == s.role and s.key[-1] == s.role for s in samples)
    net = pm.base_model.model

    def gap(s, name):
        pm.set_adapter(name)
        with torch.no_grad():
            lp = LP.response_logprobs(net, [s], 1.0, "cpu")[0]
        return (lp - torch.tensor(s.logprobs)).abs().mean().item()

    for s in samples:
        own, other = gap(s, s.role), min(gap(s, r) for r in ROLES3 if r != s.role)
        assert own < 1e-4 < 10 * own + 1e-3 < other, (s.role, own, other)


def train(out, *flags, steps=1):
    """`steps` steps of mas3 on arith; returns the last step's metrics, checkpoint dir, summary and log."""
    from test_train import metrics, run
    p = run(["--task", "math", "--data", "arith", "--workflow", "mas3", "--max_turns", "2", "--K", "2", "--problems",
             "2", "--max_tokens", "8", "--device", "cpu", "--steps", str(steps), "--eval_n", "2", "--out_dir", out, *flags])
    ms = metrics(out)
    assert [m["step"] for m in ms] == list(range(1, steps + 1))
    assert all(f"reward/{r}" in ms[-1] and f"cut/{r}" in ms[-1] for r in ROLES3)
    return (ms[-1], os.path.join(out, f"ckpt-{steps:06d}"), json.load(open(os.path.join(out, "summary.json"))),
            p.stdout + p.stderr)


def evaluate(tmp_path, *flags):
    p = subprocess.run([sys.executable, os.path.join(HERE, "eval.py"), "--task", "math", "--data", "arith",
                        "--workflow", "mas3", "--max_turns", "2", "--max_tokens", "8", "--device", "cpu", "--n", "2",
                        "--json", str(tmp_path / "ev.json"), *flags], capture_output=True, text=True, cwd=HERE,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.load(open(tmp_path / "ev.json"))


@pytest.mark.slow
def test_three_roles_train_per_role_and_evaluate_with_role_model(tiny_dir, tmp_path):
    """HF engine, full per-role: a policy, a loss and a checkpoint directory per role, resumed from; eval.py
    routes each role to its checkpoint directory, and --role_model swaps one of the three."""
    out, flags = str(tmp_path / "run"), ["--model", tiny_dir, "--engine", "hf", "--policies", "per-role"]
    m, ck, _, _ = train(out, *flags)
    assert all(f"loss/{r}" in m for r in ROLES3) and "loss/shared" not in m
    assert sorted(os.listdir(ck)) == ["checker", "reasoner", "tool", "trainer.pt"]
    m, ck, _, log = train(out, *flags, "--resume", steps=2)  # the three policies load back
    assert "resumed from" in log and sorted(os.listdir(ck)) == ["checker", "reasoner", "tool", "trainer.pt"]
    ev = evaluate(tmp_path, "--engine", "hf", "--model", ck, "--role_model", f"checker={tiny_dir}")
    assert ev["models"] == {"tool": os.path.join(ck, "tool"), "checker": tiny_dir, "reasoner": os.path.join(ck, "reasoner")}
    assert 0.0 <= ev["success"] <= 1.0


@pytest.mark.slow
def test_three_roles_train_shared_on_vllm(tiny_dir, tmp_path):
    m, ck, _, _ = train(str(tmp_path / "run"), "--model", tiny_dir, "--engine", "vllm", "--policies", "shared")
    assert "loss/shared" in m and not any(f"loss/{r}" in m for r in ROLES3) and m["logp_gap"] < 1e-4
    assert sorted(os.listdir(ck)) == ["shared", "trainer.pt"]


@pytest.mark.slow
def test_three_lora_adapters_train_checkpoint_and_evaluate_on_vllm(tiny_dir, tmp_path):
    """vLLM engine, per-role LoRA: three adapters in one engine; the checkpoint holds three peft
    directories, and eval.py serves them on their base with the live run's final numbers."""
    m, ck, s, _ = train(str(tmp_path / "run"), "--model", tiny_dir, "--engine", "vllm", "--policies", "per-role",
                     "--lora_rank", "8")
    assert all(f"loss/{r}" in m for r in ROLES3) and m["logp_gap"] < 1e-4
    assert sorted(os.listdir(ck)) == ["checker", "reasoner", "tool", "trainer.pt"]
    assert all(os.path.isfile(os.path.join(ck, r, "adapter_config.json")) for r in ROLES3)
    ev = evaluate(tmp_path, "--model", ck)
    assert ev["models"] == {**{r: os.path.join(ck, r) for r in ROLES3}, "base": os.path.abspath(tiny_dir)}
    for k in ("success", "turns", "tokens"):
        assert ev[k] == s["eval"]["after"][k], k
