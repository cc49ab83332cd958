"""math: a tool agent writes Python that prints the answer (run in the sandbox); the reasoner answers in
\\boxed{}. Problems come from data.py's loaders (index wraps around), or with `--data arith` from arith.py's
procedural word problems (the CPU miniature, `--preset cpu-demo-math`).

    python -m pytest -q test_envs.py
"""
import copy
import re

import arith
from task import DATA_OPTION, Task, closed_code, run_program


class Math(Task):
    """A tool agent writes Python that prints the answer (run in the sandbox); the reasoner answers in
    \\boxed{}, seeing the tool's output. Later turns see both agents' previous answers. Done when the
    two answers agree (or after max_turns); success = the reasoner's final answer is correct.
    Rewards: team = this role's answer is correct; local = 0, or -1 when no answer can be extracted.
    Single-agent workflow: the reasoner alone, one answer."""
    NAME = "math"
    ROLES = {"mas": ("tool", "reasoner"), "single": ("reasoner",)}
    OPTIONS = {**Task.OPTIONS, **DATA_OPTION}

    def __init__(self, split="train", index=0, **options):
        import data as D  # lazily: data.py imports the sandbox
        super().__init__(split, index, **options)
        if self.options["data"] == "arith":  # procedural (arith.py): one problem per index, no wrap-around
            self.record = arith.problem(split, index)
        else:
            rows = D.load_math(split, self.options["data"])
            self.record = rows[index % len(rows)]
        self.problem, self.answer = self.record["problem"], self.record["answer"]
        self.history = []       # (tool answer, reasoner answer) of finished turns
        self.tool_answer = None  # this turn's tool output

    @classmethod
    def count(cls, split, data=None, **options):
        import data as D
        return None if data == "arith" else len(D.load_math(split, data))

    def render(self, role):
        if role == "tool":
            ask = "Write a Python program that prints only the final answer. Reply with the program only."
        else:
            ask = "Solve the problem. Put the final answer in \\boxed{}."
        text = f"Math, turn {self.turn + 1}/{self.max_turns}. {ask}\nProblem: {self.problem}\n"
        for t, (ta, ra) in enumerate(self.history, 1):
            text += f"Turn {t}: tool printed {ta or '(nothing)'}; reasoner answered {ra or '(nothing)'}\n"
        if role == "reasoner" and "tool" in self.roles:
            text += f"Tool program printed: {self.tool_answer or '(nothing)'}\n"
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
            right = self.correct(ans)
        else:
            ans = D.extract_boxed(text) if isinstance(text, str) else None
            right = self.success = self.correct(ans)
            agree = ans is not None and self.tool_answer is not None and D.math_equal(ans, self.tool_answer)
            self.history.append((self.tool_answer, ans))
            self.tool_answer = None
            self.end_turn(agree or self.workflow == "single")
        return float(right), (-1.0 if ans is None else 0.0)

    def random_answer(self, role, rng):
        """A uniformly random integer answer below 10,000 (the table's floor): the tool prints it, the
        reasoner boxes it."""
        k = rng.randrange(10_000)
        return f"print({k})" if role == "tool" else f"\\boxed{{{k}}}"

    def reference(self, role):
        return f"```python\nprint({self.answer!r})\n```" if role == "tool" else f"\\boxed{{{self.answer}}}"

    def before_cut(self, role, text):
        """Judged when the answer was complete before the cut: the tool's program in a closed ```python
        block; the reasoner's last \\boxed{...} closed (`\\boxed 5` may be a cut number: no answer)."""
        import data as D
        if role == "tool":
            return closed_code(text)
        last = None
        for last in re.finditer(r"\\(?:boxed|fbox)\s*", text):
            pass
        closed = last is not None and text[last.end():last.end() + 1] == "{" and D.extract_boxed(text) is not None
        return text if closed else ""

    def clone(self):
        c = copy.copy(self)  # the problem text is shared; only the mutable state is copied
        c.history = list(self.history)
        return c
