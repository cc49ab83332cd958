"""Tests for data.py: loaders (offline, local files, hub errors, hub schemas on hand-written rows),
math_equal / extract_boxed, and run_tests on HumanEval and the shipped stdin problems.

    python -m pytest -q test_data.py
"""
import base64
import json
import pickle
import sys
import threading
import types
import zlib
from concurrent.futures import ThreadPoolExecutor

import pytest

import data

EQUAL = [("0.5", "1/2"), (r"\frac{1}{2}", "0.5"), (r"\dfrac{1}{2}", "1/2"), ("1,000", "1000"), ("42", "$42$"),
         (r"\boxed{7}", "7"), (r"\frac{2}{4}", r"\frac{1}{2}"), ("-3", "-3.0"), (r"\frac{\sqrt{2}}{2}", r"\sqrt{2}/2"),
         ("(x+1)^2", "x^2+2x+1"), (r"2\pi", r"\pi \cdot 2")]
WRONG = [("0.5", "1/3"), ("3", "4"), (r"\frac{1}{2}", "2"), ("1,001", "1000"), ("x+1", "x-1"), (r"\pi", "3.14159"),
         ("", "1"), ("7", "")]
GARBAGE = [(None, "1"), ("1", None), (object(), 5), (r"\frac{", "}}}"), ("1e99999999", "1"), ("(" * 300, "1"),
           ("x" * 10_000, "x"), (b"1", "1"), ([1], "1")]


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


# ---- math_equal / extract_boxed ------------------------------------------------------------------

def test_math_equal_accepts_equivalent_and_rejects_wrong():
    for p, g in EQUAL:
        assert data.math_equal(p, g), (p, g)
    for p, g in WRONG:
        assert not data.math_equal(p, g), (p, g)


def test_math_equal_never_raises_on_garbage():
    for p, g in GARBAGE:
        assert data.math_equal(p, g) is False


def test_math_equal_from_a_worker_thread():
    data._verified.cache_clear()
    out = {}

    def work():
        out["eq"] = [data.math_equal(p, g) for p, g in EQUAL]
        out["wrong"] = [data.math_equal(p, g) for p, g in WRONG + GARBAGE]
    t = threading.Thread(target=work)
    t.start()
    t.join(120)
    assert out["eq"] == [True] * len(EQUAL) and not any(out["wrong"])
    # an overrunning call is answered False and its helper process replaced, not waited for
    assert data._VERIFIER.equal("x+1", "1+x", limit=1e-4) is False
    assert data._VERIFIER.proc is None
    assert data._VERIFIER.equal("x+1", "1+x") is True


def test_extract_boxed():
    assert data.extract_boxed(r"so \boxed{1} then \boxed{\frac{a}{b^{2}}}.") == r"\frac{a}{b^{2}}"
    assert data.extract_boxed(r"\boxed{\{1, 2\}}") == r"\{1, 2\}"
    assert data.extract_boxed(r"answer: \boxed 5$") == "5"
    assert data.extract_boxed(r"\fbox{x}") == "x"
    for bad in ["no box", r"\boxed{unclosed", r"\boxed", None, 3]:
        assert data.extract_boxed(bad) is None


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
