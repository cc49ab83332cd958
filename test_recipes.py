"""README's "Ablations: the one function to edit", run as written: each recipe of its table is applied to a
COPY of the code (every *.py of this directory in a temporary one, the named function edited as the row
says) and train.py trains 2 tiny steps there (HF engine, the untrained tiny model, a few tokens). A
recipe that crashes, or that the README no longer states, fails here.

    python -m pytest -q test_recipes.py
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PLAN = ["--task", "plan_path", "--size", "5", "--tool_mode", "direct", "--max_turns", "2", "--policies", "per-role"]
TINY = ["--K", "3", "--problems", "2", "--max_tokens", "8", "--lr", "1e-3", "--device", "cpu", "--engine", "hf",
        "--steps", "2", "--save_every", "0"]  # test_train's cheapest run, on the HF engine

GSPO = '''

def gspo(logp, old_logp, adv, lengths, denom, ref_logp=None, eps_low=0.2, eps_high=0.2, kl_coef=0.0):
    """GSPO-style: one ratio per sample (its tokens' log-ratios summed), clipped; each sample's term is
    counted per token, a token sum over denom as the contract asks."""
    n = torch.tensor(lengths, dtype=torch.long, device=logp.device)
    seg = torch.repeat_interleave(torch.arange(len(lengths), device=logp.device), n)
    ratio = torch.exp(torch.zeros(len(lengths), dtype=logp.dtype, device=logp.device).index_add(0, seg, logp - old_logp))
    a = torch.stack([x[0] for x in adv.split(lengths)]) if lengths else ratio
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    w = n.to(logp.dtype)
    out = ((ratio < 1 - eps_low) | (ratio > 1 + eps_high)).to(logp.dtype)
    return -(torch.minimum(ratio * a, clipped * a) * w).sum() / denom, {"seq_clipfrac": (out * w).sum()}
'''

ECHO_LINE = 'from task_echo import Echo\n'

# (row: what the README's table says to edit, a fragment its "e.g." must still hold,
#  edits (file, old text, new text; old None: append), the task's flags (default PLAN), a check on the metrics)
RECIPES = {
    "advantages": ("`grouping.advantages`", "`a = g - np.median(g)`",
                   [("grouping.py", "a = g - g.mean()", "a = g - np.median(g)")], [], None),
    "pick_branch": ("`rollout.pick_branch`", "`best = max(r.team for r in rewards)` then choose among `r.team == best`",
                    [("rollout.py", "    best = max(rewards)\n    return rng.choice([j for j, r in enumerate(rewards) if r == best])",
                      "    best = max(r.team for r in rewards)\n    return rng.choice([j for j, r in enumerate(rewards) if r.team == best])")],
                    [], None),
    "group_key": ("`rollout.group_key`", "`return (pid, role)`",
                  [("rollout.py", "    return (pid, env.turn, role)", "    return (pid, role)")], [],
                  lambda m: m["groups"] <= 2 * 2),  # per (problem, role): the turns pooled
    "loss": ("a new function in `loss.py`, named in `train.py` (`objective = ...`)", "`logp.split(lengths)`",
             [("loss.py", None, GSPO), ("train.py", re.compile(r"(objective = .*?)loss\.ppo_clip"), r"\1loss.gspo")],
             [], lambda m: "seq_clipfrac/tool" in m and "clipfrac/tool" not in m),  # its stats, by name
    "reward_mix": ("`task.Reward.__new__`", "`alpha * team + local * (1 - team)`",
                   [("task.py", "super().__new__(cls, alpha * team + local)",
                     "super().__new__(cls, alpha * team + local * (1 - team))")], [], None),
    "new_task": ("one `task_*.py` file + one line in `envs.TASKS`", "see \"Adding a task\"",
                 [("task_echo.py", None, "README"), ("envs.py", "from task_math import Math\n", "from task_math import Math\n" + ECHO_LINE),
                  ("envs.py", '"code": Code}', '"code": Code, "echo": Echo}')],
                 ["--task", "echo", "--length", "3", "--policies", "shared"], lambda m: "reward/speaker" in m),
    "new_workflow": ("the task's `ROLES` (who acts, in order) and its `render` / `act`",
                     '`ROLES = {"mas": ("tool", "critic", "planner"), ...}`, and `act` handles `"critic"`',
                     [("task_games.py", 'ROLES = {"mas": ("tool", "planner"), "single": ("planner",)}',
                       'ROLES = {"mas": ("tool", "critic", "planner"), "single": ("planner",)}'),
                      ("task_games.py", 'if role == "planner" and "tool" in self.roles:',
                       'if role in ("critic", "planner") and "tool" in self.roles:'),  # the critic sees the proposal
                      ("task_games.py", '    def act(self, role, text):\n        if role == "tool":',
                       '    def act(self, role, text):\n'
                       '        if role == "critic":  # keeps the tool\'s proposal, or replaces it with its own moves\n'
                       '            own = self.parse(text)\n'
                       '            self.proposal = self.proposal if own is None else own\n'
                       '            return self.score(self.proposal)\n'
                       '        if role == "tool":')],
                     [], lambda m: {"reward/tool", "reward/critic", "reward/planner", "loss/critic"} <= set(m)),
}


def readme_table():
    text = open(os.path.join(HERE, "README.md")).read()
    section = text.split("## Ablations: the one function to edit", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| to change")]


def test_every_row_of_the_readme_table_is_a_recipe_here():
    rows = readme_table()
    assert len(rows) == len(RECIPES), rows
    for row in rows:
        assert sum(edit in row for edit, *_ in RECIPES.values()) == 1, row


def apply(code, file, old, new, readme):
    path = os.path.join(code, file)
    if old is None:  # a new file (the README's own text for the new task) or an addition to one
        if new == "README":
            new = re.search(r"```python\n(# task_echo\.py.*?)```", readme, flags=re.S).group(1)
        with open(path, "a") as f:
            f.write(new)
        return
    text = open(path).read()
    if isinstance(old, re.Pattern):
        text, n = old.subn(new, text)
    else:
        n = text.count(old)
        text = text.replace(old, new)
    assert n == 1, f"{file}: the recipe's edit matches {n} places, not one: {old!r}"
    with open(path, "w") as f:
        f.write(text)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(RECIPES))
def test_recipe_trains_two_steps(name, tiny_dir, tmp_path):
    edit, example, edits, flags, check = RECIPES[name]
    readme = open(os.path.join(HERE, "README.md")).read()
    row = next(r for r in readme_table() if edit in r)
    assert example in row, f"the README's recipe changed: {row}"
    code = tmp_path / "code"
    code.mkdir()
    for f in glob.glob(os.path.join(HERE, "*.py")):
        shutil.copy(f, code)
    for file, old, new in edits:
        apply(str(code), file, old, new, readme)
    out = str(tmp_path / "run")
    p = subprocess.run([sys.executable, "train.py", *(flags or PLAN), *TINY, "--model", tiny_dir, "--out_dir", out],
                       cwd=code, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"recipe {name}: train.py failed ({p.returncode}):\n{p.stderr[-3000:]}"
    ms = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    assert [m["step"] for m in ms] == [1, 2]
    if check is not None:
        assert all(check(m) for m in ms), (name, ms[-1])
