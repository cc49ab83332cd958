"""The warm-up data of the demo model. python -m pytest -q test_tiny.py"""
import random

import envs
import tiny


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
        solved_own += env.score(envs.parse_moves(out))[0] > 0
    assert kept_wrong == 0
    assert 0.3 * wrong < solved_own < 0.8 * wrong  # its own answer: the solver's path, noisy half the time


def test_transcripts_stay_off_the_test_seeds():
    test_grids = {envs.make("plan_path", "test", i, size=4).grid_text() for i in range(200)}
    seen = 0
    for msgs, ans in tiny.transcripts(300, 4, seed=0):
        grid = msgs[-1]["content"].split("Grid (A you, G goal, # wall):\n")[-1]
        seen += grid in test_grids
    assert seen <= 3  # 0 of 685 measured; a 4x4 grid may repeat by chance, test seeds would all match
