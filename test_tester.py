"""The code task's discriminating tester reward (`--tester_reward discriminate`, task_code.tester_reward):
a test is paid by the share of WRONG programs it fails while the reference passes it. The attacks a tester
can make on a reward that pays a right test in full, each paid what the rule says: a copy of the statement's
example, an earlier test respelt, a test every program passes, a test the reference fails, and a test only the
one-step-short body fails.

    python -m pytest -q test_tester.py
"""
import argparse
import random
import re

import pytest

import data
import envs
import funcs
import rollout as R

DISC = dict(data="funcs", tester_reward="discriminate", alpha=0.0)  # alpha 0: a step's reward is its local part


def scale():
    """funcs' first training problem, a `scale` one (xs -> [x * a + b for x in xs]), and its a, b."""
    p = funcs.problems("train")[0]
    assert p["entry_point"] == "scale"
    a, b = map(int, re.search(r"x \* (\d+) \+ (\d+)", p["reference"]).groups())
    return p, a, b


P, A, B = scale()
REF = P["reference"]
SHORT = f"def scale(xs):\n    return [x * {A} for x in xs]\n"          # the body one step short (no + b)
FIRST3 = f"def scale(xs):\n    return [x * {A} + {B} for x in xs][:3]\n"  # right on lists of at most 3
EXAMPLE = next(ln.split(":", 1)[1].strip() for ln in P["problem"].splitlines() if ln.startswith("Example:"))
TESTS = {"copy": f"assert {EXAMPLE}",
         "all_pass": "assert scale([]) == []",                            # every program here passes it
         "only_short": f"assert scale([0]) == [{B}]",                      # only SHORT fails it (FIRST3 passes)
         "both": f"assert scale([1, 2, 3, 4]) == {[x * A + B for x in (1, 2, 3, 4)]}",  # SHORT and FIRST3 fail
         "wrong": f"assert scale([1]) == [{A + B + 1}]",                  # the reference fails it
         "none": "I would test it with a few lists."}


def code(program):
    return f"```python\n{program}```"


def share(test, programs):
    """The share of `programs` that `test` fails, run here (our own texts, the tests' own literals)."""
    def fails(program):
        scope = {}
        exec(program, scope)  # noqa: S102
        try:
            exec(test, scope)  # noqa: S102
        except AssertionError:
            return True
        return False
    return sum(map(fails, programs)) / len(programs)


class Scripted:
    """An engine answering from a list of texts in order (cycling): a tree's K branches get K in a row."""
    def __init__(self, tok, texts):
        self.tok, self.texts, self.i = tok, texts, 0

    def generate(self, prompts, n, temperature, max_tokens):
        out = []
        for _ in prompts:
            row = []
            for _ in range(n):
                ids = self.tok.encode(self.texts[self.i % len(self.texts)], add_special_tokens=False)
                self.i += 1
                row.append(R.Completion(ids + [self.tok.eos_token_id], [-1.0] * (len(ids) + 1), False))
            out.append(row)
        return out

    def load_weights(self, weights):
        pass


def tree(tok, coder, tester, **options):
    """One turn of tree sampling (K = 4) on the scale problem: the coder's 4 programs, then the tester's 4
    texts; the tester's 4 rewards (alpha 0: the local part)."""
    sampler = R.Sampler(Scripted(tok, [code(c) for c in coder] + list(tester)), tok, lambda r: "shared", lambda n: {})
    env = envs.make("code", "train", 0, max_turns=1, **{**DISC, **options})
    samples, _ = R.tree_rollout([env], sampler, 4, 1.0, 512, random.Random(0), workers=1)
    return [s.reward for s in samples if s.role == "tester"]


def test_the_programs_are_what_the_attacks_need():
    """SHORT and FIRST3 fail the problem's own tests (wrong programs), the reference passes them; each
    attack test does to them what its name says."""
    assert data.run_tests(REF, P).ok and not data.run_tests(SHORT, P).ok and not data.run_tests(FIRST3, P).ok
    assert share(TESTS["all_pass"], [REF, SHORT, FIRST3]) == 0
    assert share(TESTS["only_short"], [SHORT, FIRST3]) == 0.5 and share(TESTS["both"], [SHORT, FIRST3]) == 1
    assert share(TESTS["wrong"], [REF]) == 1 and share(TESTS["only_short"], [REF]) == 0


def test_siblings_that_disagree_pay_a_test_by_the_wrong_programs_it_fails(tok):
    """The coder's 4 branches: the reference twice, SHORT and FIRST3 (they disagree). A right test is paid
    the share of the wrong siblings (SHORT, FIRST3) it fails: one every program passes 0 (today 1), one only
    SHORT fails 0.5 (today 1), one both fail 1; a copy of the example 0 (no more than a right test that
    catches nothing); a test the reference fails -0.5 (today 0), below every right test; no test -1."""
    coder = [REF, SHORT, FIRST3, REF]
    got = tree(tok, coder, [TESTS[k] for k in ("copy", "all_pass", "only_short", "wrong")])
    assert got == [0.0, 0.0, 0.5, -0.5]
    assert tree(tok, coder, [TESTS[k] for k in ("both", "none", "copy", "wrong")]) == [1.0, -1.0, 0.0, -0.5]
    # the rule's default is today's: a right test 1 (caught anything or not), a wrong one or a copy 0
    today = tree(tok, coder, [TESTS[k] for k in ("copy", "all_pass", "only_short", "wrong")], tester_reward="right")
    assert today == [0.0, 1.0, 1.0, 0.0]


@pytest.mark.parametrize("coder", [[SHORT, FIRST3, SHORT, FIRST3], [REF] * 4])
def test_siblings_that_agree_leave_the_near_misses_to_stand_in(tok, coder):
    """All wrong or all right, the siblings rank no test above another (a weak coder's all-wrong programs
    are mostly wrong everywhere): funcs' near misses of the reference are the wrong programs."""
    misses = P["near_misses"]
    tests = [TESTS[k] for k in ("only_short", "all_pass", "both", "copy")]
    want = [share(t, misses) for t in tests[:3]] + [0.0]
    assert tree(tok, coder, tests) == pytest.approx(want)
    assert 0 < want[1] < want[0] < want[2] == 1  # they differ: a group of right tests seldom ties


def test_near_misses_without_siblings_and_the_attacks_one_by_one():
    """Parallel sampling and evaluation step one branch: no siblings, the near misses stand in. Each
    attack on its own env: the example copied (0), an earlier test respelt (0), a test the reference fails
    (-0.5), a test that of the near misses only the one-step-short body fails (1 / their count: above a
    copy, below a test that catches more); today: 0, 0, 0, 1."""
    misses = P["near_misses"]
    assert SHORT.split("\n")[1].strip() in [m.split("\n")[1].strip() for m in misses]  # the body one step short
    e = envs.make("code", "train", 0, max_turns=3, **DISC)
    e.step("coder", code(SHORT))
    for name, want in (("copy", 0.0), ("wrong", -0.5), ("none", -1.0)):
        assert e.clone().step("tester", TESTS[name]) == want, name
    assert e.step("tester", TESTS["only_short"]) == pytest.approx(share(TESTS["only_short"], misses))
    e.step("coder", code(SHORT))
    assert e.clone().step("tester", f"assert scale(xs=[0.0]) == [{B}]") == 0.0  # the same test, respelt
    # a test that among the near misses only the one-step-short body fails (SHORT, and two that map 0 to B)
    e = envs.make("code", "train", 0, **DISC)
    e.task = dict(P, near_misses=[SHORT, FIRST3, f"def scale(xs):\n    return [x * {A + 1} + {B} for x in xs]\n"])
    assert e.clone().step("tester", TESTS["only_short"]) == pytest.approx(1 / 3)
    assert e.clone().step("tester", TESTS["both"]) == pytest.approx(1.0)


def test_a_later_coder_turn_forgets_the_siblings_of_the_last():
    """The siblings belong to the coder's turn they were sampled in: after the next coder step (one branch,
    no hook) the near misses stand in again."""
    e = envs.make("code", "train", 0, max_turns=3, **DISC)
    branches = [e.clone() for _ in range(4)]
    for b, prog in zip(branches, [REF, SHORT, FIRST3, REF]):
        b.step("coder", code(prog))
    e = branches[1]
    e.branched("coder", branches)
    assert e.clone().step("tester", TESTS["all_pass"]) == 0.0  # the siblings: every one passes it
    e.step("tester", TESTS["wrong"])
    e.step("coder", code(SHORT))
    want = share(TESTS["all_pass"], P["near_misses"])  # `return 0` and `return ''` fail it
    assert e.step("tester", TESTS["all_pass"]) == pytest.approx(want) and want > 0


def test_funcs_near_misses_are_distinct_wrong_programs_of_the_record():
    """Every funcs record lists the near misses of its reference (funcs.near_misses) that fail one of its
    tests, each once (one per function, by their values on the tests: funcs.make)."""
    for p in funcs.problems("train")[:40] + funcs.problems("test")[:40]:
        misses = p["near_misses"]
        assert misses and len(set(misses)) == len(misses), p["name"]
        assert all(share(t, [m]) == 0 for t in p["tests"] for m in [p["reference"]])
        assert all(any(share(t, [m]) for t in p["tests"]) for m in misses), p["name"]


def test_data_without_near_misses_use_the_siblings_or_pay_a_right_test_nothing():
    """Data with a reference but no near misses (the offline set): no siblings, a right test is paid 0 (it
    catches nothing there is), a wrong one -0.5; with all-wrong siblings, the share of them it fails."""
    e = envs.make("code", "test", 0, data="offline", tester_reward="discriminate", alpha=0.0)
    assert "near_misses" not in e.task and e.task["reference"]
    right = e.reference("tester")
    assert e.clone().step("tester", right) == 0.0
    wrong = right.rsplit("==", 1)[0] + "== 'never the answer'"
    assert e.clone().step("tester", wrong) == -0.5
    ep = e.task["entry_point"]
    branches = [e.clone() for _ in range(2)]
    for b, prog in zip(branches, [f"def {ep}(*a, **k):\n    return 'never the answer'\n", ""]):
        b.step("coder", code(prog))
    branches[0].branched("coder", branches)  # all wrong (the empty reply is no program to catch)
    assert branches[0].clone().step("tester", right) == 1.0
    assert branches[0].clone().step("tester", wrong) == -0.5


def test_the_option_is_a_flag_and_checked():
    parser = argparse.ArgumentParser()
    envs.add_task_args(parser)
    ns = parser.parse_args(["--task", "code", "--tester_reward", "discriminate"])
    assert envs.task_options("code", ns)["tester_reward"] == "discriminate"
    assert envs.make("code", "train", 0, data="funcs").options["tester_reward"] == "right"  # today's, the default
    with pytest.raises(ValueError, match="tester_reward"):
        envs.make("code", "train", 0, data="funcs", tester_reward="catch")
