"""Tests for data.py: loaders (offline, local files, hub errors, hub schemas on hand-written rows) and
run_tests on HumanEval and the shipped stdin problems. Math answer checking: test_mathcheck.py.

    python -m pytest -q test_data.py
"""
import base64
import json
import pickle
import sys
import types
import zlib
from concurrent.futures import ThreadPoolExecutor

import pytest

import data

@pytest.fixture
def fresh_cache():
    data.load_math.cache_clear()
    data.load_code.cache_clear()
    yield
    data.load_math.cache_clear()
    data.load_code.cache_clear()


# ---- math loaders --------------------------------------------------------------------------------

def test_offline_math_real_loader_disjoint_splits():
    splits = {s: data.load_math(s, "offline") for s in data.SPLITS}
    assert [len(splits[s]) for s in data.SPLITS] == [350, 50, 100]
    for rows in splits.values():
        for r in rows:
            assert isinstance(r["problem"], str) and r["problem"].strip()
            assert isinstance(r["answer"], str) and r["answer"].strip()
    texts = {s: {r["problem"] for r in rows} for s, rows in splits.items()}
    assert not texts["train"] & texts["test"] and not texts["train"] & texts["val"] and not texts["val"] & texts["test"]
    assert data.load_math("train", "offline") is data.load_math("train", "offline")  # cached per (split, data)


def test_local_jsonl_and_parquet(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text(json.dumps({"problem": "1+1?", "answer": 2}) + "\n\n" + json.dumps({"problem": "2+2?", "answer": "4"}) + "\n")
    rows = data.load_math("test", str(p))
    assert [(r["problem"], r["answer"]) for r in rows] == [("1+1?", "2"), ("2+2?", "4")]
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    q = tmp_path / "m.parquet"
    pq.write_table(pa.table({"problem": ["3+3?", "5*5?"], "answer": ["6", "25"], "extra": [1, 2]}), str(q))
    assert [r["answer"] for r in data.load_math("train", str(q))] == ["6", "25"]


@pytest.mark.parametrize("lines, where", [
    ([{"problem": "a", "answer": "1"}, {"problem": "b"}], "record 1"),
    ([{"problem": "a", "answer": "  "}], "record 0"),
    ([{"answer": "3"}], "record 0"),
    (["not json"], "line 1"),
])
def test_malformed_math_file_names_file_and_record(tmp_path, lines, where):
    p = tmp_path / "bad.jsonl"
    p.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    with pytest.raises(ValueError, match=rf"bad\.jsonl.*{where}"):
        data.load_math("train", str(p))


def write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


MATH_GOOD = [{"problem": f"What is {i} + 1?", "answer": i + 1} for i in range(8)]
MATH_BAD = [{"problem": "No answer."}, {"problem": "Empty answer.", "answer": " "}, {"problem": ["a", "list"], "answer": "1"},
            {"problem": 5, "answer": "5"}, {"problem": "x" * 200_000, "answer": "1"}, {"problem": "Long answer?", "answer": "9" * 1000},
            "[1, 2]"]


def test_bad_math_rows_are_skipped_and_counted(tmp_path, fresh_cache):
    """A few bad rows in a big set are skipped with a count (issue 23), never a traceback mid-run; a set
    that is mostly bad is wrong as a whole: a one-line error naming its first bad row."""
    path = write_jsonl(tmp_path / "m.jsonl", [r for pair in zip(MATH_GOOD, MATH_BAD) for r in pair] + MATH_GOOD[len(MATH_BAD):])
    with pytest.warns(UserWarning, match=r"m\.jsonl: skipped 7 of 15 .*record 1"):
        rows = data.load_math("train", path)
    assert [r["answer"] for r in rows] == [str(i + 1) for i in range(8)]
    for i, bad in enumerate(MATH_BAD):
        one = write_jsonl(tmp_path / f"bad{i}.jsonl", MATH_GOOD[:2] + [bad] * 3)
        with pytest.raises(ValueError, match=rf"bad{i}\.jsonl record 2: ") as e:
            data.load_math("train", one)
        assert "\n" not in str(e.value) and len(str(e.value)) < 300


def test_bad_code_rows_are_skipped_and_counted(tmp_path, fresh_cache):
    good = [{"problem": f"Echo {i}.", "kind": "stdin", "tests": [{"input": f"{i}\n", "output": f"{i}\n"}], "reference": "print(input())"}
            for i in range(6)]
    bad = [{**good[0], "tests": []}, {**good[0], "tests": None}, {**good[0], "problem": 7},
           {**good[0], "tests": [{"input": "", "output": "1" * (data.MAX_TEST_CHARS + 1)}]}, {**good[0], "kind": "function", "tests": ["assert f()"]}]
    path = write_jsonl(tmp_path / "c.jsonl", good + bad)
    with pytest.warns(UserWarning, match=r"c\.jsonl: skipped 5 of 11 .*record 6: missing or empty 'tests'"):
        rows = data.load_code("train", path)
    assert [r["problem"] for r in rows] == [g["problem"] for g in good]
    with pytest.raises(ValueError, match=r"c2\.jsonl record 0: "):
        data.load_code("train", write_jsonl(tmp_path / "c2.jsonl", bad))


def test_bad_hub_rows_are_skipped_and_counted(monkeypatch, fresh_cache):
    rows = [{"problem": f"P{i}", "answer": str(i)} for i in range(10)] + [{"problem": "P"}, {"problem": None, "answer": "1"}]
    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=lambda *a, **k: rows))
    with pytest.warns(UserWarning, match=r"Polaris-Dataset-53K: skipped 2 of 12 .*record 10"):
        got = data.load_math("train", "POLARIS-Project/Polaris-Dataset-53K")
    assert [r["answer"] for r in got] == [str(i) for i in range(10)]


def test_local_file_is_one_set_with_a_warning_or_split_by_content(tmp_path, fresh_cache):
    """--data FILE: a local file serves every split (an evaluation file is evaluated whole), and says so,
    since a run trained on it measures training problems; split:FILE splits it by content hash like the
    games and arith (same shares), whatever the order of its rows (issue 23)."""
    math = [{"problem": f"What is {i} times 3?", "answer": 3 * i} for i in range(300)]
    path = write_jsonl(tmp_path / "m.jsonl", math)
    with pytest.warns(UserWarning, match=r"m\.jsonl.*one set.*training problems.*split:"):
        assert len(data.load_math("test", path)) == 300
    splits = {s: [r["problem"] for r in data.load_math(s, f"split:{path}")] for s in data.SPLITS}
    texts = {s: set(v) for s, v in splits.items()}
    assert not texts["train"] & texts["val"] and not texts["train"] & texts["test"] and not texts["val"] & texts["test"]
    assert set().union(*texts.values()) == {r["problem"] for r in math}
    assert 180 < len(texts["train"]) < 270 and min(len(texts["val"]), len(texts["test"])) > 10
    assert all(envs_split(p) == s for s, v in splits.items() for p in v)
    shuffled = write_jsonl(tmp_path / "m2.jsonl", math[::-1] + [{**math[0], "problem": "  " + math[0]["problem"]}])
    assert {r["problem"].strip() for r in data.load_math("test", f"split:{shuffled}")} == texts["test"]
    code = [{"problem": f"Print {i}.", "kind": "stdin", "tests": [{"input": "", "output": f"{i}\n"}]} for i in range(100)]
    cpath = write_jsonl(tmp_path / "c.jsonl", code)
    with pytest.warns(UserWarning, match="one set"):
        assert len(data.load_code("val", cpath)) == 100
    csplits = {s: {p["problem"] for p in data.load_code(s, f"split:{cpath}")} for s in data.SPLITS}
    assert sum(map(len, csplits.values())) == 100 and not csplits["train"] & (csplits["val"] | csplits["test"])


def envs_split(problem):
    import task
    return task.split_of(("data", " ".join(problem.split())))


def test_unknown_source_and_split_are_clear_errors():
    with pytest.raises(ValueError, match="no such file"):
        data.load_math("train", "aime24")
    with pytest.raises(ValueError, match="unknown split"):
        data.load_math("dev", "offline")
    with pytest.raises(ValueError, match="serves split"):
        data.load_math("train", "Maxwell-Jia/AIME_2024")  # an evaluation set never feeds training
    with pytest.raises(ValueError, match="serves split"):
        data.load_code("val", "livecodebench/code_generation_lite")


def test_hub_without_datasets_or_network_is_a_clear_error(monkeypatch, fresh_cache):
    monkeypatch.setitem(sys.modules, "datasets", None)  # as if not installed
    with pytest.raises(RuntimeError, match=r"Maxwell-Jia/AIME_2024.*pip install datasets.*offline"):
        data.load_math("test")
    with pytest.raises(RuntimeError, match=r"deepmind/code_contests.*pip install datasets"):
        data.load_code("train")

    def no_network(*a, **k):
        raise ConnectionError("hub unreachable")
    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=no_network))
    with pytest.raises(RuntimeError, match=r"POLARIS-Project/Polaris-Dataset-53K.*ConnectionError.*offline"):
        data.load_math("train")
    with pytest.raises(RuntimeError, match=r"codeparrot/apps.*hub unreachable"):
        data.load_code("test", "codeparrot/apps")


# ---- code: offline sets and run_tests ------------------------------------------------------------

@pytest.mark.slow
def test_all_humaneval_canonical_solutions_pass_and_a_wrong_one_fails():
    he = data.load_code("test", "humaneval")
    assert len(he) == 164 and all(p["tests"] and p["kind"] == "function" for p in he)
    with ThreadPoolExecutor(4) as pool:
        reports = list(pool.map(lambda p: data.run_tests(p["reference"], p), he))
    bad = [(p["name"], r.failures) for p, r in zip(he, reports) if not (r.ok and r.passed == len(p["tests"]))]
    assert not bad, bad[:5]
    wrong = data.run_tests(he[0]["problem"] + "    return True\n", he[0])
    assert 0 < wrong.passed < wrong.total and "AssertionError" in wrong.failures[0]


def test_first_failure_stops_early_and_never_passes_a_failing_program(monkeypatch):
    """Only pass/fail wanted: tests after the first failing one do not run; which ones ran depends on the
    results alone (the same passing prefix every time); a stopped report is never `ok`."""
    import sandbox
    p = data.load_code("test", "humaneval")[0]
    wrong = p["problem"] + "    return True\n"
    each = [data.run_tests(wrong, p, tests=[t]).passed for t in p["tests"]]
    first = each.index(0)  # some pass, some fail: see the test above
    runs = []
    real = sandbox.run
    monkeypatch.setattr(sandbox, "run", lambda *a, **k: runs.append(1) or real(*a, **k))
    for _ in range(3):
        runs.clear()
        r = data.run_tests(wrong, p, first_failure=True)
        assert (r.passed, r.total, len(r.failures), r.ok) == (first, len(p["tests"]), 1, False)
        assert first + 1 <= len(runs) <= len(p["tests"])
    right = data.run_tests(p["reference"], p, first_failure=True)
    assert right.ok and right.passed == len(p["tests"])
    q = next(q for q in data.load_code("train", "offline") if q["kind"] == "stdin" and len(q["tests"]) > sandbox.CORES + 1)
    slow_after_first = (f"import sys, time\nif sys.stdin.read() != {str(q['tests'][0]['input'])!r}:\n    time.sleep(1)\n"
                        "print('wrong')")
    runs.clear()
    r = data.run_tests(slow_after_first, q, first_failure=True)
    assert r.passed == 0 and len(runs) <= sandbox.CORES < len(q["tests"])  # the ones already started, no more



def test_humaneval_runs_prompt_plus_completion_as_the_standard_harness():
    """human-eval runs prompt + completion + tests: a completion may use the prompt's imports (List) or be
    the function's body alone. The prompt's stub (it returns None) must not make a wrong answer pass."""
    p = data.load_code("test", "humaneval")[0]  # the prompt imports List; the completion below does not
    full = ("def has_close_elements(numbers: List[float], threshold: float) -> bool:\n"
            "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])\n")
    assert data.run_tests(full, p).ok
    assert data.run_tests(full.split("\n", 1)[1], p).ok  # the body alone, as human-eval's samples are
    assert data.run_tests(p["reference"], p).ok
    assert data.run_tests(full.replace("return any", "return not any"), p).passed == 0  # wrong on every test
    assert data.run_tests("# nothing here\n", p).passed == 0
    assert data.run_tests("", p).failures == ["empty program"]


def test_humaneval_never_feeds_training():
    """HumanEval is an evaluation set: --data humaneval serves its test split only (one-line error
    elsewhere, naming the fix); --data offline splits it by task number."""
    assert len(data.load_code("test", "humaneval")) == 164
    for split in ("train", "val"):
        with pytest.raises(ValueError, match=r"serves split\(s\) test.*--data offline") as e:
            data.load_code(split, "humaneval")
        assert "\n" not in str(e.value)

def test_shipped_stdin_problems_and_readable_failures():
    probs = [p for p in data.load_code("train", "offline") if p["kind"] == "stdin"]
    assert len(probs) >= 8
    with ThreadPoolExecutor(4) as pool:
        reports = list(pool.map(lambda p: data.run_tests(p["reference"], p), probs))
    for p, r in zip(probs, reports):
        assert len(p["tests"]) >= 4 and r.ok and r.passed == len(p["tests"]), (p["name"], r)
    p = probs[0]
    wrong = data.run_tests("print(-999)", p)
    assert wrong.passed == 0 and 0 < len(wrong.failures) <= 3
    assert all(f.startswith("input: ") and "expected: " in f and "got: '-999\\n'" in f and len(f) <= 200 for f in wrong.failures)
    crash = data.run_tests("raise ValueError('boom')", p, tests=p["tests"][:1])
    assert crash.total == 1 and "ValueError: boom" in crash.failures[0]
    for garbage in ["", "   ", None, "@@@ not python", 42]:
        assert data.run_tests(garbage, p).passed == 0
    assert data.run_tests(p["reference"], p, tests=[{"input": 5}, "junk", {}]).total == 3  # malformed tests: no raise


def test_output_comparison_is_token_wise():
    assert data._same_output("1 2\n3  \n\n\n", "1 2\n3")
    assert data._same_output("0.333333333\n", "0.3333333")
    assert not data._same_output("1 2", "1 2 3") and not data._same_output("12", "1 2") and not data._same_output("3", "3.5")
    assert not data._same_output("2", "2.1")


def test_long_expected_output_passes_and_endless_output_fails_clearly():
    """The sandbox keeps 64 KiB of stdout unless asked for more: a correct program whose expected output is
    20,000 lines used to fail, with the same text shown as expected and got (issue 23)."""
    n = 20_000
    p = {"kind": "stdin", "tests": [{"input": f"{n}\n", "output": "".join(f"line {i}\n" for i in range(n))}]}
    r = data.run_tests("for i in range(int(input())):\n    print('line', i)", p)
    assert r.ok, r
    # wrong far down: the message shows where, not two equal heads
    r = data.run_tests("for i in range(int(input())):\n    print('line', i if i != 15000 else -1)", p)
    assert r.passed == 0 and "line 15001" in r.failures[0] and "'line 15000'" in r.failures[0] and "'line -1'" in r.failures[0], r
    # more output than any right answer could need: a one-line reason, whether it ends or not
    for flood in ["import sys\nsys.stdout.write('line 0\\n' * 5_000_000)",
                  "import sys\nsys.stdout.write('line 0\\n' * 5_000_000)\nwhile True:\n    print('line 0')"]:
        r = data.run_tests(flood, p)
        assert r.passed == 0 and "output over" in r.failures[0] and len(r.failures[0]) <= 200, r


def test_offline_code_splits_are_disjoint():
    splits = {s: data.load_code(s, "offline") for s in data.SPLITS}
    names = {s: {p["name"] for p in rows} for s, rows in splits.items()}
    texts = {s: {p["problem"] for p in rows} for s, rows in splits.items()}
    for a, b in [("train", "val"), ("train", "test"), ("val", "test")]:
        assert not names[a] & names[b] and not texts[a] & texts[b]
    he = {n for s in names.values() for n in s if n.startswith("HumanEval/")}
    assert len(he) == 164 and len(splits["test"]) == 33 and len(splits["val"]) == 33
    assert sum(p["kind"] == "stdin" for p in splits["train"]) >= 8


def test_local_code_jsonl(tmp_path):
    good = {"problem": "echo", "kind": "stdin", "tests": [{"input": "a\n", "output": "a\n"}], "reference": "print(input())"}
    p = tmp_path / "c.jsonl"
    p.write_text(json.dumps(good) + "\n")
    [rec] = data.load_code("train", str(p))
    assert data.run_tests(rec["reference"], rec).ok
    p = tmp_path / "c2.jsonl"  # a new path: loads are cached per (split, data)
    p.write_text(json.dumps(good) + "\n" + json.dumps({**good, "kind": "function", "tests": ["assert f() == 1"]}) + "\n")
    with pytest.raises(ValueError, match=r"c2\.jsonl record 1.*entry_point"):
        data.load_code("train", str(p))


# ---- hub schemas, on hand-written records shaped like the real ones -------------------------------

def test_math_hub_normalisers():
    norm = {n: v[3] for n, v in data.MATH_HUB.items()}
    assert norm["Maxwell-Jia/AIME_2024"]({"ID": "2024-I-1", "Problem": "P", "Solution": "S", "Answer": 204}, "w")["answer"] == "204"
    assert norm["yentinglin/aime_2025"]({"problem": "P", "answer": "70", "id": "0"}, "w")["answer"] == "70"
    assert norm["POLARIS-Project/Polaris-Dataset-53K"]({"problem": "P", "answer": "\\frac{1}{2}", "difficulty": "3/8"}, "w")["answer"] == "\\frac{1}{2}"
    ob = norm["Hothan/OlympiadBench"]
    assert ob({"question": "Q", "final_answer": ["$\\frac{1}{2}$"], "solution": ["..."]}, "w")["answer"] == "\\frac{1}{2}"
    assert ob({"question": "Q", "final_answer": ["$2$", "$3$"], "is_multiple_answer": True}, "w")["answer"] == "2, 3"
    with pytest.raises(ValueError, match="OB record 7.*final_answer"):
        ob({"question": "Q", "final_answer": []}, "OB record 7")


def test_code_contests_normaliser():
    row = {"name": "cc1", "description": "Print a+b.", "input_file": "", "output_file": "",
           "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
           "private_tests": {"input": ["5 5\n", "1 2\n"], "output": ["10\n", "3\n"]},
           "generated_tests": {"input": ["-1 1\n", "0 0\n"], "output": ["0\n", "0\n"]},
           "solutions": {"language": [2, 3], "solution": ["int main(){}", "a, b = map(int, input().split())\nprint(a + b)"]}}
    rec = data._code_contests(row, "w")
    assert rec["kind"] == "stdin" and len(rec["tests"]) == 4  # public + private + generated, one duplicate dropped
    assert rec["reference"].startswith("a, b") and data.run_tests(rec["reference"], rec).ok
    assert data._code_contests({**row, "input_file": "in.txt"}, "w") is None


def test_apps_normaliser_stdin_and_call_based():
    stdin_row = {"problem_id": 1, "question": "Double it.", "starter_code": "",
                 "solutions": json.dumps(["print(2 * int(input()))"]),
                 "input_output": json.dumps({"inputs": ["2\n", ["3"]], "outputs": ["4\n", ["6"]]})}
    rec = data._apps(stdin_row, "w")
    assert rec["kind"] == "stdin" and rec["tests"][1] == {"input": "3", "output": "6"}
    assert data.run_tests(rec["reference"], rec).ok
    fn_row = {"problem_id": 2, "question": "Add.", "starter_code": "def add(a, b):\n    ",
              "solutions": json.dumps(["def add(a, b):\n    return [a + b, {1: 'x'}]"]),
              "input_output": json.dumps({"fn_name": "add", "inputs": [[1, 2], [3, 4]],
                                          "outputs": [[[3, {"1": "x"}]], [7, {"1": "x"}]]})}
    rec = data._apps(fn_row, "w")
    assert rec["kind"] == "function" and rec["entry_point"] == "add" and "def add(a, b):" in rec["problem"]
    assert data.run_tests(rec["reference"], rec).ok  # wrapped and unwrapped outputs, int keys, list vs tuple
    bad = data.run_tests("def add(a, b):\n    return [a - b, {1: 'x'}]", rec)
    assert bad.passed == 0 and "got: [-1, {1: 'x'}]" in bad.failures[0]
    hack = data.run_tests("class A:\n    __eq__ = lambda s, o: True\ndef add(a, b):\n    return A()", rec)
    assert hack.passed == 0  # a custom __eq__ cannot fake a pass
    quit_early = data.run_tests("import os\nos._exit(0)", rec)
    assert quit_early.passed == 0 and "exited before the test ran" in quit_early.failures[0]
    cls_row = {**fn_row, "starter_code": "class Solution:\n    def add(self, a, b):\n        ",
               "solutions": json.dumps(["class Solution:\n    def add(self, a, b):\n        return (a + b, {1: 'x'})"])}
    rec = data._apps(cls_row, "w")
    assert rec["tests"][0].startswith("assert _eq(Solution().add(1, 2)") and data.run_tests(rec["reference"], rec).ok
    assert data._apps({**stdin_row, "input_output": ""}, "w") is None


def _lcb_compress(tests):
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


def test_livecodebench_normaliser_with_compressed_private_tests():
    pub = [{"input": "[2, 7, 11]\n9", "output": "[0, 1]", "testtype": "functional"}]
    priv = [{"input": "[3, 3]\n6", "output": "[0, 1]", "testtype": "functional"},
            {"input": "[1, 5, 2]\n7", "output": "[1, 2]", "testtype": "functional"}]
    row = {"question_title": "t", "question_content": "Two sum.", "platform": "leetcode", "question_id": "1",
           "starter_code": "class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n        ",
           "public_test_cases": json.dumps(pub), "private_test_cases": _lcb_compress(priv),
           "metadata": json.dumps({"func_name": "twoSum"}), "difficulty": "easy"}
    rec = data._livecodebench(row, "w")
    assert rec["kind"] == "function" and len(rec["tests"]) == 3 and rec["entry_point"] == "twoSum"
    sol = ("class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n"
           "        seen = {}\n        for i, x in enumerate(nums):\n            if target - x in seen:\n"
           "                return (seen[target - x], i)\n            seen[x] = i\n")
    assert data.run_tests(sol, rec).ok  # List comes from the setup prelude; a tuple equals a JSON list
    assert data.run_tests(sol, rec, tests=["assert list(twoSum([3, 3], 6)) == [0, 1]"]).ok  # a tester's bare call
    bare = "def twoSum(nums, target):\n    return next([j, i] for i in range(len(nums)) for j in range(i) if nums[i] + nums[j] == target)\n"
    assert data.run_tests(bare, rec).ok  # a plain function serves Solution().twoSum too
    assert data.run_tests(bare.replace("[j, i]", "[i, j]"), rec).passed == 0
    stdin_row = {**row, "starter_code": "", "metadata": "{}",
                 "public_test_cases": json.dumps([{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]),
                 "private_test_cases": json.dumps([{"input": "4 5\n", "output": "9\n", "testtype": "stdin"}])}
    rec = data._livecodebench(stdin_row, "w")
    assert rec["kind"] == "stdin" and len(rec["tests"]) == 2
    assert data.run_tests("print(sum(map(int, input().split())))", rec).ok
    big = {**row, "public_test_cases": json.dumps([{"input": json.dumps(list(range(60_000))) + "\n119997",
                                                   "output": "[59998, 59999]", "testtype": "functional"}]),
           "private_test_cases": "[]"}
    assert data.run_tests(sol, data._livecodebench(big, "w")).ok  # ~400 KB of test: too big for an argv
    evil = base64.b64encode(zlib.compress(pickle.dumps(ValueError("x")))).decode()
    with pytest.raises(pickle.UnpicklingError):  # a pickle that would build an object is refused
        data._lcb_private(evil)


def test_hub_path_end_to_end_with_a_fake_datasets_module(monkeypatch, fresh_cache):
    calls = []

    class FakeDS(list):
        column_names = ["question_content", "public_test_cases", "private_test_cases", "metadata", "question_id"]

        def select_columns(self, cols):
            return self

    def load_dataset(path, *args, data_files=None, split=None, **kw):
        calls.append((path, data_files, split))
        return FakeDS([{"question_content": "Echo.", "question_id": "q1", "metadata": "{}",
                        "public_test_cases": json.dumps([{"input": "x\n", "output": "x\n", "testtype": "stdin"}]),
                        "private_test_cases": _lcb_compress([])},
                       {"question_content": "No tests.", "question_id": "q2", "metadata": "{}",
                        "public_test_cases": "[]", "private_test_cases": "[]"}])
    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    with pytest.warns(UserWarning, match="skipped 1"):
        rows = data.load_code("test")
    assert [r["name"] for r in rows] == ["lcb/q1"] and calls[0][0] == "json"
    assert calls[0][1][-1] == f"hf://datasets/livecodebench/code_generation_lite/test{data.LCB_RELEASE}.jsonl"


# ---- code: a program cannot fake a pass ----------------------------------------------------------
# Each hostile program below passed tests on the harness before the judge (program and check in one
# interpreter, the test and its nonce in a global); each must now pass none. FORGE gathers every
# 16-hex string a source yields and writes it as a verdict in both protocols ("<hex> PASS" lines, and
# stderr ending in the hex) to every stream it can open, then exits 0.
FORGE = r'''
import builtins, gc, inspect, os, re, sys
NONCE = None


def strs(xs):
    out = []
    for x in xs:
        try:
            out.append(x.decode("latin-1") if isinstance(x, (bytes, bytearray)) else x if isinstance(x, str) else repr(x))
        except Exception:
            pass
    return out


def forge(texts):
    texts = strs(texts)
    found = [h for t in texts for h in re.findall(r"(?<![0-9a-f])[0-9a-f]{16}(?![0-9a-f])", t)]
    found += [h for t in texts for h in re.findall(r"write\('([0-9a-f]{16})'\)", t)]  # the old test's own
    found = (list(dict.fromkeys(found[::-1]))[::-1] + ([NONCE] if NONCE else []))[-50:] or ["0" * 16]  # best last
    out = "".join(f"{h} PASS\n" for h in found).encode()
    fds = [1, 2]
    for pid in (os.getppid(), 1):
        for n in (1, 2):
            try:
                fds.append(os.open(f"/proc/{pid}/fd/{n}", os.O_WRONLY))
            except OSError:
                pass
    for fd in fds:
        try:
            os.write(fd, out + found[-1].encode())
        except OSError:
            pass
    os._exit(0)


def from_globals():
    spaces = [globals()] + [getattr(m, "__dict__", {}) for m in list(sys.modules.values())]
    return [v for d in spaces for v in list(d.values()) if isinstance(v, str)]


def from_frames():
    out, f = [], sys._getframe()
    while f is not None:
        out += [f.f_locals, f.f_code.co_consts, f.f_globals.get("_TEST")]
        f = f.f_back
    return out


def from_inspect():
    return [x for fi in inspect.stack() for x in (fi.frame.f_locals, fi.frame.f_code.co_consts, fi.code_context)]


def from_gc():
    out = []
    for o in gc.get_objects():
        if isinstance(o, dict):
            out += [v for v in list(o.values()) if isinstance(v, str)]
        elif isinstance(o, (list, tuple)):
            out += [v for v in o if isinstance(v, str)]
        elif inspect.isfunction(o):
            out += [c for c in o.__code__.co_consts if isinstance(c, str)]
    return out


def from_stdin():  # the pipe (through every path to it), and what the old harness read from it
    out = [globals().get("_TEST")]
    for path in ("/dev/stdin", "/proc/self/fd/0", f"/proc/{os.getppid()}/fd/0", "/proc/1/fd/0"):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            out.append(os.read(fd, 1 << 20))
        except OSError:
            pass
    try:
        out.append(sys.stdin.read())
    except Exception:
        pass
    return out


def from_mem():  # the writable mappings of us, our parent and pid 1, through /proc/<pid>/mem
    out = []
    for pid in ("self", str(os.getppid()), "1"):
        try:
            with open(f"/proc/{pid}/maps") as m, open(f"/proc/{pid}/mem", "rb", 0) as mem:
                for line in m.read().splitlines():
                    addr, perms = line.split()[:2]
                    a, b = (int(x, 16) for x in addr.split("-"))
                    if perms.startswith("rw") and b - a < 1 << 27:
                        try:
                            mem.seek(a)
                            out += re.findall(rb"[^0-9a-f][0-9a-f]{16}[^0-9a-f]|write\('[0-9a-f]{16}'\)", mem.read(b - a))
                        except (OSError, ValueError, OverflowError):
                            pass
        except OSError:
            pass
    return out
'''
GCD = "def greatest_common_divisor(a, b):\n    {}\n    return -1\n"  # HumanEval/13, wrong on every test
FORGERIES = {  # how the program hunts for the verdict token (at load, or inside the call)
    "globals": "forge(from_globals())\n" + GCD.format("pass"),
    "frames": GCD.format("forge(from_frames())"),
    "inspect": GCD.format("forge(from_inspect())"),
    "gc": GCD.format("forge(from_gc())"),
    "stdin": "forge(from_stdin())\n" + GCD.format("pass"),
    "proc_mem": GCD.format("forge(from_mem())"),
    "kill_parent": "for p in (os.getppid(), 1):\n    try:\n        os.kill(p, 9)\n    except OSError:\n        pass\n"
                   "forge(from_globals())\n" + GCD.format("pass"),
    "excepthook": "def hook(kind, value, tb):\n    texts = []\n    while tb:\n"
                  "        texts += [tb.tb_frame.f_locals, tb.tb_frame.f_code.co_consts]\n        tb = tb.tb_next\n"
                  "    forge(texts + from_globals())\n"
                  "sys.excepthook = sys.__excepthook__ = hook\nsys.exit = builtins.exit = lambda *a: forge(from_globals())\n"
                  "builtins.AssertionError = type('AssertionError', (Exception,), {})\n" + GCD.format("pass"),
    "known_nonce_at_load": "forge([])\n" + GCD.format("pass"),  # even holding the token, no stream to write it to
    "known_nonce_in_call": GCD.format("forge([])"),
}


@pytest.mark.parametrize("attack", list(FORGERIES))
def test_function_verdict_cannot_be_forged(attack, monkeypatch):  # /proc/<pid>/fd: see the probe below
    p = data.load_code("test", "humaneval")[13]
    program = FORGE + FORGERIES[attack]
    if attack.startswith("known_nonce"):
        monkeypatch.setattr(data.secrets, "token_hex", lambda n=None: "0123456789abcdef")
        program = program.replace("NONCE = None", "NONCE = '0123456789abcdef'")
    r = data.run_tests(program, p)
    assert r.total == len(p["tests"]) >= 4 and r.passed == 0, r
    assert data.run_tests(p["reference"], p).ok  # the same tests, honestly passed


ALWAYS = "class A:\n    __eq__ = lambda s, o: True\n    __ne__ = lambda s, o: False\n    __hash__ = lambda s: 0\n"
TRICKS = {  # (HumanEval index or "apps", program): a wrong answer dressed up to compare equal
    "eq_always": (0, ALWAYS + "def has_close_elements(numbers, threshold):\n    return A()\n"),
    "bool_of_eq": (48, "class T:\n    __bool__ = lambda s: True\nclass A:\n    __eq__ = __ne__ = lambda s, o: T()\n"
                       "def is_palindrome(text):\n    return A()\n"),
    "str_subclass": (11, "class S(str):\n    __eq__ = lambda s, o: True\n    __ne__ = lambda s, o: False\n"
                         "    __hash__ = str.__hash__\ndef string_xor(a, b):\n    return S('nope')\n"),
    "int_subclass": (13, "class I(int):\n    __eq__ = __lt__ = __le__ = __gt__ = __ge__ = lambda s, o: True\n"
                         "    __ne__ = lambda s, o: False\n    __hash__ = int.__hash__\n"
                         "    __abs__ = __sub__ = __rsub__ = __neg__ = lambda s, *o: I(0)\n"
                         "def greatest_common_divisor(a, b):\n    return I(-1)\n"),
    "float_subclass": (2, "class F(float):\n    __eq__ = __lt__ = __le__ = lambda s, o: True\n    __ne__ = lambda s, o: False\n"
                          "    __hash__ = float.__hash__\n    __abs__ = __sub__ = __rsub__ = lambda s, *o: F(0)\n"
                          "def truncate_number(number):\n    return F(-1.0)\n"),
    "list_subclass": (5, "class L(list):\n    __eq__ = lambda s, o: True\n    __ne__ = lambda s, o: False\n"
                         "def intersperse(numbers, delimeter):\n    return L([-1])\n"),
    "patch_builtins": ("own", "import builtins\n_isinstance, _sorted = isinstance, sorted\nbuiltins.abs = lambda x: 0.0\n"
                              "builtins.isinstance = lambda o, t: type(o) is float and t is list or _isinstance(o, t)\n"
                              "builtins.sorted = lambda x, *a, **k: [1, 2] if type(x) is float else _sorted(x, *a, **k)\n"
                              "builtins.AssertionError = type('AssertionError', (Exception,), {})\n"
                              "def f(x):\n    return 2.0\n"),
    "patch_json": ("apps", ALWAYS + "import json\njson.loads = lambda *a, **k: A()\njson.dumps = lambda *a, **k: '0'\n"
                           "def add(a, b):\n    return 0\n"),
    "own_setup_helpers": (38, "def encode_cyclic(s):\n    return s\ndef decode_cyclic(s):\n    return s\n"),  # the test's encoder
    "own_poly": (32, "def poly(xs, x):\n    return 0\ndef find_zero(xs):\n    return 12345.0\n"),
    "setup_values": (151, "def double_the_difference(lst):\n    return globals().get('odd_sum', -1)\n"),  # odd_sum: expected
}
OWN = {"kind": "function", "entry_point": "f", "setup": "", "tests": [  # as a tester might write them
    "assert abs(f(1.5) - 0.5) < 1e-06", "assert isinstance(f(2), list) and sorted(f(2)) == [1, 2]"]}
APPS_ADD = {"problem_id": 2, "question": "Add.", "starter_code": "def add(a, b):\n    ", "solutions": "[]",
            "input_output": json.dumps({"fn_name": "add", "inputs": [[1, 2], [3, 4]], "outputs": [[3], 7]})}


@pytest.mark.parametrize("trick", list(TRICKS))
def test_function_return_value_and_patching_tricks_fail(trick):
    which, program = TRICKS[trick]
    p = data._apps(APPS_ADD, "w") if which == "apps" else OWN if which == "own" else data.load_code("test", "humaneval")[which]
    r = data.run_tests(program, p)
    assert r.total == len(p["tests"]) and r.passed == 0, r
    if isinstance(which, int):
        assert data.run_tests(p["reference"], p).ok


PROBE = r'''
import gc, os, re, stat, sys
PAT = re.compile(rb"SECRET-\d{8}")


def probe():  # where could this program see the test's secret, or write into the verdict's stream?
    leaks = []
    hit = lambda b: bool(PAT.search(b if isinstance(b, bytes) else str(b).encode("utf-8", "replace")))
    if any(hit(v) for o in gc.get_objects() if isinstance(o, dict) for v in list(o.values()) if isinstance(v, str)):
        leaks.append("gc")
    f = sys._getframe()
    while f is not None:
        if hit(f.f_code.co_consts) or hit(f.f_locals):
            leaks.append("stack")
        f = f.f_back
    for pid in ("self", str(os.getppid()), "1"):
        try:
            with open(f"/proc/{pid}/maps") as m, open(f"/proc/{pid}/mem", "rb", 0) as mem:
                for line in m.read().splitlines():
                    addr, perms = line.split()[:2]
                    a, b = (int(x, 16) for x in addr.split("-"))
                    if perms.startswith("rw") and b - a < 1 << 27:
                        try:
                            mem.seek(a)
                            if hit(mem.read(b - a)):
                                leaks.append(f"{pid} mem")
                        except (OSError, ValueError, OverflowError):
                            pass
        except OSError:
            pass
        for x in ("environ", "cmdline"):
            try:
                if hit(open(f"/proc/{pid}/{x}", "rb").read()):
                    leaks.append(f"{pid} {x}")
            except OSError:
                pass
        for n in (0, 1, 2):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{n}")
                fd = os.open(f"/proc/{pid}/fd/{n}", (os.O_RDONLY if n == 0 else os.O_WRONLY) | os.O_NONBLOCK)
            except OSError:
                continue
            if n == 0 and hit(os.read(fd, 1 << 20)) or n and link != "/dev/null":
                leaks.append(f"{pid} fd{n}")
    for n in (0, 1, 2):  # our own: a pipe here may lead to the host (they should be /dev/null)
        try:
            if stat.S_ISFIFO(os.fstat(n).st_mode):
                leaks.append(f"own fd{n}")
        except OSError:
            pass
    return sorted(set(leaks))
'''


def test_function_program_can_reach_no_secret_and_no_verdict_stream():
    """The program reports what it can reach (memory, /proc of itself, its parent and pid 1, gc, the
    stack); the test holds a secret and passes only if nothing leaked. Before the judge the program
    shared the test's process; without PR_SET_DUMPABLE=0 it would read the judge's /proc/<pid>/mem."""
    p = {"kind": "function", "entry_point": "probe", "setup": "", "tests": ["assert probe() == [] != 'SECRET-31415926'"]}
    r = data.run_tests(PROBE, p)
    assert r.ok, r.failures


def test_function_judge_keeps_values_exceptions_and_messages():
    p = {"kind": "function", "entry_point": "f", "setup": "import math\n", "tests": [
        "assert f('all') == (1, [2.5, float('inf'), -0.0], {'a': {1, 2}, 3: frozenset()}, b'x', 10 ** 400, None, True, 1j)",
        "assert math.isnan(f('nan')) and type(f('all')[0]) is int and type(f('all')[6]) is bool",
        "try:\n    f('raise')\nexcept ValueError as e:\n    assert str(e) == 'bad input'\nelse:\n    assert False",
        "assert Solution().f('all')[0] == 1",  # LeetCode style call of a plain function
        "assert f(lambda: 1) == 1",  # an argument that cannot be sent: a clean failure
        "assert f('gen') == [0, 1]",  # a generator is not data: opaque, equal to nothing
        "xs = [3, 1, 2]\nf('sort', xs)\nassert xs == [1, 2, 3]",  # arguments are copies: documented
        "assert f('all') == 2",
    ]}
    program = ("class MyError(ValueError):\n    pass\n"
               "def f(x, arg=None):\n    if x == 'all':\n        return (1, [2.5, float('inf'), -0.0], {'a': {1, 2}, 3: frozenset()}, b'x', 10 ** 400, None, True, 1j)\n"
               "    if x == 'nan':\n        return float('nan')\n    if x == 'raise':\n        raise MyError('bad input')\n"
               "    if x == 'gen':\n        return (i for i in range(2))\n    if x == 'sort':\n        arg.sort()\n")
    r = data.run_tests(program, p)
    assert r.passed == 4, r
    assert len(r.failures) == 3 and "TypeError: a function cannot be passed to the program" in r.failures[0]
    assert "got: <unsupported generator>" in r.failures[1] and "AssertionError" in r.failures[2]
    r = data.run_tests(program, p, tests=p["tests"][-1:])
    assert r.failures[0].startswith("assert f('all') == 2 -> AssertionError; got: (1, [2.5, inf, -0.0], {'a': {1, 2}, 3: ")
    assert len(r.failures[0]) <= 200
    died = data.run_tests("import os\ndef f(x):\n    os._exit(0)\n", p, tests=["try:\n    f(1)\nexcept BaseException:\n    pass"])
    assert died.passed == 0 and "exited during the test" in died.failures[0]


def test_a_long_function_tests_failure_keeps_its_expected_value():
    """The coder's next turn sees each mismatch: a test longer than the shown width keeps its head and its
    end (the expected value), not its first 100 characters."""
    p = {"kind": "function", "entry_point": "f", "tests": [f"assert f({list(range(40))}) == 'EXPECTED-END'"]}
    r = data.run_tests("def f(xs):\n    return 'mine'\n", p)
    assert r.passed == 0 and len(r.failures[0]) <= 200, r
    assert r.failures[0].startswith("assert f([0, 1, 2") and "== 'EXPECTED-END' -> " in r.failures[0], r
    assert "got: 'mine'" in r.failures[0], r


def test_stdin_program_cannot_find_the_expected_output_or_exit_early():
    """stdin kind: the expected output stays in this process; the program gets the input only."""
    p = {"kind": "stdin", "tests": [{"input": "hi\n", "output": "SECRET-27182818\n"}]}
    hunt = r"""
import os, re, sys
pat, texts = re.compile(rb"SECRET-\d{8}"), [repr(dict(os.environ)).encode(), repr(sys.argv).encode()]
texts.append(sys.stdin.buffer.read())  # all of stdin, beyond the input
paths = [f"/proc/{p}/{x}" for p in os.listdir("/proc") if p.isdigit() for x in ("environ", "cmdline")]
paths += [f"/proc/{p}/fd/{n}" for p in os.listdir("/proc") if p.isdigit() for n in (0, 1, 2)]
for root in ("/tmp", os.getcwd(), os.path.expanduser("~")):
    for d, dirs, files in os.walk(root):
        paths += [os.path.join(d, f) for f in files]
for path in paths:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        texts.append(os.read(fd, 1 << 20))
    except OSError:
        pass
print(" ".join(sorted({m.decode() for t in texts for m in pat.findall(t)})) or "nothing")
"""
    r = data.run_tests(hunt, p)
    assert r.passed == 0 and "got: 'nothing\\n'" in r.failures[0], r
    for early in ["import os\nos._exit(0)", "import sys\nsys.exit(0)", "pass", "print()"]:
        r = data.run_tests(early, p)
        assert r.passed == 0 and "got: ''" in r.failures[0] or "got: '\\n'" in r.failures[0], (early, r)


def test_an_empty_split_of_a_file_is_a_one_line_error(tmp_path, fresh_cache, tiny_dir, capsys):
    """--data split:FILE whose records all hash to train (a small file): its test split is empty. Evaluating
    it crashed (ZeroDivisionError: the count 0 was read as "unlimited", then problem 0 of 0 rows); it is a
    one-line error naming the split and the file, from the loader and from eval.py alike."""
    import eval as ev
    rows, i = [], 0
    while len(rows) < 4:  # problems whose content hash names train
        p = f"What is {i} plus 1?"
        if envs_split(p) == "train":
            rows.append({"problem": p, "answer": str(i + 1)})
        i += 1
    path = write_jsonl(tmp_path / "small.jsonl", rows)
    assert len(data.load_math("train", f"split:{path}")) == 4
    with pytest.raises(ValueError, match=r"small\.jsonl.*test split.*empty"):
        data.load_math("test", f"split:{path}")
    with pytest.raises(SystemExit) as e:
        ev.main(["--task", "math", "--data", f"split:{path}", "--split", "test", "--model", tiny_dir,
                 "--engine", "hf", "--device", "cpu", "--n", "4"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and "test split" in err and "small.jsonl" in err, err
