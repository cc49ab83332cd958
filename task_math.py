"""math: a tool agent writes Python that prints the answer (run in the sandbox); the reasoner answers in
\\boxed{}. Problems come from data.py's loaders (index wraps around), or with `--data arith` from arith.py's
procedural word problems (the CPU miniature, `--preset cpu-demo-math`). `--workflow mas3` adds a third
agent between them: a checker that reads the tool's program and what it printed and says ok or object.
`--data graded` (the real model's set, `--preset cpu-real-math`): training on arith.py's graded problems
(one operation, then two or three); held out, two benchmarks reported apart: GRADED_HELD_OUT graded
problems ("arith") and the shipped GSM-style set's lines of that split ("gsm", data/math_offline.jsonl).
`--shots 1` opens every prompt with one worked example of another problem, as a first chat exchange: a
135M model follows a shown reply's form (a ```python block of the numbers; a \boxed{} answer), rarely an
instruction's (docs/measurements.md has the base rates that chose it).

    python -m pytest -q test_envs.py test_three.py
"""
import copy
import re

import arith
from task import DATA_OPTION, Task, closed_code, extract_code, run_program

GRADED_HELD_OUT = 100  # --data graded: the arith benchmark's problems in val and test (then the GSM-style lines)
# --shots 1: the worked example, a problem of none of arith's templates, and each role's reply to it
EXAMPLE = "A farm has 12 cows. Each cow gives 9 liters of milk a day, and the farm sells 30 liters a day. " \
          "How many liters are left each day?"
EXAMPLE_PROGRAM, EXAMPLE_ANSWER = "print(12 * 9 - 30)", "78"
EXAMPLE_REPLY = {"tool": f"```python\n{EXAMPLE_PROGRAM}\n```",
                 "reasoner": "12 * 9 = 108, 108 - 30 = 78. The answer is \\boxed{78}.",
                 "with_tool": "The tool printed 78, and 12 * 9 - 30 = 78. The answer is \\boxed{78}.",
                 "checker": "The program computes 12 * 9 - 30 = 78, the liters left. ok"}
VERDICT = re.compile(r"\b(ok|object)\b")  # the checker's verdict words (whole words, any case)


def verdict(text):
    """The checker's verdict: "ok" or "object" when its text names exactly one of them; None when it names
    neither or both (a hedge says nothing, so it cannot be right whichever way the tool was)."""
    words = set(VERDICT.findall(text.lower())) if isinstance(text, str) else set()
    return words.pop() if len(words) == 1 else None


class Math(Task):
    """A tool agent writes Python that prints the answer (run in the sandbox); the reasoner answers in
    \\boxed{}, seeing the tool's output. Later turns see both agents' previous answers. Done when the
    two answers agree (or after max_turns); success = the reasoner's final answer is correct.
    Rewards: team = this role's answer is correct; local = 0, or -1 when no answer can be extracted.
    Single-agent workflow: the reasoner alone, one answer. Tool workflow (a control the paper lacks: does
    the second agent earn its samples?): the tool agent alone, what its program prints is the answer.

    Three-agent workflow (mas3): tool, checker, reasoner. The checker sees the problem, the tool's program
    and its output, and answers ok or object (`verdict`); the reasoner sees the output and the verdict.
    A turn ends the episode when the reasoner agrees with the tool and the checker did not object. Success
    is still the reasoner's final answer alone. The checker's reward, like the others', is its own answer
    judged against the truth: team = its verdict is right (ok on a right tool output; object on a wrong or
    missing one), local = 0, or -1 with no verdict (neither word, or both). The checker acts before the
    reasoner, so the turn's outcome is not known when it is scored. Why it cannot be gamed: on every state
    the honest verdict earns 1 and any other text 0 or -1, so always-ok, always-object or hedging never
    earns more than honesty, and strictly less on average once the tool is sometimes right and sometimes
    wrong (test_three.py). An objection earns nothing by itself: it only buys the team another turn."""
    NAME = "math"
    ROLES = {"mas": ("tool", "reasoner"), "single": ("reasoner",), "mas3": ("tool", "checker", "reasoner"),
             "tool": ("tool",)}
    OPTIONS = {**Task.OPTIONS, **DATA_OPTION,  # mas3, tool listed last: the errors' "'mas' or 'single'" reads as before
               "workflow": {**Task.OPTIONS["workflow"], "choices": ("mas", "single", "mas3", "tool"),
                            "help": "mas (every role), single (one agent does the whole job) or, math only, mas3 "
                                    "(tool, checker, reasoner) or tool (one agent with the tool: what its "
                                    "program prints is the answer)"},
               "shots": dict(type=int, default=0, choices=(0, 1), help="math: 1 = every prompt opens with one worked "
                             "example of another problem (a first chat exchange); 0 = the instruction alone")}

    def __init__(self, split="train", index=0, **options):
        import data as D  # lazily: data.py imports the sandbox
        super().__init__(split, index, **options)
        if self.options["data"] == "arith":  # procedural (arith.py): one problem per index, no wrap-around
            self.record = arith.problem(split, index)
        elif self.options["data"] == "graded":  # training procedural; held out, the two benchmarks in turn
            held = split != "train" and index >= GRADED_HELD_OUT
            self.record = dict(D.load_math(split, "offline")[index - GRADED_HELD_OUT], source="gsm") if held else \
                dict(arith.problem(split, index, "graded"), source="arith")
        else:
            rows = D.load_math(split, self.options["data"])
            self.record = rows[index % len(rows)]
        self.problem, self.answer = self.record["problem"], self.record["answer"]
        self.history = []       # (tool answer, reasoner answer, checker verdict) of finished turns
        self.tool_answer = None  # this turn's tool output
        self.tool_program = None  # this turn's tool program (mas3: the checker reads it)
        self.checked = None      # this turn's checker verdict (mas3)

    @classmethod
    def count(cls, split, data=None, **options):
        import data as D
        if data == "graded":
            return None if split == "train" else GRADED_HELD_OUT + len(D.load_math(split, "offline"))
        return None if data == "arith" else len(D.load_math(split, data))

    def render(self, role):
        shots = self.options["shots"]
        if role == "tool" and shots:  # the example shows the numbers written in: the instruction says so too
            ask = ("Write a Python program that prints the answer, with the problem's numbers written in it. "
                   "Reply with the code only, in a ```python block.")
        elif role == "tool":
            ask = "Write a Python program that prints only the final answer. Reply with the program only."
        elif role == "checker":
            ask = "Check the tool's program and what it printed. Reply ok if it answers the problem, else object."
        else:
            ask = "Solve the problem. Put the final answer in \\boxed{}."
        text = self._text(role, ask, self.turn + 1, self.problem, self.history, self.tool_program, self.tool_answer,
                          self.checked)
        if not shots:
            return [{"role": "user", "content": text}]
        # the same prompt about the example problem (as turn 1, nothing before it), and its reply, first
        example = self._text(role, ask, 1, EXAMPLE, [], EXAMPLE_PROGRAM, EXAMPLE_ANSWER, "ok")
        reply = EXAMPLE_REPLY["with_tool" if role == "reasoner" and "tool" in self.roles else role]
        return [{"role": "user", "content": example}, {"role": "assistant", "content": reply},
                {"role": "user", "content": text}]

    def _text(self, role, ask, turn, problem, history, program, printed, checked):
        """One prompt's text: the ask, the problem, the finished turns, and what this turn's earlier roles did."""
        text = f"Math, turn {turn}/{self.max_turns}. {ask}\nProblem: {problem}\n"
        checker = "checker" in self.roles
        for t, (ta, ra, v) in enumerate(history, 1):
            said = f"checker said {v or '(nothing)'}; " if checker else ""
            text += f"Turn {t}: tool printed {ta or '(nothing)'}; {said}reasoner answered {ra or '(nothing)'}\n"
        if role == "checker":
            text += f"Tool program:\n```python\n{program or ''}\n```\n"
        if role != "tool" and "tool" in self.roles:
            text += f"Tool program printed: {printed or '(nothing)'}\n"
        if role == "reasoner" and checker:
            text += f"Checker said: {checked or '(nothing)'}\n"
        return text

    def run_tool(self, text):
        lines = [ln.strip() for ln in (run_program(text) or "").splitlines() if ln.strip()]
        return lines[-1][:200] if lines else None

    def correct(self, ans):
        import data as D
        return ans is not None and D.math_equal(ans, self.answer)

    def act(self, role, text):
        import data as D
        if role == "tool":
            ans = self.tool_answer = self.run_tool(text)
            self.tool_program = extract_code(text)
            right = self.correct(ans)
            self.note("tool/printed", ans is not None)  # its program ran and printed a line
            self.note("tool/right", right)
            if self.workflow == "tool":  # one agent with the tool: its printed line is the team's answer
                self.success = right
                self.history.append((ans, None, None))
                self.end_turn(True)
        elif role == "checker":
            ans = self.checked = verdict(text)
            right = ans is not None and ans == self.true_verdict()
        else:
            ans = D.extract_boxed(text) if isinstance(text, str) else None
            right = self.success = self.correct(ans)
            self.note("reasoner/boxed", ans is not None)
            if "tool" in self.roles:  # did it keep a right tool output, or override a wrong (or missing) one?
                self.note("reasoner/kept" if self.correct(self.tool_answer) else "reasoner/overrode", right)
            agree = ans is not None and self.tool_answer is not None and D.math_equal(ans, self.tool_answer)
            self.history.append((self.tool_answer, ans, self.checked))
            objected = self.checked == "object"
            self.tool_answer = self.tool_program = self.checked = None
            self.end_turn((agree and not objected) or self.workflow == "single")
        return float(right), (-1.0 if ans is None else 0.0)

    def true_verdict(self):
        """The checker's right verdict on this turn's tool output: ok when it is the answer, else object."""
        return "ok" if self.correct(self.tool_answer) else "object"

    def random_answer(self, role, rng):
        """A uniformly random integer answer below 10,000 (the table's floor): the tool prints it, the
        reasoner boxes it; the checker says ok or object at random."""
        if role == "checker":
            return rng.choice(("ok", "object"))
        k = rng.randrange(10_000)
        return f"print({k})" if role == "tool" else f"\\boxed{{{k}}}"

    def reference(self, role):
        if role == "checker":
            return self.true_verdict()
        return f"```python\nprint({self.answer!r})\n```" if role == "tool" else f"\\boxed{{{self.answer}}}"

    def before_cut(self, role, text):
        """Judged when the answer was complete before the cut: the tool's program in a closed ```python
        block; the reasoner's last \\boxed{...} closed (`\\boxed 5` may be a cut number: no answer); never the
        checker's (its verdict has no visible end: cut prose may name the other word)."""
        import data as D
        if role == "tool":
            return closed_code(text)
        if role == "checker":
            return ""
        last = None
        for last in re.finditer(r"\\(?:boxed|fbox)\s*", text):
            pass
        closed = last is not None and text[last.end():last.end() + 1] == "{" and D.extract_boxed(text) is not None
        return text if closed else ""

    def clone(self):
        c = copy.copy(self)  # the problem text is shared; only the mutable state is copied
        c.history = list(self.history)
        c.notes = {k: list(v) for k, v in self.notes.items()}  # each branch counts its own (a shared dict: all K)
        return c
