"""math: a tool agent writes Python that prints the answer (run in the sandbox); the reasoner answers in
\\boxed{}. Problems come from data.py's loaders (index wraps around), or with `--data arith` from arith.py's
procedural word problems (the CPU miniature, `--preset cpu-demo-math`). `--workflow mas3` adds a third
agent between them: a checker that reads the tool's program and what it printed and says ok or object.

    python -m pytest -q test_envs.py test_three.py
"""
import copy
import re

import arith
from task import DATA_OPTION, Task, closed_code, extract_code, run_program

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
    Single-agent workflow: the reasoner alone, one answer.

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
    ROLES = {"mas": ("tool", "reasoner"), "single": ("reasoner",), "mas3": ("tool", "checker", "reasoner")}
    OPTIONS = {**Task.OPTIONS, **DATA_OPTION,  # mas3 listed last: the errors' "'mas' or 'single'" reads as before
               "workflow": {**Task.OPTIONS["workflow"], "choices": ("mas", "single", "mas3"),
                            "help": "mas (every role), single (one agent does the whole job) or, math only, mas3 "
                                    "(tool, checker, reasoner)"}}

    def __init__(self, split="train", index=0, **options):
        import data as D  # lazily: data.py imports the sandbox
        super().__init__(split, index, **options)
        if self.options["data"] == "arith":  # procedural (arith.py): one problem per index, no wrap-around
            self.record = arith.problem(split, index)
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
        return None if data == "arith" else len(D.load_math(split, data))

    def render(self, role):
        if role == "tool":
            ask = "Write a Python program that prints only the final answer. Reply with the program only."
        elif role == "checker":
            ask = "Check the tool's program and what it printed. Reply ok if it answers the problem, else object."
        else:
            ask = "Solve the problem. Put the final answer in \\boxed{}."
        text = f"Math, turn {self.turn + 1}/{self.max_turns}. {ask}\nProblem: {self.problem}\n"
        checker = "checker" in self.roles
        for t, (ta, ra, v) in enumerate(self.history, 1):
            said = f"checker said {v or '(nothing)'}; " if checker else ""
            text += f"Turn {t}: tool printed {ta or '(nothing)'}; {said}reasoner answered {ra or '(nothing)'}\n"
        if role == "checker":
            text += f"Tool program:\n```python\n{self.tool_program or ''}\n```\n"
        if role != "tool" and "tool" in self.roles:
            text += f"Tool program printed: {self.tool_answer or '(nothing)'}\n"
        if role == "reasoner" and checker:
            text += f"Checker said: {self.checked or '(nothing)'}\n"
        return [{"role": "user", "content": text}]

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
        elif role == "checker":
            ans = self.checked = verdict(text)
            right = ans is not None and ans == self.true_verdict()
        else:
            ans = D.extract_boxed(text) if isinstance(text, str) else None
            right = self.success = self.correct(ans)
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
        return c
