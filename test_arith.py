"""arith.py (the math miniature's problems) and its use by the math task: seeded, content-disjoint
splits, answers right by an independent reading of the text, parseable by the math checker, and the
reward predicate attacked.

    python -m pytest -q test_arith.py
"""
import re

import pytest

import arith
import data
import envs
import sandbox
from task import split_of


def by_reading(text):
    """The answer from the problem's words alone (not arith's expressions): an independent oracle."""
    n = list(map(int, re.findall(r"\d+", text)))
    if "gives away" in text:
        return n[0] * n[1] - n[2]
    if "buys" in text:
        return n[0] + n[1] * n[2]
    if "a day for" in text:
        return n[0] * n[1] + n[2]
    if "grew" in text:
        return (n[0] - n[1]) * n[2]
    if "rows of" in text:
        return n[0] * n[1] + n[2] * n[3]
    raise AssertionError(f"unknown template: {text}")


def test_seeded_and_varied():
    a = [arith.problem("train", i) for i in range(300)]
    assert a == [arith.problem("train", i) for i in range(300)]
    assert len({p["problem"] for p in a}) == 300
    assert {p["template"] for p in a} == set(range(len(arith.TEMPLATES)))
    assert arith.problem("test", 7) != arith.problem("val", 7)
    with pytest.raises(ValueError, match="split"):
        arith.problem("dev", 0)


def test_splits_disjoint_by_content():
    key = lambda p: (p["template"], tuple(p["numbers"].values()))
    seen = {s: {key(arith.problem(s, i)) for i in range(2000)} for s in ("train", "val", "test")}
    assert not seen["train"] & seen["test"] and not seen["train"] & seen["val"] and not seen["val"] & seen["test"]
    for s, keys in seen.items():
        assert all(split_of(("arith",) + (t, nums)) == s for t, nums in keys)


def by_value(text):
    """The problem's value from its words alone (not arith's canonical form): its expression expanded into
    signed products of the numbers, each product's factors sorted. Commuted factors, commuted terms and
    another template's wording of the same arithmetic (482 + 87 bags of 93 vs 93 a day for 87 days and 482
    more) give one value; the strictest 'same problem' a tool program could tell apart."""
    n = list(map(int, re.findall(r"\d+", text)))
    if "gives away" in text:
        terms = [(1, n[0], n[1]), (-1, n[2])]
    elif "buys" in text:
        terms = [(1, n[0]), (1, n[1], n[2])]
    elif "a day for" in text:
        terms = [(1, n[0], n[1]), (1, n[2])]
    elif "grew" in text:
        terms = [(1, n[0], n[2]), (-1, n[1], n[2])]
    elif "rows of" in text:
        terms = [(1, n[0], n[1]), (1, n[2], n[3])]
    else:
        raise AssertionError(f"unknown template: {text}")
    return tuple(sorted((sign, *sorted(f)) for sign, *f in terms))


def test_held_out_problems_unseen_by_value():
    """Held out means unseen by the VALUE of a problem, not its spelling: no test or val problem has the
    value of a training problem (the demo's 150 steps x 32 and the math warm-up's transcripts) or of
    another held-out problem (93 * 87 + 482 vs 87 * 93 + 482 were both in train and test; 5 of 2,000 test
    problems repeated another)."""
    import tiny
    vals = lambda split, idx: [by_value(arith.problem(split, i)["problem"]) for i in idx]
    train = set(vals("train", range(150 * 32))) | set(vals("train", range(tiny.SFT_OFFSET, tiny.SFT_OFFSET + 20_200)))
    test, val = vals("test", range(2000)), vals("val", range(2000))
    assert sum(v in train for v in test) == 0 and sum(v in train for v in val) == 0
    assert len(set(test)) == len(test) and len(set(val)) == len(val)  # no held-out problem twice
    assert not set(test) & set(val)


def test_answers_right_hard_to_guess_and_what_a_program_prints():
    ps = [arith.problem("test", i) for i in range(400)]
    for p in ps:
        assert int(p["answer"]) == by_reading(p["problem"]) > 0
        assert data.math_equal(p["answer"], p["answer"]) and data.extract_boxed(f"\\boxed{{{p['answer']}}}") == p["answer"]
    assert sum(int(p["answer"]) >= 1000 for p in ps) > 0.7 * len(ps)  # multi-digit products: no mental arithmetic
    progs = [(f"print({arith.expression(p['template'], p['numbers'])})", "") for p in ps[:50]]
    outs = sandbox.run_many(progs)
    assert [r.stdout.strip() for r in outs] == [p["answer"] for p in ps[:50]]


def test_math_task_on_arith_and_its_reward_attacked():
    env = envs.make("math", "test", 3, data="arith", max_turns=1)
    assert envs.count("math", "test", data="arith") is None  # procedural: no wrap-around
    ans = env.answer
    # the tool: only the last printed line counts; a program that prints many candidates is wrong
    spray = env.clone()
    assert spray.step("tool", f"for k in range({int(ans) + 5}):\n    print(k)") == 0.0
    tool = env.clone()
    assert tool.step("tool", f"print({ans})") == 1.0 and tool.tool_answer == ans
    # the reasoner: hedges, several boxes with a wrong last one, no box, a near miss: never a success
    for forged in [f"\\boxed{{{ans}, {int(ans) + 1}}}", f"\\boxed{{{ans}}} \\boxed{{{int(ans) + 1}}}", ans,
                   f"\\boxed{{{int(ans) + 1}}}", f"\\boxed{{{ans} or {int(ans) - 1}}}", ""]:
        e = tool.clone()
        e.step("reasoner", forged)
        assert e.done and not e.success, forged
    e = tool.clone()
    assert e.step("reasoner", f"The tool says so: \\boxed{{{ans}}}") == 1.0 and e.success


def test_random_floor_is_near_zero():
    """The table's floor for the math miniature: uniformly random integers (run as a program by the tool,
    boxed by the reasoner) almost never answer a held-out problem."""
    floor = envs.random_floor(lambda i: envs.make("math", "test", i, data="arith", max_turns=1), 100, seed=0)
    assert floor["turns"] == 1.0 and floor["success"] <= 0.02


# ---- --data graded and --shots 1: the real model's math set (--preset cpu-real-math) ----------------------

def one_op_reading(text):
    """A one-operation problem's answer from its words alone."""
    n = list(map(int, re.findall(r"\d+", text)))
    if "more. How many" in text:
        return n[0] + n[1]
    if "gave away" in text:
        return n[0] - n[1]
    if "boxes of" in text and "gives away" not in text:
        return n[0] * n[1]
    return None


def test_graded_answers_right_and_held_out_by_value():
    ps = [arith.problem("test", i, "graded") for i in range(300)]
    one = [p for p in ps if p["template"] < len(arith.ONE_OP)]
    assert 0.2 < len(one) / len(ps) < 0.6  # both difficulties held out
    for p in ps:  # the one-operation templates by an independent reading, the others as arith's
        want = one_op_reading(p["problem"]) if p in one else by_reading(p["problem"])
        assert int(p["answer"]) == want > 0, p
    key = lambda p: arith.canonical(p["template"], p["numbers"], "graded")
    train = {key(arith.problem("train", i, "graded")) for i in range(20_000)}
    held = [key(p) for p in ps] + [key(arith.problem("val", i, "graded")) for i in range(300)]
    assert not train & set(held) and len(set(held)) == len(held)
    # the arith set is untouched by graded (the miniature's data and its tiny model's warm-up)
    assert all(arith.problem("train", i) == arith.problem("train", i, "arith") for i in range(50))
    assert [arith.problem("train", i)["template"] for i in range(300)] != [p["template"] for p in ps]


def test_graded_two_benchmarks_and_tool_workflow():
    from task_math import GRADED_HELD_OUT
    n_gsm = len(data.load_math("test", "offline"))
    assert envs.count("math", "test", data="graded") == GRADED_HELD_OUT + n_gsm
    assert envs.count("math", "train", data="graded") is None
    first_gsm = envs.make("math", "test", GRADED_HELD_OUT, data="graded")
    assert first_gsm.record["source"] == "gsm" and first_gsm.problem == data.load_math("test", "offline")[0]["problem"]
    assert envs.make("math", "test", GRADED_HELD_OUT - 1, data="graded").record["source"] == "arith"
    # one agent with the tool: what its program prints is the answer; the last line only, as in the MAS
    env = envs.make("math", "test", 0, data="graded", workflow="tool", max_turns=1)
    ans = env.answer
    assert env.roles == ("tool",)
    spray = env.clone()
    assert spray.step("tool", f"print({ans})\nprint({int(ans) + 1})") == 0.0 and spray.done and not spray.success
    right = env.clone()
    assert right.step("tool", f"```python\nprint({ans})\n```") == 1.0 and right.done and right.success
    with pytest.raises(ValueError, match="no role"):
        env.clone().step("reasoner", f"\\boxed{{{ans}}}")


def test_shots_one_worked_example_of_another_problem():
    from task_math import EXAMPLE, EXAMPLE_REPLY
    import task_math
    for workflow, roles in task_math.Math.ROLES.items():
        env = envs.make("math", "test", 5, data="graded", shots=1, workflow=workflow, max_turns=2)
        plain = envs.make("math", "test", 5, data="graded", workflow=workflow, max_turns=2)
        for role in roles:
            msgs = env.render(role)
            assert [m["role"] for m in msgs] == ["user", "assistant", "user"], (workflow, role)
            assert EXAMPLE in msgs[0]["content"] and env.problem not in msgs[0]["content"]
            assert env.problem in msgs[2]["content"] and EXAMPLE not in msgs[2]["content"]
            # the plain prompt's wording, but the tool's (told to write the numbers in, as the example does)
            assert msgs[2]["content"] == plain.render(role)[0]["content"] or role == "tool"
    # the example's replies are right: the tool's program prints its answer, the reasoner boxes it
    assert sandbox.run(EXAMPLE_REPLY["tool"].split("```python\n")[1].split("```")[0]).stdout.strip() == "78"
    for k in ("reasoner", "with_tool"):
        assert data.extract_boxed(EXAMPLE_REPLY[k]) == "78"
    assert 12 * 9 - 30 == 78 and "78" in EXAMPLE_REPLY["checker"] and EXAMPLE_REPLY["checker"].endswith("ok")


def test_math_notes_say_what_each_role_did():
    """notes: the tool's program printed / printed the answer; the reasoner boxed, kept a right tool output,
    overrode a wrong one (eval.py's notes/<name>, the table's role table)."""
    env = envs.make("math", "test", 1, data="graded", max_turns=1)
    ans = env.answer
    kept = env.clone()
    kept.step("tool", f"print({ans})")
    kept.step("reasoner", f"\\boxed{{{ans}}}")
    assert kept.notes == {"tool/printed": [1, 1], "tool/right": [1, 1], "reasoner/boxed": [1, 1], "reasoner/kept": [1, 1]}
    lost = env.clone()
    lost.step("tool", f"print({ans})")
    lost.step("reasoner", "no box")
    assert lost.notes["reasoner/kept"] == [0, 1] and lost.notes["reasoner/boxed"] == [0, 1]
    over = env.clone()
    over.step("tool", "print(undefined_name)")
    over.step("reasoner", f"\\boxed{{{ans}}}")
    assert over.notes["tool/printed"] == [0, 1] and over.notes["reasoner/overrode"] == [1, 1]
    assert "reasoner/kept" not in over.notes
