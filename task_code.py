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
from concurrent.futures import ThreadPoolExecutor

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
    one test per turn. The coder sees its previous program and where it failed the kept tests (each: the
    input, the expected value, what it returned, printed or raised). Every new test the tester writes is
    kept, right or wrong (a copy is not: nothing new); done when no kept test fails the coder's program,
    none kept included (or after max_turns). Training and held out run this one workflow: see act. Success = the
    coder's final program passes ALL the problem's own tests (in training: at most --train_tests of them,
    a fixed draw per problem). Rewards: coder team = success, local = fraction of those tests passed;
    tester local = tester_reward (--tester_reward right, the default: 1 if the REFERENCE solution passes its
    test, 0 if it fails it, if the problem has no reference, or if the test copies an example the statement
    shows (shown_tests, shown_io) or a test already written; -1 for no test; discriminate: a right test is
    paid by the wrong programs it fails), team = the coder's success. For a function, a test is
    `assert f(literals) == literal` (pins).
    Held out (val/test) the coder's own tests stop at the first failure: success is all that is measured there.
    Single-agent workflow: the coder alone, one program.
    Notes (Task.note; eval.py reports them): coder/first_pass (its first program passes), tester/right (a
    new test the reference passes), tester/copied (a copy of the statement's example OR a repeat of an
    earlier test of the episode, respelt or not: pins, bind), each a share of every tester turn;
    tester/useful (a right test the coder's program fails, i.e. one that catches its bug): asked only held
    out and only on the tester turns that follow a wrong program, so its share is of those turns."""
    NAME = "code"
    ROLES = {"mas": ("coder", "tester"), "single": ("coder",)}
    OPTIONS = {**Task.OPTIONS, **DATA_OPTION,
               "max_turns": {**Task.OPTIONS["max_turns"], "default": 5},  # the reference's code workflow: 5 turns
               # CodeContests lists up to hundreds of (generated) tests per problem, run for every branch
               "train_tests": dict(type=int, default=10, help="training only: a coder's program runs on at most N "
                                   "of the problem's tests (a fixed draw per problem; 0: all); val/test run all"),
               "tester_reward": dict(default="right", choices=("right", "discriminate"),
                                     help="the tester's local reward: right (1 when the reference passes a new "
                                     "test) or discriminate (the share of wrong programs a right test fails, -0.5 "
                                     "when the reference fails it); see task_code.Code.tester_reward")}

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
        self.program, self.tests, self.failures = None, [], []  # kept tests, the program's failures of them
        self.failed = 0, 0  # (how many kept tests the program fails, of how many): failures shows at most 3
        self.siblings = None  # (how many were right, the distinct wrong programs) of this turn's coder branches
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
            (n, m), k = self.failed, len(self.failures)  # (data.run_tests reports at most 3)
            text += f"It failed {n} of {m} tests{f' (the first {k} shown)' if n > k else ''}:\n"
            text += "\n".join(self.failures) + "\n"
        if role == "tester" and self.tests:
            text += "Tests so far:\n" + "\n".join(show_test(t) for t in self.tests[-3:]) + "\n"
        return [{"role": "user", "content": text}]

    def act(self, role, text):
        import data as D
        if role == "coder":
            self.program = extract_code(text) if isinstance(text, str) else None
            self.siblings = None  # the last turn's; tree sampling gives this turn's (branched)
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
        ref, right = self.task.get("reference"), None  # right: whether the reference passes a new test
        if test is not None and not copied:
            right = bool(ref) and D.run_tests(ref, self.task, [test]).passed == 1  # for the reward and notes only
            # Kept, right or wrong, in training as held out: held out the episode runs as deployed, where no
            # reference exists (consulting it would leak the answer into the score), and training runs the
            # same episode, so the coder meets wrong tests there too: its reward (the problem's own tests)
            # then pays keeping a right program against a wrong test, not obeying every failing one.
            self.tests.append(test)
        local = self.tester_reward(test, right)
        self.note("tester/right", bool(right))  # a new test the reference passes (no test, a copy: not right)
        if self.split != "train" and not self.success:  # held out (a sandbox run more): does a right test
            # catch the coder's wrong program? (training skips it: a cost per branch, not a reward)
            self.note("tester/useful", bool(right) and D.run_tests(self.program or "", self.task, [test]).passed == 0)
        rep = D.run_tests(self.program or "", self.task, self.tests) if self.tests else None
        self.failures, self.failed = (rep.failures, (rep.total - rep.passed, rep.total)) if rep else ([], (0, 0))
        # done when no kept test fails the program, none kept (a copy, no test) included: a next turn would
        # show the coder no failure, and a rewrite with nothing to fix only redraws the program (a right one
        # can only get worse); so a copied or missing test ends the episode as a passed one does
        self.end_turn(rep is None or rep.passed == rep.total)
        return float(self.success), local

    def tester_reward(self, test, right):
        """The tester's local reward for `test` (None: no test), `right`: None for a copy (of the statement's
        example or a test already written: not run) and for no test, else whether the reference passes it.
        --tester_reward right: 1 for a right test, 0 for a copy or a test the reference fails (or with no
        reference), -1 for no test. --tester_reward discriminate pays a test by the wrong programs it fails
        while the reference passes it (as CURE, UTRL and Code-A1 do): -1 no test; -0.5 a test
        the reference fails (below every right test; still above no test: it is one); 0 a copy (what a right
        test that catches nothing earns, and no more: a copy tests nothing new, whatever it would catch);
        a right test the share of wrong_programs() it fails, in [0, 1] (0 when there are none, or with no
        reference: nothing to judge the test by). One sandbox run per wrong program, all at once."""
        if test is None:
            return -1.0
        if self.options["tester_reward"] == "right":
            return float(bool(right))
        if right is None:  # a copy
            return 0.0
        if not right:
            return -0.5 if self.task.get("reference") else 0.0
        import data as D
        wrong = self.wrong_programs()
        if not wrong:
            return 0.0
        with ThreadPoolExecutor(len(wrong)) as pool:  # the sandbox's shared queue runs them on every core
            caught = pool.map(lambda p: D.run_tests(p, self.task, [test]).passed == 0, wrong)
            return sum(caught) / len(wrong)

    def wrong_programs(self):
        """The programs a right test is paid for failing (tester_reward). The coder's wrong programs of this
        turn, distinct, where its tree branches disagree (some pass the problem's own tests, some fail them:
        branched); else (all right, all wrong, or one branch: parallel sampling, evaluation) the reference's
        near misses the record lists (funcs: one edit from right, the body one step short among them). A
        weak coder's all-wrong programs are mostly wrong everywhere (no function, a syntax error): every
        right test fails them alike. Data without near misses (every set but funcs): the wrong siblings,
        whatever the right ones, and none (a right test earns 0) with no siblings or all of them right."""
        n_right, wrong = self.siblings or (0, ())
        if wrong and n_right:
            return list(wrong)
        return list(self.task.get("near_misses") or wrong)

    def branched(self, role, branches):
        """The coder's tree branches of this turn (this one among them): for the tester's wrong_programs."""
        if role == "coder":
            wrong = [b.program for b in branches if not b.success and (b.program or "").strip()]
            self.siblings = sum(b.success for b in branches), tuple(dict.fromkeys(wrong))

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
