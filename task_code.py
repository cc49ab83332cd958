"""code: a coder writes a program (stdin/stdout, or the function a problem names), a unit-tester writes
tests. Problems come from data.py's loaders, or with `--data funcs` from funcs.py's procedural short
functions (index wraps around); tests run in the sandbox.

    python -m pytest -q test_envs.py
"""
import ast
import copy
import functools
import random
import re

import funcs
from task import DATA_OPTION, Task, closed_code, extract_code


SOLUTION = ast.dump(ast.parse("Solution()", mode="eval").body)


def canon(value):
    """A literal as `==` sees it, hashable and the same however it is spelt: True is 1, 6.0 is 6, a dict's
    items and a set's members in any order (a test expecting either pins the same outputs), recursively; a
    tuple stays apart from a list (they are never ==)."""
    if isinstance(value, bool) or isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 53:
        return int(value)
    if isinstance(value, complex) and not value.imag:
        return canon(value.real)
    if isinstance(value, (list, tuple)):
        return type(value).__name__, tuple(canon(v) for v in value)
    if isinstance(value, dict):
        return "dict", tuple(sorted(((canon(k), canon(v)) for k, v in value.items()), key=repr))
    if isinstance(value, (set, frozenset)):
        return "set", tuple(sorted((canon(v) for v in value), key=repr))
    return value


def pins(test, entry_point=None):
    """What a test pins, the same however it is spelt: a function test must be `assert ENTRY(literals) ==
    literal` (the sides either way round), else None: anything else can hold for every program (`f(x) ==
    f(x)`, `... or True`, a computed or unequal expectation) and would pay the tester for testing nothing.
    The key: ("call", the callee's syntax tree, the arguments and keyword arguments and the expected value
    as == sees them (canon)); `bind` puts keywords in their places. A stdin test: its input and output,
    whitespace inside a line aside."""
    if isinstance(test, dict):
        lines = str(test.get("input", "")).strip().splitlines()
        return "\n".join(" ".join(ln.split()) for ln in lines), " ".join(str(test.get("output", "")).split())
    try:
        body = ast.parse(test).body
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError):
        return None
    if len(body) != 1 or not isinstance(body[0], ast.Assert) or body[0].msg is not None:
        return None
    t = body[0].test
    if not (isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.Eq)):
        return None
    entry = lambda f: (isinstance(f, ast.Name) and f.id == entry_point or  # f(...), or Solution().f(...) (LeetCode)
                       isinstance(f, ast.Attribute) and f.attr == entry_point and ast.dump(f.value) == SOLUTION)
    for call, want in ((t.left, t.comparators[0]), (t.comparators[0], t.left)):
        if isinstance(call, ast.Call) and entry(call.func):
            if not all(k.arg for k in call.keywords):  # (no **mapping)
                return None
            try:
                args = tuple(canon(ast.literal_eval(x)) for x in call.args)
                kw = tuple(sorted((k.arg, canon(ast.literal_eval(k.value))) for k in call.keywords))
                return "call", ast.dump(call.func), args, kw, canon(ast.literal_eval(want))
            except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
                return None
    return None


@functools.lru_cache(maxsize=4096)
def params(reference, entry_point):
    """The entry point's parameters in the reference solution: (names in order, {name: canon(default)} for
    literal defaults), a method's `self` left out; None where it cannot be read."""
    try:
        defs = [(n, c) for c in ast.walk(ast.parse(reference or "")) for n in ast.iter_child_nodes(c)
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == entry_point]
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if not defs:
        return None
    fn, parent = defs[0]
    a = fn.args
    names = [x.arg for x in (*a.posonlyargs, *a.args)][1 if isinstance(parent, ast.ClassDef) else 0:]
    defaults = {}
    for name, d in zip(names[len(names) - len(a.defaults):], a.defaults):
        try:
            defaults[name] = canon(ast.literal_eval(d))
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            pass
    return tuple(names), defaults


def bind(key, params):
    """A function test's key as the call binds to `params`: keyword arguments in their positions, defaults
    filled in (`f(xs=[1])`, `f([1], 2)` and `f([1])` with `k=2` are one test). Unchanged where they do not bind."""
    if not params or not key or key[0] != "call":
        return key
    _, callee, args, kw, want = key
    (names, defaults), kw, args = params, dict(kw), list(args)
    for name in names[len(args):]:
        if name in kw:
            args.append(kw.pop(name))
        elif name in defaults:
            args.append(defaults[name])
        else:
            return key
    return "call", callee, tuple(args), tuple(sorted(kw.items())), want


# a line that opens an example's input or output in a stdin statement: CodeContests' `Input`, AtCoder's
# `Sample Input 1`, APPS' `-----Input-----` and `Input`, CodeChef's `Input:`
IO_LABEL = re.compile(r"^[-\s]*(?:sample\s+|example\s+)?(input|output)(?:\s*\d+)?\s*:?[-\s]*$", re.I)


@functools.lru_cache(maxsize=4096)
def shown_io(problem):
    """The keys (pins) of the stdin examples a statement shows: each block under an input label with the
    block under the output label right after it. A block ends at the next label or a `-----` line; as it may
    run on into prose (AtCoder's explanation after a sample, a `Note`), its first paragraph, its first two,
    ... are candidates (a key that no test matches costs nothing; a section heading's prose is one such)."""
    blocks, cur = [], None
    for line in str(problem).splitlines():
        if m := IO_LABEL.match(line):
            cur = (m.group(1).lower(), [])
            blocks.append(cur)
        elif line.strip().startswith("-----"):
            cur = None
        elif cur:
            cur[1].append(line.rstrip())

    def paragraphs(block):  # its first 1, 2, 3 and 4 paragraphs
        parts = re.split(r"\n\s*\n", "\n".join(block).strip("\n"))
        return ["\n\n".join(parts[:k]) for k in range(1, min(len(parts), 4) + 1)]
    return frozenset(pins({"input": i, "output": o}) for (a, x), (b, y) in zip(blocks, blocks[1:])
                     if (a, b) == ("input", "output") for i in paragraphs(x) for o in paragraphs(y))


# between an example's call and its value in a statement: `==`, HumanEval's arrows and words, funcs' `==`
ARROW = re.compile(r"\s*(?:#\s*)?(?:==>|==|=>|->|\u279e|\u2192|=|should return|returns|return)\s*")


@functools.lru_cache(maxsize=4096)
def shown_tests(problem, entry_point):
    """The keys (pins) of the function tests a problem statement shows: a tester that copies one has
    written nothing new. Read as HumanEval's docstrings write them too: a doctest (`>>> f(x)` then `y` on
    the next line) or `f(x) SEP y` anywhere in a line, SEP `==`, `==>`, `=>`, `->`, an arrow, `=`,
    `returns`, `should return` (`true`/`false` as Python's); the value is the longest literal that follows
    (a trailing `.` or comment dropped). And LeetCode's `Input: a = 1, b = [2]` / `Output: 3` lines, as
    `f(1, [2]) == 3` and `Solution().f(1, [2]) == 3`."""
    keys, lines = set(), str(problem).splitlines()
    call_at = re.compile(rf"(?<![\w.]){re.escape(entry_point)}\(")
    for i, line in enumerate(lines):
        line = line.strip()
        nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if line.startswith(">>>"):  # a doctest: the value is the next line
            cands = [f"assert {line[3:].strip()} == {nxt}"] if nxt and not nxt.startswith(">>>") else []
        elif ((given := re.match(r"input\s*:\s*(.+)", line, re.I))
              and (out := re.match(r"output\s*:\s*(.+)", nxt, re.I))):
            cands = []  # LeetCode's `Input: nums = [2,7], target = 9` / `Output: [0,1]`: the arguments in order
            try:
                call = ast.parse(f"f({given.group(1)})", mode="eval").body
                args = ", ".join(ast.unparse(a) for a in (*call.args, *(k.value for k in call.keywords)))
                cands = [f"assert {f}({args}) == {out.group(1)}" for f in (entry_point, f"Solution().{entry_point}")]
            except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError, AttributeError):
                pass
        else:
            cands = [line, "assert " + line.split(":", 1)[-1].strip()]
            for m in list(call_at.finditer(line))[:20]:
                depth, end = 0, None  # the call: from the name to its balanced closing parenthesis
                for j in range(m.end() - 1, len(line)):
                    depth += {"(": 1, ")": -1}.get(line[j], 0)
                    if depth == 0:
                        end = j + 1
                        break
                arrow = ARROW.match(line, end) if end else None
                if arrow:
                    rest = line[arrow.end():][:400]  # (an example's value is short: bounded work per line)
                    cuts = [len(rest)] + [j for j in range(len(rest) - 1, 0, -1) if rest[j] in " #,;"]
                    for cut in cuts:  # the longest prefix that is a value
                        want = rest[:cut].strip().rstrip(".")
                        want = {"true": "True", "false": "False"}.get(want, want)
                        if (k := pins(f"assert {line[m.start():end]} == {want}", entry_point)) is not None:
                            keys.add(k)
                            break
        for cand in cands:
            if (k := pins(cand, entry_point)) is not None:
                keys.add(k)
    return frozenset(keys)


def parse_test(text, kind, entry_point=None):
    """A unit test from the tester's text: for stdin problems {"input", "output"} from 'Input: ...
    Output: ...'; for function problems the last `assert` line that pins an output of the entry point
    (pins). None if absent."""
    if not isinstance(text, str):
        return None
    text = re.sub(r"```[a-zA-Z]*", "", text)
    if kind == "function":
        lines = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("assert ")]
        lines = [ln for ln in lines if pins(ln, entry_point) is not None]
        return lines[-1] if lines else None
    # the first `input` label, then the first `[expected] output` after it; two searches, each linear (one
    # pattern spanning both restarted at every `input`: quadratic on a reply that repeats it)
    given = re.search(r"input\s*:?", text, flags=re.I)
    out = given and re.search(r"(?:expected\s+)?output\s*:?", text[given.end():], flags=re.I)
    if not out or not text[given.end() + out.end():].strip():
        return None
    return {"input": text[given.end():given.end() + out.start()].strip() + "\n",
            "output": text[given.end() + out.end():].strip() + "\n"}


def show_test(test):
    return test if isinstance(test, str) else f"Input:\n{test['input'].rstrip()}\nOutput:\n{test['output'].rstrip()}"


class Code(Task):
    """A coder writes a program (stdin/stdout, or the function a problem names); a unit-tester writes
    one test per turn. The coder sees its previous program and where it failed the generated tests.
    Done when the coder's program passes every generated test (or after max_turns). Success = the
    coder's final program passes ALL the problem's own tests (in training: at most --train_tests of them,
    a fixed draw per problem). Rewards: coder team = success, local = fraction of those tests passed;
    tester local = 1 if the REFERENCE solution passes its test (0 if it fails it, if the problem has no
    reference, or if the test copies an example the statement shows (shown_tests, shown_io) or a test
    already written; -1 for no test:
    for a function, a test is `assert f(literals) == literal`, see pins), team = the coder's success.
    In training the coder sees (and "done" counts) only the generated tests the reference passes.
    Held out (val/test) the coder's tests stop at the first failure: success is all that is measured there.
    Single-agent workflow: the coder alone, one program.
    Notes (Task.note; eval.py reports them): coder/first_pass (its first program passes), tester/right (a
    new test the reference passes), tester/copied (a copy of the example or an earlier test), tester/useful
    (held out, while the coder's program is wrong: a right test that program fails, i.e. one that catches
    its bug)."""
    NAME = "code"
    ROLES = {"mas": ("coder", "tester"), "single": ("coder",)}
    OPTIONS = {**Task.OPTIONS, **DATA_OPTION,
               "max_turns": {**Task.OPTIONS["max_turns"], "default": 5},  # the reference's code workflow: 5 turns
               # CodeContests lists up to hundreds of (generated) tests per problem, run for every branch
               "train_tests": dict(type=int, default=10, help="training only: a coder's program runs on at most N "
                                   "of the problem's tests (a fixed draw per problem; 0: all); val/test run all")}

    def __init__(self, split="train", index=0, **options):
        super().__init__(split, index, **options)
        rows = self.rows(split, self.options["data"])
        self.task = rows[index % len(rows)]  # shared by clones, never mutated
        cap, tests = self.options["train_tests"], self.task["tests"]
        if cap < 0:
            raise ValueError(f"train_tests must be >= 0 (0: all), got {cap}")
        # the tests success is judged on: in training a fixed draw of `cap` per problem (the same for every
        # branch and visit: a group's rewards compare), drawn rather than the first ones (CodeContests lists
        # the statement's examples first, which a program could print by rote); held out, all (None)
        self.own_tests = None
        if split == "train" and cap and len(tests) > cap:
            draw = random.Random(f"{self.task.get('name')}/{self.task['problem']}").sample(range(len(tests)), cap)
            self.own_tests = [tests[i] for i in sorted(draw)]
        self.program, self.tests, self.failures = None, [], []  # generated tests, their failures
        ep = self.task.get("entry_point")
        # the examples the statement shows, as test keys (shared by clones, never mutated)
        self.shown = shown_tests(self.task["problem"], ep) if ep else shown_io(self.task["problem"])
        self.params = params(self.task.get("reference"), ep) if ep else None  # to bind a test's keywords

    @staticmethod
    def rows(split, data):
        import data as D  # lazily: data.py imports the sandbox
        return funcs.problems(split) if data == "funcs" else D.load_code(split, data)

    @classmethod
    def count(cls, split, data=None, **options):
        return len(cls.rows(split, data))

    def render(self, role):
        kind, ep = self.task["kind"], self.task.get("entry_point")
        if role == "coder":
            ask = (f"Write the Python function {ep} (complete, with imports)." if kind == "function" else
                   "Write a Python program that reads standard input and prints the answer.")
            ask += " Reply with the code only, in a ```python block."
        else:
            ask = (f"Write ONE new test: a single line `assert {ep}(...) == ...`." if kind == "function" else
                   "Write ONE new test as 'Input:' followed by the input, then 'Output:' followed by the "
                   "expected output.")
        text = f"Code, turn {self.turn + 1}/{self.max_turns}. {ask}\nProblem:\n{self.task['problem']}\n"
        if self.program is not None:
            text += f"Current program:\n```python\n{self.program[:2000]}\n```\n"
        if role == "coder" and self.failures:
            text += "It failed these tests:\n" + "\n".join(self.failures) + "\n"
        if role == "tester" and self.tests:
            text += "Tests so far:\n" + "\n".join(show_test(t) for t in self.tests[-3:]) + "\n"
        return [{"role": "user", "content": text}]

    def act(self, role, text):
        import data as D
        if role == "coder":
            self.program = extract_code(text) if isinstance(text, str) else None
            # held out, only success is measured: stop at the first failing test (the local reward there
            # counts the passing prefix); in training every test runs, the local reward needs the count
            rep = D.run_tests(self.program or "", self.task, self.own_tests, first_failure=self.split != "train")
            self.success = rep.total > 0 and rep.passed == rep.total
            if self.turn == 0:
                self.note("coder/first_pass", self.success)
            if self.workflow == "single":
                self.end_turn(True)
            return float(self.success), rep.passed / max(1, rep.total)
        ep = self.task.get("entry_point")
        test = parse_test(text, self.task["kind"], ep)
        # a copy of the statement's example or of a test already written tests nothing new: 0, and not kept
        seen = {bind(k, self.params) for k in ({pins(t, ep) for t in self.tests} | self.shown)}
        copied = test is not None and bind(pins(test, ep), self.params) in seen
        self.note("tester/copied", copied)
        if test is None or copied:
            local = -1.0 if test is None else 0.0
        else:
            ref = self.task.get("reference")
            local = float(bool(ref) and D.run_tests(ref, self.task, [test]).passed == 1)
            # In training only tests the reference passes reach the coder's feedback and "done": a wrong
            # test would show a correct program "failures" and block "done". On val/test the episode runs
            # as deployed, where no reference exists: consulting it would leak the answer into the score.
            if local == 1.0 or self.split != "train":
                self.tests.append(test)
        self.note("tester/right", local == 1.0)  # a new test the reference passes (no test, a copy: not right)
        if self.split != "train" and not self.success:  # held out (a sandbox run more): does a right test
            # catch the coder's wrong program? (training skips it: a cost per branch, not a reward)
            self.note("tester/useful", local == 1.0 and D.run_tests(self.program or "", self.task, [test]).passed == 0)
        rep = D.run_tests(self.program or "", self.task, self.tests) if self.tests else None
        self.failures = rep.failures if rep else []
        self.end_turn(rep is not None and rep.passed == rep.total)
        return float(self.success), local

    def reference(self, role):
        if role == "coder":
            return None if not self.task.get("reference") else f"```python\n{self.task['reference']}\n```"
        return show_test(self.task["tests"][0]) if self.task["tests"] else None

    def before_cut(self, role, text):
        """The coder's program counts when its ```python block closed before the cut (a tester's cut
        line may be a cut assert: no answer)."""
        return closed_code(text) if role == "coder" else ""

    def clone(self):
        c = copy.copy(self)
        c.tests, c.failures, c.notes = list(self.tests), list(self.failures), {k: list(v) for k, v in self.notes.items()}
        return c
