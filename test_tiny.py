"""The warm-up data of the demo model. python -m pytest -q test_tiny.py"""
import random

import envs
import tiny
from task_games import parse_moves


def test_scripted_planner_keeps_only_solving_proposals():
    kept_wrong = solved_own = wrong = 0
    for i in range(200):
        env = envs.make("plan_path", "train", tiny.SFT_OFFSET + i, size=4, tool_mode="direct", max_turns=2)
        ref = env.reference("planner")
        rng = random.Random(i)
        assert tiny.scripted_planner(env, ref, rng, 0.5) == ref  # a solving proposal is kept
        bad = "U" * 9  # off the 4x4 grid: never solves
        out = tiny.scripted_planner(env, bad, rng, 0.5)
        wrong += 1
        kept_wrong += out == bad
        solved_own += env.score(parse_moves(out))[0] > 0
    assert kept_wrong == 0
    assert 0.3 * wrong < solved_own < 0.8 * wrong  # its own answer: the solver's path, noisy half the time


def test_transcripts_never_show_a_test_map():
    # by content: a test map (walls + goal) never appears in the warm-up, in any state of its episode
    mapped = lambda grid: grid.replace("A", ".")  # A may stand on the goal only once solved
    test_maps = {mapped(envs.make("plan_path", "test", i, size=4).grid_text()) for i in range(200)}
    seen = total = 0
    for msgs, ans in tiny.transcripts(600, 4, seed=0):
        grid = msgs[-1]["content"].split("Grid (A you, G goal, # wall):\n")[-1]
        seen += mapped(grid) in test_maps
        total += 1
    assert total > 600 and seen == 0  # 8 of the 200 test boards were in the warm-up when seeds alone split


def test_math_warmup_tool_programs_run_right_at_the_stated_rate():
    """The math miniature's warm-up: tool programs, run in the sandbox, print the right answer ~30% of the
    time and the template's misreading (never right) ~50%, so the policy starts below half; the
    reasoner boxes a right tool output 80% of the time; every problem is a train one (content split)."""
    import arith
    import sandbox
    from task import split_of
    pairs = list(tiny.math_transcripts(300, seed=0))
    tool = [(m, a) for m, a in pairs if "Write a Python program" in m[-1]["content"]]
    reasoner = [(m, a) for m, a in pairs if "Tool program printed:" in m[-1]["content"]]
    assert len(tool) == len(reasoner) == 300 and len(pairs) > 300 + 30  # plus single-agent prompts
    outs = sandbox.run_many([(a, "") for _, a in tool])
    truth = [arith.problem("train", tiny.SFT_OFFSET + i) for i in range(300)]
    right = [o.stdout.strip() == p["answer"] for o, p in zip(outs, truth)]
    assert all(o.returncode == 0 for o in outs)
    assert 0.2 < sum(right) / len(right) < 0.4  # p_tool = 0.3
    confused = [a == f"print({tiny.CONFUSIONS[p['template']].format(**p['numbers'])})" for (_, a), p in zip(tool, truth)]
    assert 0.4 < sum(confused) / len(confused) < 0.6 and not any(c and r for c, r in zip(confused, right))
    shown = [m[-1]["content"].split("Tool program printed: ")[1].split("\n")[0] for m, _ in reasoner]
    assert shown == [o.stdout.strip() for o in outs]  # the reasoner saw what the program prints
    copied = [a == f"\\boxed{{{s}}}" for (_, a), s, ok in zip(reasoner, shown, right) if ok]
    assert 0.7 < sum(copied) / len(copied) < 0.9
    assert all(split_of(("arith", p["template"], tuple(p["numbers"].values()))) == "train" for p in truth)


def test_ensure_refuses_a_build_of_another_size_or_seed(tmp_path):
    """train.py --model tiny reuses --tiny_dir only when it was built by the run's recipe: a warm-up made
    for another plan_path size or seed (or by an older tiny.py) is a one-line error naming the directory
    and the setting, never a silent reuse (its docstring's promise; it used to check version, task, warm-up
    steps and turns only)."""
    import json
    from types import SimpleNamespace

    import pytest
    args = lambda **kw: SimpleNamespace(**{"task": "plan_path", "size": 4, "seed": 0, "max_turns": 2, **kw})
    d = tmp_path / "tiny-model"
    d.mkdir()
    made = dict(task="plan_path", sft_steps=tiny.SFT_STEPS["plan_path"], size=4, seed=0, max_turns=2, build_s=1.0)
    (d / "tiny.json").write_text(json.dumps(dict(made, version=tiny.VERSION["plan_path"])))
    assert tiny.ensure(str(d), args()) == str(d)  # the recipe it was built with: reused
    assert tiny.ensure(str(d), args(task="sokoban")) == str(d)  # other games: the 4x4 plan_path warm-up
    for kw, name in ((dict(size=6), "size"), (dict(size=None), "size"), (dict(seed=1), "seed"),
                     (dict(max_turns=3), "max_turns"), (dict(task="math"), "task")):
        with pytest.raises(ValueError, match=name) as e:
            tiny.ensure(str(d), args(**kw))
        assert str(d) in str(e.value) and "\n" not in str(e.value), kw
    m = tmp_path / "tiny-model-math"  # math: one-turn transcripts whatever the run; size not used
    m.mkdir()
    (m / "tiny.json").write_text(json.dumps(dict(made, task="math", sft_steps=tiny.SFT_STEPS["math"], version=4)))
    with pytest.raises(ValueError, match="version"):  # made before arith's value split (its warm-up problems)
        tiny.ensure(str(m), args(task="math"))
    (m / "tiny.json").write_text(json.dumps(dict(made, task="math", sft_steps=tiny.SFT_STEPS["math"],
                                                 version=tiny.VERSION["math"])))
    assert tiny.ensure(str(m), args(task="math", size=9, max_turns=1)) == str(m)
    with pytest.raises(ValueError, match="seed"):
        tiny.ensure(str(m), args(task="math", seed=2))
