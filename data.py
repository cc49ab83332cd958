"""Data for the math and code tasks: loaders (Hugging Face hub sets, shipped offline sets, local files)
and running a program on a problem's tests (run_tests). Math answer checking lives in mathcheck.py
(math_equal, extract_boxed are re-exported here).

load_math(split, data) -> [{"problem", "answer", "source"}], split "train" | "val" | "test":
    data=None       the paper's sets: train/val Polaris-53K (val = every 100th record), test AIME24 +
                    AIME25 + OlympiadBench OE_TO_maths_en_COMP ("source" tells them apart)
    a MATH_HUB name one of those sets alone (evaluation sets only serve "test")
    "offline"       data/math_offline.jsonl: lines 0-349 train, 350-399 val, 400-499 test
    a path          a JSONL or Parquet file with problem/answer fields (one set: every split gets all, and
                    val/test warn that they are the training problems)
    "split:" + path the same file split by content hash like the games and arith: 80% train, 10% val, 10% test
load_code(split, data) -> [{"name", "problem", "kind", "tests", "reference", "entry_point"} (+ "setup")]:
    data=None       train/val: CodeContests train/valid; test: LiveCodeBench release_v{LCB_RELEASE}
    a CODE_HUB name one of those sets, or APPS (train/test)
    "humaneval"     the 164 HumanEval problems, test split only (an evaluation set never feeds training:
                    --data offline splits it by task number)
    "offline"       train: data/code_stdin.jsonl + HumanEval/n with n % 5 >= 2; val n % 5 == 1; test n % 5 == 0
    a path          a JSONL of records in the normalised format (every split gets all; "split:" + path as above)
Loads are cached: each call returns the same list, treat it as read-only. A hub set that cannot be loaded
raises RuntimeError saying what to do (never a silent fallback). A malformed record (a missing answer,
no tests, a problem that is not a string, a field over MAX_*_CHARS) is skipped and counted in a warning;
when half a set's records or more are malformed, a one-line ValueError names the set and its first bad one.

Tests of kind "stdin" are {"input", "output"}: the program gets the input only, and its output is
compared here, token-wise (floats to 1e-6). Tests of kind "function" are Python statements asserting on
the entry point; each runs in a trusted judge (judge.py) that forks the program into a process of its own
and calls it over pipes, so the program never holds the expected values and cannot patch the check or
forge the verdict. Every test is one sandbox run; model-written code runs nowhere else.

    python -m pytest -q test_data.py
"""
import ast
import base64
import gzip
import io
import json
import math
import os
import pickle
import secrets
import warnings
import zlib
from dataclasses import dataclass, field
from functools import lru_cache

import sandbox
from mathcheck import MAX_ANSWER, extract_boxed, math_equal  # noqa: F401  (callers use data.math_equal)
from task import split_of

HERE = os.path.dirname(os.path.abspath(__file__))
DATA_DIR = os.path.join(HERE, "data")
SPLITS = ("train", "val", "test")
OFFLINE_MATH = {"train": range(0, 350), "val": range(350, 400), "test": range(400, 500)}
HUMANEVAL_SPLIT = {0: "test", 1: "val"}  # HumanEval/n by n % 5; the rest is train
LCB_RELEASE = 5  # LiveCodeBench release_v5: test.jsonl ... test5.jsonl (880 problems)
MAX_OUT_BYTES = 16 << 20  # stdout kept of one test's run at most, however long its expected output
# a record with a longer field is skipped: it could only waste a prompt or a sandbox run
MAX_PROBLEM_CHARS = 100_000  # a problem statement (~25k tokens)
MAX_TEST_CHARS = MAX_OUT_BYTES // 4  # one test's input, expected output or statement (run_tests keeps 2x + 64 KiB)


def _check_split(split):
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose from {', '.join(SPLITS)}")


def _need(value, what, where):
    """Non-empty string for a required field, else ValueError naming the dataset and record."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: missing or empty {what!r}")
    return value.strip()


def _text(value, what, where):
    """A required statement: a non-empty string (a number or a list is not a problem)."""
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{where}: {what!r} must be a string, not {type(value).__name__}")
    return _need(value, what, where)


def _fits(rec, where):
    """ValueError when one of rec's fields is absurdly long."""
    sizes = [("problem", len(rec["problem"]), MAX_PROBLEM_CHARS), ("answer", len(rec.get("answer") or ""), MAX_ANSWER)]
    sizes += [(f"test {j}", max(map(len, t.values()), default=0) if isinstance(t, dict) else len(t), MAX_TEST_CHARS)
              for j, t in enumerate(rec.get("tests") or [])]
    for what, n, most in sizes:
        if n > most:
            raise ValueError(f"{where}: {what} is {n:,} characters long (at most {most:,})")


def _usable(name, rows, norm):
    """{row index: norm(row)} of a set's rows, read one by one. A malformed row (norm raises: a missing
    field, a wrong type, an absurd length) is skipped and counted in a warning, so a few bad rows never
    stop a run; when half the rows or more are malformed the set itself is wrong (another schema, the
    wrong file), and a one-line ValueError names its first bad row. norm may return None for a problem
    that cannot be tested here: skipped and counted too."""
    out, bad, untestable, n = {}, [], 0, 0
    for i, row in enumerate(rows):
        n, where = n + 1, f"{name} record {i}"
        try:
            if not isinstance(row, dict):
                raise ValueError(f"{where}: not a JSON object")
            rec = norm(row, where)
            if rec is not None:
                _fits(rec, where)
        except Exception as e:  # bad JSON inside a field, a wrong type, ...: say which record
            why = str(e) if isinstance(e, ValueError) and str(e).startswith(where) else f"{where}: malformed ({type(e).__name__}: {e})"
            bad.append(" ".join(why.split())[:300])
            continue
        if rec is None:
            untestable += 1
        else:
            out[i] = rec
    if n == 0:
        raise ValueError(f"{name}: no records")
    if bad and (2 * len(bad) >= n or not out):
        raise ValueError(bad[0])
    if bad:
        warnings.warn(f"{name}: skipped {len(bad)} of {n} malformed records (the first: {bad[0]})")
    if untestable:
        warnings.warn(f"{name}: skipped {untestable} of {n} problems that cannot be tested here (no tests, or file I/O)")
    if not out:
        raise ValueError(f"{name}: none of its {n} problems can be tested here")
    return out


def _read_records(path):
    """Rows of a local JSONL or Parquet file."""
    if not os.path.exists(path):
        raise ValueError(f"data={path!r}: no such file (expected 'offline', a hub name or a JSONL/Parquet path)")
    if path.endswith(".parquet"):
        try:
            import pyarrow.parquet as pq
        except ImportError as e:
            raise RuntimeError(f"{path}: reading Parquet needs pyarrow (pip install pyarrow)") from e
        return pq.read_table(path).to_pylist()
    opener = gzip.open if path.endswith(".gz") else open
    rows = []
    with opener(path, "rt", encoding="utf-8") as f:
        for i, line in enumerate(f):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}: line {i + 1} is not valid JSON ({e})") from e
    return rows


def _from_hub(name, norm, config=None, split="train", files=None, columns=None):
    """Normalised records of a hub set, row by row (CodeContests holds GBs of tests; never list() it raw)."""
    try:
        import datasets
    except ImportError as e:
        raise RuntimeError(f"{name}: loading it from the Hugging Face hub needs the `datasets` package "
                           f"(pip install datasets), or pass data='offline' or a local file") from e
    try:
        if files:  # sets kept as raw JSONL on the hub (their loading scripts no longer run in datasets>=4)
            ds = datasets.load_dataset("json", data_files=[f"hf://datasets/{name}/{f}" for f in files], split="train")
        else:
            ds = datasets.load_dataset(name, config, split=split)
        if columns:
            ds = ds.select_columns([c for c in columns if c in ds.column_names])
    except Exception as e:
        raise RuntimeError(f"{name}: could not load it from the Hugging Face hub "
                           f"({type(e).__name__}: {e}); check network access, or pass data='offline' or a local file") from e
    return _usable(name, ds, norm)


@lru_cache(maxsize=None)
def _local_file(path, kind, source=None):
    """{row index: record} of a local file of math or code records, read and checked once."""
    # a record's own `source` (its benchmark, reported apart: rollout.benchmark) wins over the file's name
    norm = (lambda r, w: _math_rec(r.get("problem"), r.get("answer"), w, str(r.get("source") or source or path))) \
        if kind == "math" else _code_rec
    return _usable(path, _read_records(path), norm)


def _local(data, split, kind):
    """A local file's records for `split`. FILE: the file is one set, every split gets all of it (an
    evaluation file is evaluated whole), and a held-out split says so, since a run that trained on the
    file would measure training problems. split:FILE: the records whose content hash names `split`,
    with the games' and arith's shares (task.split_of): held out by the problem text, whatever the row order."""
    data = os.fspath(data)
    by_hash = data.startswith("split:")
    path = data[len("split:"):] if by_hash else data
    recs = list(_local_file(path, kind).values())
    if by_hash:
        got = [r for r in recs if split_of(("data", " ".join(r["problem"].split()))) == split]
        if not got:  # (a task would take problem i of 0 rows; a count of 0 reads as "unlimited")
            raise ValueError(f"{data}: the {split} split is empty (none of the file's {len(recs)} records hashes to "
                             "it: ~80% go to train, 10% each to val and test); give a larger file, or the file itself")
        return got
    if split != "train":
        warnings.warn(f"{path}: a local file is one set (train, val and test are all of it): a run that trains "
                      f"on it is evaluated on its own training problems; data='split:{path}' holds out 10% val "
                      "and 10% test by content hash")
    return recs


# ---- math ----------------------------------------------------------------------------------------

def _math_rec(problem, answer, where, source):
    return {"problem": _text(problem, "problem", where), "answer": _need(answer, "answer", where), "source": source}


def _olympiad_answer(final_answer, where):
    # final_answer is a list of LaTeX strings such as ["$\frac{1}{2}$"]; several when is_multiple_answer
    if not isinstance(final_answer, (list, tuple)) or not final_answer:
        raise ValueError(f"{where}: missing or empty 'final_answer'")
    return ", ".join(_need(a, "final_answer", where).strip("$ ") for a in final_answer)


MATH_HUB = {  # name: (config, hub split, our splits, normaliser); columns checked against the dataset cards
    "POLARIS-Project/Polaris-Dataset-53K": (None, "train", ("train", "val"),
                                            lambda r, w: _math_rec(r.get("problem"), r.get("answer"), w, "polaris")),
    "Maxwell-Jia/AIME_2024": (None, "train", ("test",),
                              lambda r, w: _math_rec(r.get("Problem"), r.get("Answer"), w, "aime24")),
    "yentinglin/aime_2025": (None, "train", ("test",),
                             lambda r, w: _math_rec(r.get("problem"), r.get("answer"), w, "aime25")),
    "Hothan/OlympiadBench": ("OE_TO_maths_en_COMP", "train", ("test",),  # context: shared text of a problem group
                             lambda r, w: _math_rec("\n\n".join(x for x in (r.get("context"), r.get("question")) if x),
                                                    _olympiad_answer(r.get("final_answer"), w), w, "olympiadbench")),
}


def _math_hub(name, split):
    config, hub_split, ours, norm = MATH_HUB[name]
    if split not in ours:
        raise ValueError(f"{name} serves split(s) {', '.join(ours)}, not {split!r}")
    rows = _from_hub(name, norm, config, hub_split)
    if ours == ("train", "val"):  # no val split of its own: every 100th record is held out (skipped ones too)
        return [r for i, r in rows.items() if (i % 100 == 99) == (split == "val")]
    return list(rows.values())


@lru_cache(maxsize=None)
def load_math(split, data=None):
    _check_split(split)
    if data is None:
        names = [n for n, v in MATH_HUB.items() if split in v[2]]
        return [r for n in names for r in _math_hub(n, split)]
    if data in MATH_HUB:
        return _math_hub(data, split)
    if data == "offline":
        recs = _local_file(os.path.join(DATA_DIR, "math_offline.jsonl"), "math", "offline")
        return [recs[i] for i in OFFLINE_MATH[split] if i in recs]
    return _local(data, split, "math")


# ---- code ----------------------------------------------------------------------------------------

PRELUDE = ("from typing import *\nimport collections, heapq, bisect, itertools, functools, math, string, re, sys\n"
           "from collections import *\nfrom heapq import *\nfrom bisect import *\nfrom itertools import *\n"
           "from functools import *\nfrom math import *\nfrom builtins import *\nsys.setrecursionlimit(50000)\n")
# The judge's helpers, defined after the problem's setup, in the judge process (never in the program's):
# _eq compares the plain values the program's replies decode to; the JSON round trip turns tuples into
# lists and int keys into strings (the form the expected values were stored in).
CHECK_HELPERS = """import json as _json
def _eq(got, expected, unwrap=False):
    try:
        got = _json.loads(_json.dumps(got))
    except (TypeError, ValueError):
        return False
    # APPS stores many return values wrapped in a one-element list
    return got == expected or (unwrap and isinstance(expected, list) and len(expected) > 0 and got == expected[0])
"""

# The judge of a function test is judge.py (its docstring: the threat and the design), run as a script.
with open(os.path.join(HERE, "judge.py")) as _f:
    _JUDGE = _f.read()


def _lit(v):
    """Python source for a JSON value (json.loads text for inf/nan, which have no literal)."""
    try:
        json.dumps(v, allow_nan=False)
        return repr(v)
    except ValueError:
        return f"_json.loads({json.dumps(v)!r})"


def _stdin_tests(pairs):
    seen, tests = set(), []
    for i, o in pairs:  # duplicates of one test add nothing; every distinct test is kept
        i, o = ("\n".join(map(str, x)) if isinstance(x, list) else str(x) for x in (i, o))
        if (i, o) not in seen:
            seen.add((i, o))
            tests.append({"input": i, "output": o})
    return tests


def _with_starter(text, starter):
    return text.strip() + (f"\n\nStarter code:\n```python\n{starter.rstrip()}\n```" if starter and starter.strip() else "")


def _code_contests(row, where):
    if row.get("input_file") or row.get("output_file"):  # file-based I/O: not a stdin/stdout problem
        return None
    pairs = []
    for key in ("public_tests", "private_tests", "generated_tests"):
        t = row.get(key) or {}
        pairs += zip(t.get("input") or [], t.get("output") or [])
    sols = row.get("solutions") or {}
    ref = next((s for lang, s in zip(sols.get("language") or [], sols.get("solution") or []) if lang == 3), None)  # 3 = PYTHON3
    tests = _stdin_tests(pairs)
    if not tests:
        return None
    return {"name": row.get("name") or where, "problem": _text(row.get("description"), "description", where),
            "kind": "stdin", "tests": tests, "reference": ref, "entry_point": None}


def _apps(row, where):
    spec = json.loads(row["input_output"]) if row.get("input_output") else {}
    sols = json.loads(row["solutions"]) if row.get("solutions") else []
    ins, outs, fn = spec.get("inputs") or [], spec.get("outputs") or [], spec.get("fn_name")
    ins = [a if isinstance(a, list) or not fn else [a] for a in ins]  # call-based: one argument list per test
    if not ins or len(ins) != len(outs):
        return None
    starter = row.get("starter_code") or ""
    rec = {"name": f"apps/{row.get('problem_id', where)}", "problem": _with_starter(_text(row.get("question"), "question", where), starter),
           "reference": sols[0] if sols else None, "entry_point": fn}
    if not fn:
        return {**rec, "kind": "stdin", "tests": _stdin_tests(zip(ins, outs))}
    call = f"Solution().{fn}" if "class Solution" in starter else fn
    tests = [f"assert _eq({call}({', '.join(map(_lit, a))}), {_lit(o)}, unwrap=True)" for a, o in zip(ins, outs)]
    return {**rec, "kind": "function", "tests": tests, "setup": PRELUDE}


class _StrOnly(pickle.Unpickler):
    def find_class(self, module, name):  # a pickled str needs no class: refuse anything that would run code
        raise pickle.UnpicklingError(f"refusing {module}.{name}")


def _lcb_private(blob):
    """LiveCodeBench private tests: JSON, or base64(zlib(pickle(JSON string)))."""
    try:
        return json.loads(blob)
    except (json.JSONDecodeError, TypeError):
        return json.loads(_StrOnly(io.BytesIO(zlib.decompress(base64.b64decode(blob)))).load())


def _livecodebench(row, where):
    tests = json.loads(row.get("public_test_cases") or "[]") + _lcb_private(row.get("private_test_cases") or "[]")
    meta = row.get("metadata") or "{}"
    fn = (meta if isinstance(meta, dict) else json.loads(meta)).get("func_name")
    rec = {"name": f"lcb/{row.get('question_id', where)}", "reference": None, "entry_point": fn,
           "problem": _with_starter(_text(row.get("question_content"), "question_content", where), row.get("starter_code"))}
    if not tests:
        return None
    if not fn:
        return {**rec, "kind": "stdin", "tests": _stdin_tests((t["input"], t["output"]) for t in tests)}
    # functional (LeetCode): one JSON value per input line = one argument; the output is one JSON value
    render = lambda t: ", ".join(_lit(json.loads(a)) for a in t["input"].strip("\n").split("\n"))
    return {**rec, "kind": "function", "setup": PRELUDE,
            "tests": [f"assert _eq(Solution().{fn}({render(t)}), {_lit(json.loads(t['output']))})" for t in tests]}


CODE_HUB = {  # name: ({our split: hub split or raw files}, normaliser, columns)
    "deepmind/code_contests": ({"train": "train", "val": "valid", "test": "test"}, _code_contests,
                               ["name", "description", "public_tests", "private_tests", "generated_tests",
                                "solutions", "input_file", "output_file"]),
    "codeparrot/apps": ({"train": ["train.jsonl"], "test": ["test.jsonl"]}, _apps, None),
    "livecodebench/code_generation_lite": ({"test": ["test.jsonl"] + [f"test{k}.jsonl" for k in range(2, LCB_RELEASE + 1)]},
                                           _livecodebench, None),
}
CODE_DEFAULT = {"train": "deepmind/code_contests", "val": "deepmind/code_contests", "test": "livecodebench/code_generation_lite"}


def _humaneval(rec):
    """A HumanEval record -> function kind: each top-level statement of check() that asserts on
    `candidate` is one test (with `candidate` renamed to the entry point); the prompt and the rest are
    setup (it runs in the judge only: some of it, like HumanEval/151's odd_sum, is an expected value).
    "header" is the prompt: a program runs after it, as the standard harness runs prompt + completion, so
    a completion may use the prompt's imports (List) or be the function's body alone."""
    entry, tree = rec["entry_point"], ast.parse(rec["test"])

    class Rename(ast.NodeTransformer):
        def visit_Name(self, node):
            return ast.copy_location(ast.Name(entry, node.ctx), node) if node.id == "candidate" else node

    setup, tests = [], []
    for node in tree.body:
        if not (isinstance(node, ast.FunctionDef) and node.name == "check"):
            setup.append(ast.unparse(node))
            continue
        for stmt in node.body:
            asserts = any(isinstance(n, ast.Assert) for n in ast.walk(stmt))
            uses = any(isinstance(n, ast.Name) and n.id == "candidate" for n in ast.walk(stmt))
            if asserts and uses:
                tests.append(ast.unparse(Rename().visit(stmt)))
            elif not asserts:  # `assert True` lines test nothing and are dropped
                setup.append(ast.unparse(Rename().visit(stmt)))
    # the prompt goes first: its helpers (poly, encode_cyclic, encode_shift) serve the tests from the
    # judge, not the program's own copies (a program could redefine them)
    return {"name": rec["task_id"], "problem": rec["prompt"], "kind": "function", "tests": tests,
            "reference": rec["prompt"] + rec["canonical_solution"], "entry_point": entry, "header": rec["prompt"],
            "setup": "\n".join([rec["prompt"]] + setup) + "\n"}


@lru_cache(maxsize=1)
def _humaneval_all():
    return [_humaneval(r) for r in _read_records(os.path.join(DATA_DIR, "HumanEval.jsonl.gz"))]


def _code_rec(r, where):
    """Validate a record in the normalised format (local files)."""
    if not isinstance(r, dict):
        raise ValueError(f"{where}: not a JSON object")
    kind, tests = r.get("kind"), r.get("tests")
    if kind not in ("stdin", "function"):
        raise ValueError(f"{where}: 'kind' must be 'stdin' or 'function', got {kind!r}")
    if not isinstance(tests, list) or not tests:
        raise ValueError(f"{where}: missing or empty 'tests'")
    for j, t in enumerate(tests):
        ok = (isinstance(t, dict) and isinstance(t.get("input"), str) and isinstance(t.get("output"), str)) \
            if kind == "stdin" else (isinstance(t, str) and t.strip())
        if not ok:
            raise ValueError(f"{where}: test {j} is not a valid {kind} test")
    if r.get("reference") is not None and not isinstance(r["reference"], str):
        raise ValueError(f"{where}: 'reference' must be a string or null")
    return {**r, "name": str(r.get("name") or where), "problem": _text(r.get("problem"), "problem", where),
            "reference": r.get("reference"), "setup": r.get("setup") or "",
            "entry_point": _need(r.get("entry_point"), "entry_point", where) if kind == "function" else None}


@lru_cache(maxsize=None)
def load_code(split, data=None):
    _check_split(split)
    if data is None:
        data = CODE_DEFAULT[split]
    if data in CODE_HUB:
        splits, norm, columns = CODE_HUB[data]
        if split not in splits:
            raise ValueError(f"{data} serves split(s) {', '.join(splits)}, not {split!r}")
        src = splits[split]
        return list(_from_hub(data, norm, split=src if isinstance(src, str) else "train",
                              files=None if isinstance(src, str) else src, columns=columns).values())
    if data == "humaneval":
        if split != "test":
            raise ValueError(f"humaneval serves split(s) test, not {split!r} (it is an evaluation set): train on "
                             "--data offline, which splits HumanEval by task number")
        return _humaneval_all()
    if data == "offline":
        he = [p for p in _humaneval_all() if HUMANEVAL_SPLIT.get(int(p["name"].split("/")[1]) % 5, "train") == split]
        return (load_code("train", os.path.join(DATA_DIR, "code_stdin.jsonl")) if split == "train" else []) + he
    return _local(data, split, "code")


@dataclass
class Report:
    passed: int
    total: int
    failures: list = field(default_factory=list)  # at most 3 short readable strings

    @property
    def ok(self):
        return self.total > 0 and self.passed == self.total


def _short(s, n=60):
    s = repr(s) if isinstance(s, str) else repr(str(s))
    return s if len(s) <= n else s[:n - 4] + "...'"


def _ends(s, n):
    """s in at most n characters, its head and its end (a test's expected value is at its end)."""
    return s if len(s) <= n else s[:n // 2 - 2] + " ... " + s[-(n - n // 2 - 3):]


def _same_output(got, expected):
    a, b = got.split(), expected.split()
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x != y:
            try:  # a float token may differ in its last digits
                if not (("." in y or "e" in y.lower()) and math.isclose(float(x), float(y), rel_tol=1e-6, abs_tol=1e-6)):
                    return False
            except ValueError:
                return False
    return True


def _first_difference(got, expected):
    """(line number, expected line, got line) of the first non-blank line where the outputs differ, when
    their first lines agree (a long output's head would show nothing); else None."""
    a, b = ([ln for ln in s.splitlines() if ln.strip()] for s in (got, expected))
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if not _same_output(x, y)), min(len(a), len(b)))
    end = "(end of output)"
    return (i + 1, b[i] if i < len(b) else end, a[i] if i < len(a) else end) if i > 0 else None


def _last_line(text):
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else "no output"


def run_tests(program, problem, tests=None, timeout=5.0, first_failure=False):
    """Run `program` on `problem`'s tests (all of them unless `tests` is given), one sandbox run per test,
    in parallel. Never raises for anything the program or a malformed test does. stdin tests: the
    program gets the input only; its output is compared here. function tests: see judge.py.
    first_failure: only pass/fail is wanted: tests after the first failing one (in order) are not run
    and count as failed; `passed` is then the passing prefix (the same whatever the timing)."""
    tests = list(problem["tests"] if tests is None else tests)
    if not isinstance(program, str) or not program.strip():
        return Report(0, len(tests), ["empty program"] if tests else [])
    kind, nonce = problem.get("kind", "stdin"), secrets.token_hex(8)
    out_bytes = sandbox.MAX_OUTPUT  # a judge's verdict is one short line
    if kind == "stdin":
        jobs = [(program, str(t.get("input", "")) if isinstance(t, dict) else "") for t in tests]
        expected = [str(t.get("output", "")).encode() if isinstance(t, dict) else b"" for t in tests]
        # room for a right answer spaced differently (the comparison is token-wise); the sandbox keeps
        # 64 KiB unless asked, and a cut output can never match
        out_bytes = min(MAX_OUT_BYTES, 2 * max(map(len, expected), default=0) + sandbox.MAX_OUTPUT)
    else:
        setup, entry = problem.get("setup") or "", problem.get("entry_point")
        program = (problem.get("header") or "") + program  # HumanEval: prompt + completion (see _humaneval)
        judge = (f"PROGRAM = {program!r}\nENTRY = {entry if isinstance(entry, str) else None!r}\n"
                 f"PRELUDE = {PRELUDE if setup.startswith(PRELUDE) else ''!r}\n{_JUDGE}")
        # the secrets travel on stdin, read by the judge after it forked the program's process
        jobs = [(judge, json.dumps({"nonce": nonce, "setup": f"{setup}\n{CHECK_HELPERS}", "test": str(t)})) for t in tests]

    def verdict(t, r):
        """(passed, why not) of one test's run."""
        if kind == "stdin":
            exp = str(t.get("output", "")) if isinstance(t, dict) else ""
            ok = not r.timed_out and not r.truncated and r.returncode == 0 and _same_output(r.stdout, exp)
            diff = None if ok or r.truncated or r.returncode else _first_difference(r.stdout, exp)
            what = f"input: {_short(t.get('input', '') if isinstance(t, dict) else t)} "
            if r.truncated:  # it printed more than a right answer needs, whether or not it also ran out of time
                return False, f"{what}output over {out_bytes:,} bytes"[:200]
            what += f"line {diff[0]}: " if diff else f"expected: {_short(exp)} "
            why = (f"expected {_short(diff[1])} got: {_short(diff[2])}" if diff else
                   f"got: {_short(r.stdout)}" if r.returncode == 0 else f"error: {_short(_last_line(r.stderr), 80)}")
        else:  # only the judge's last line, with this run's nonce, is a verdict
            last = (r.stdout.splitlines() or [""])[-1]
            ok = not r.timed_out and r.returncode == 0 and last == f"{nonce} PASS"
            what = f"{_ends(repr(str(t))[1:-1], 100)} -> "  # one line, as before
            why = (_short(last[len(nonce) + 6:], 150)[1:-1] if last.startswith(f"{nonce} FAIL ") else
                   f"no verdict (exit status {r.returncode}: {_short(_last_line(r.stderr), 80)[1:-1]})")
        return ok, (what + (f"timed out ({timeout:g} s of CPU, or stalled)" if r.timed_out else why))[:200]

    # a program that blocked or made almost no progress (its run stalled: busy < sandbox.STALL of `timeout` s)
    # is not run on later tests: each would hold a slot ~timeout s
    stop = lambda i, r: r.stalled or first_failure and not verdict(tests[i], r)[0]
    results = sandbox.run_many(jobs, timeout=timeout, stop=stop, out_bytes=out_bytes)
    passed, failures = 0, []
    for t, r in zip(tests, results):
        if r is None:  # not run: the result was decided before it
            break
        ok, why = verdict(t, r)
        passed += ok
        if not ok and len(failures) < 3:
            failures.append(why)
    return Report(passed, len(tests), failures)
