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


def test_math3_warmup_plays_both_workflows_and_the_checker_at_its_rate():
    """--task math3 (cpu-demo-math3): half the problems are the two-agent workflow's transcripts, exactly
    as math's, half the three-agent one's: the checker reads the program and its output and gives the
    right verdict ~70% of the time; the reasoner sees that verdict and boxes the output after an ok ~80%
    of the time, after an objection ~20%. math's own transcripts have no checker."""
    import arith
    assert not any("Check the tool" in m[-1]["content"] for m, _ in tiny.math_transcripts(200, seed=0))
    pairs = list(tiny.math_transcripts(400, seed=0, three=True))
    checker = [(m[-1]["content"], a) for m, a in pairs if "Check the tool" in m[-1]["content"]]
    tool = [m for m, _ in pairs if "Write a Python program" in m[-1]["content"]]
    after = [(m[-1]["content"], a) for m, a in pairs if "Checker said:" in m[-1]["content"]]
    assert len(tool) == 400 and len(checker) == len(after) == 200
    assert {a for _, a in checker} == {"ok", "object"}
    right = []
    for k, (text, said) in enumerate(checker):  # the odd problems are the three-agent ones
        truth = arith.problem("train", tiny.SFT_OFFSET + 2 * k + 1)
        program = text.split("```python\n")[1].split("\n```")[0]
        printed = text.split("Tool program printed: ")[1].split("\n")[0]
        assert f"Problem: {truth['problem']}\n" in text
        assert program.startswith("print(") and printed == str(arith.value(program[len("print("):-1]))
        right.append(said == ("ok" if printed == truth["answer"] else "object"))
    assert 0.6 < sum(right) / len(right) < 0.8  # p_check = 0.7
    for verdict, lo, hi in (("ok", 0.65, 0.95), ("object", 0.05, 0.35)):
        copied = [a == f"\\boxed{{{t.split('Tool program printed: ')[1].split(chr(10))[0]}}}"
                  for t, a in after if f"Checker said: {verdict}\n" in t]
        assert lo < sum(copied) / len(copied) < hi, verdict


def test_ensure_builds_the_warmup_the_run_names(tmp_path):
    """--tiny_warmup math3 (the cpu-demo-math3 preset) asks for the math3 recipe: a math build is refused
    in one line naming the task, a math3 build is reused, and auto keeps the task's own (math)."""
    import json
    from types import SimpleNamespace

    import pytest
    args = lambda **kw: SimpleNamespace(**{"task": "math", "size": None, "seed": 0, "max_turns": 1, **kw})
    d = tmp_path / "tiny-model-math3"
    d.mkdir()
    made = lambda task: dict(task=task, sft_steps=tiny.SFT_STEPS[task], size=5, seed=0, max_turns=2,
                             version=tiny.VERSION[task])
    (d / "tiny.json").write_text(json.dumps(made("math")))
    assert tiny.ensure(str(d), args()) == str(d) == tiny.ensure(str(d), args(tiny_warmup="auto"))
    with pytest.raises(ValueError, match="task") as e:
        tiny.ensure(str(d), args(tiny_warmup="math3"))
    assert str(d) in str(e.value) and "\n" not in str(e.value)
    (d / "tiny.json").write_text(json.dumps(made("math3")))
    assert tiny.ensure(str(d), args(tiny_warmup="math3")) == str(d)
    with pytest.raises(ValueError, match="task"):
        tiny.ensure(str(d), args())


def test_math3_build_knows_the_checker_words(tmp_path):
    """A math3 build (two warm-up steps, so it is quick) records its recipe, and its tokenizer learnt the
    checker's prompt and verdicts as words (one token each), as math's learnt its own."""
    import json

    from transformers import AutoTokenizer
    out = tiny.build(str(tmp_path / "m3"), sft_steps=2, task="math3", log=lambda s: None)
    got = json.load(open(tmp_path / "m3" / "tiny.json"))
    assert (got["task"], got["version"]) == ("math3", tiny.VERSION["math3"])
    tok = AutoTokenizer.from_pretrained(out)
    assert len(tok.encode(" object", add_special_tokens=False)) == 1
    assert len(tok.encode(" ok", add_special_tokens=False)) == 1
