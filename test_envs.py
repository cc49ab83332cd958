"""python -m pytest -q test_envs.py"""
import random

import pytest

import envs


def mk(split="train", i=0, **kw):
    kw.setdefault("size", 6)
    kw.setdefault("tool_mode", "direct")
    return envs.make("plan_path", split, i, **kw)


def test_contract_and_reference_solves():
    for split in ("train", "val", "test"):
        for i in range(30):
            e = mk(split, i)
            assert e.roles == ("tool", "planner")
            assert e.step("tool", e.reference("tool")) >= 1.0   # tool's reference reaches the goal
            assert not e.done
            msgs = e.prompt("planner")
            assert msgs[-1]["role"] == "user" and "Tool proposed: " in msgs[-1]["content"]
            r = e.step("planner", e.reference("planner"))
            assert e.done and e.success and r == pytest.approx(1.0 * e.alpha + 2.0)


def test_prompt_shows_current_position_and_turns_advance():
    e = mk(i=3, max_turns=3)
    ref = e.reference("planner")
    e.step("tool", "garbage")
    e.step("planner", ref[:1])
    assert e.turn == 1 and not e.done and e.pos != e.goal
    text = e.prompt("tool")[0]["content"]
    assert "A" in text and e.grid_text() in text and f"Moves so far: {ref[0]}" in text
    assert len(e.reference("planner")) == len(ref) - 1


def test_garbage_never_raises_never_succeeds():
    rng = random.Random(0)
    junk = ["", "   ", "hello world", "UUUUX", "\\boxed{}", "```python\nimport os\n```", "\x00\xff",
            "".join(chr(rng.randrange(32, 0x2FFF)) for _ in range(300))]
    for i in range(20):
        for t in junk:
            e = mk(i=i, max_turns=2)
            while not e.done:
                for role in e.roles:
                    r = e.step(role, t)
                    assert isinstance(r, float)
            assert not e.success


def test_clone_is_independent():
    e = mk(i=5)
    c = e.clone()
    c.step("tool", c.reference("tool"))
    c.step("planner", c.reference("planner"))
    assert c.success and not e.success and e.turn == 0 and e.history == []


def test_walls_block_and_splits_disjoint():
    e = mk(i=1, size=8)
    end, legal = e.walk("U" * 20)
    assert not legal and end[0] >= 0  # stops at a wall or the edge
    ref = e.reference("planner")
    assert e.walk(ref) == (e.goal, True)
    # passing over the goal and walking on is not a solution
    back = {"U": "D", "D": "U", "L": "R", "R": "L"}[ref[-1]]
    team, local = e.score(ref + back)
    assert team == 0.0 and local < 1.0
    train = {(mk("train", i).walls, mk("train", i).goal, mk("train", i).pos) for i in range(200)}
    test = {(mk("test", i).walls, mk("test", i).goal, mk("test", i).pos) for i in range(200)}
    assert len(train & test) <= 2  # tiny grids may coincide by chance, seeds never do
    assert envs.SPLIT_SEED["train"] + 10_000_000 <= envs.SPLIT_SEED["test"]


def test_single_workflow_and_errors():
    e = mk(workflow="single")
    assert e.roles == ("planner",)
    assert "Tool proposed" not in e.prompt("planner")[0]["content"]
    with pytest.raises(ValueError):
        envs.make("nope")
    with pytest.raises(ValueError):
        mk(split="dev")


def test_code_tool_runs_in_sandbox():
    e = mk(i=2, tool_mode="code")
    r = e.step("tool", e.reference("tool"))
    assert r >= 1.0 and e.proposal == e.reference("planner")
    e2 = mk(i=2, tool_mode="code")
    assert e2.step("tool", "```python\nwhile True: pass\n```") == -1.0


# ---- the other games: sudoku, sokoban ------------------------------------------------------------
GAMES = [("plan_path", dict(size=6)), ("sudoku", {}), ("sudoku", dict(size=9)), ("sokoban", {}),
         ("sokoban", dict(size=7, boxes=2))]
JUNK = ["", "hello", "UDLR" * 30, "1234\n" * 4, "\\boxed{}", "```python\nprint(1)\n```", "\x00\xff",
        "".join(chr(random.Random(1).randrange(32, 0x2FFF)) for _ in range(200))]


@pytest.mark.parametrize("task,kw", GAMES)
def test_games_reference_solves_every_split(task, kw):
    n = 3 if kw.get("size") == 9 else 15
    for split in ("train", "val", "test"):
        for i in range(n):
            for tool_mode in ("direct", "code") if i == 0 else ("direct",):
                e = envs.make(task, split, i, tool_mode=tool_mode, **kw)
                assert e.roles == ("tool", "planner") and not e.success
                assert e.step("tool", e.reference("tool")) >= 1.0
                assert e.step("planner", e.reference("planner")) >= 2.0
                assert e.done and e.success


@pytest.mark.parametrize("task,kw", GAMES)
def test_games_garbage_never_raises_never_succeeds(task, kw):
    for i in range(2):
        for t in JUNK:
            e = envs.make(task, "train", i, tool_mode="direct", max_turns=2, **kw)
            while not e.done:
                for role in e.roles:
                    assert isinstance(e.step(role, t), float)
            assert not e.success


@pytest.mark.parametrize("task,kw", GAMES)
def test_games_clone_independent_and_splits_disjoint(task, kw):
    e = envs.make(task, "train", 4, tool_mode="direct", **kw)
    before = e.prompt("planner")
    c = e.clone()
    c.step("tool", c.reference("tool"))
    c.step("planner", c.reference("planner"))
    assert c.success and not e.success and e.turn == 0 and e.prompt("planner") == before
    state = lambda e: e.prompt("planner")[0]["content"]
    n = 10 if kw.get("size") == 9 else 40
    train = {state(envs.make(task, "train", i, **kw)) for i in range(n)}
    test = {state(envs.make(task, "test", i, **kw)) for i in range(n)}
    assert len(train & test) <= 4  # small boards may coincide by chance; their seeds never do


def test_sudoku_unique_givens_enforced():
    a, b = envs.make("sudoku", "test", 0), envs.make("sudoku", "test", 1)
    assert len(envs.sudoku_solve(list(a.givens), 4, limit=5)) == 1
    assert a.solution_grid != b.solution_grid or a.givens != b.givens
    assert all(a.solution_grid)  and a.valid(a.solution_grid)
    # another puzzle's valid solution fails this puzzle (it breaks a given), unless identical
    if b.solution_grid != a.solution_grid:
        assert a.step("planner", b.show(b.solution_grid)) == -0.5 and not a.success
    # a grid that breaks a given fails even if it is otherwise a valid sudoku
    e = envs.make("sudoku", "test", 2)
    i = e.givens.index(next(v for v in e.givens if v))
    perm = {v: v % 4 + 1 for v in range(1, 5)}  # relabel digits: valid grid, every given broken
    bad = [perm[v] for v in e.solution_grid]
    assert e.valid(e.solution_grid) and not e.valid(bad) and bad[i] != e.givens[i]
    assert e.score(bad) == (0.0, -0.5)
    assert "." in e.prompt("planner")[0]["content"]  # the solved grid is never in the prompt
    # partial progress: one right digit more is positive progress and not solved
    part = list(e.givens)
    part[part.index(0)] = e.solution_grid[part.index(0)]
    team, local = e.score(part)
    assert team == 0.0 and 0 < local < 1


def test_sokoban_mechanics_and_sizes():
    e = envs.make("sokoban", "train", 3)
    assert e.size == 6 and len(e.boxes) == 1 and e.dist(e.player, e.boxes) >= 3
    text = e.state_text()
    assert text.count("\n") == 6 and "P" in text and "B" in text and "O" in text
    # pushing a box into a wall is blocked and stops the move list
    p, bx, legal = e.walk("U" * 10)
    assert not legal
    with pytest.raises(ValueError):
        envs.make("sokoban", "train", 0, size=16)
    with pytest.raises(ValueError):
        envs.make("sudoku", "train", 0, size=5)
    for i in range(100):  # the generator never crashes; every level is solvable
        lv = envs.make("sokoban", "train", i, size=5)
        assert lv.dist(lv.player, lv.boxes) is not None


# ---- math and code (offline data through the real loaders of data.py) --------------------------------
def test_math_reference_agreement_and_success():
    for split in ("train", "val", "test"):
        for i in range(3):
            e = envs.make("math", split, i, data="offline")
            assert e.roles == ("tool", "reasoner")
            assert e.step("tool", e.reference("tool")) == 1.0
            assert e.step("reasoner", e.reference("reasoner")) == 1.0
            assert e.done and e.success  # the two agree, and the reasoner is right
    e = envs.make("math", "test", 0, data="offline", max_turns=3)
    e.step("tool", "```python\nprint(-12345)\n```")
    assert e.step("reasoner", "So the answer is \\boxed{-12345}.") == 0.0  # parsed, wrong
    assert e.done and not e.success  # they agree, so the episode ends, and the answer is wrong
    e = envs.make("math", "test", 1, data="offline", max_turns=3)
    e.step("tool", e.reference("tool"))
    e.step("reasoner", "no box here")
    assert not e.done and e.turn == 1
    assert "Turn 1: tool printed" in e.prompt("reasoner")[0]["content"]
    c = e.clone()
    c.step("tool", c.reference("tool"))
    c.step("reasoner", c.reference("reasoner"))
    assert c.success and not e.success and len(e.history) == 1
    s = envs.make("math", "test", 1, data="offline", workflow="single")
    assert s.roles == ("reasoner",)
    s.step("reasoner", "\\boxed{0}")
    assert s.done


def test_math_and_code_garbage_never_raises():
    for task in ("math", "code"):
        for t in JUNK + ["```python\nimport os; os.kill(os.getppid(), 9)\n```"]:
            e = envs.make(task, "test", 2, data="offline", max_turns=2)
            while not e.done:
                for role in e.roles:
                    if not e.done:
                        assert isinstance(e.step(role, t), float)
            assert not e.success


def test_code_success_needs_all_tests_and_tester_follows_reference():
    e = envs.make("code", "test", 0, data="offline")  # a HumanEval problem (function kind)
    assert e.task["kind"] == "function" and len(e.task["tests"]) > 4
    ep = e.task["entry_point"]
    assert e.step("coder", e.reference("coder")) == 2.0 and e.success
    good = e.reference("tester")
    assert e.step("tester", good) == 1.0 + 1.0  # the team succeeds and the reference passes the test
    assert e.done  # the program passes every generated test
    # a program that passes the first tests but not all of them is not a success
    e = envs.make("code", "train", 0, data="offline")  # a shipped stdin problem: sum of n integers
    assert e.task["kind"] == "stdin"
    first = e.task["tests"][0]
    cheat = f"```python\nprint({first['output'].strip()!r})\n```"
    r = e.step("coder", cheat)
    assert not e.success and 0 < r < 1
    # the tester's reward follows the reference solution, not the coder's program
    wrong = {"input": first["input"], "output": "999999999\n"}
    assert e.clone().step("tester", envs.show_test(wrong)) == 0.0
    assert e.clone().step("tester", envs.show_test(first)) == 1.0
    assert e.clone().step("tester", "no test") == -1.0
    e.step("tester", envs.show_test(first))  # the cheat passes this test: done, though not a success
    assert e.done and not e.success
    # the coder sees where it failed
    f = envs.make("code", "train", 1, data="offline")
    f.step("coder", "```python\nprint(0)\n```")
    f.step("tester", f.reference("tester"))
    assert not f.done and "failed" in f.prompt("coder")[0]["content"]
    assert envs.parse_test(f"```\nassert {ep}([1.0], 0.5) == False\n```", "function", ep).startswith("assert")


def test_dataset_splits_disjoint():
    for task in ("math", "code"):
        n = {s: envs.count(task, s, "offline") for s in ("train", "test")}
        train = {envs.make(task, "train", i, data="offline").prompt(envs.make(task, "train", 0, data="offline").roles[0])[0]["content"]
                 for i in range(n["train"])}
        test = {envs.make(task, "test", i, data="offline").prompt(envs.make(task, "test", 0, data="offline").roles[0])[0]["content"]
                for i in range(n["test"])}
        assert len(test) == n["test"] and not (train & test)
