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
