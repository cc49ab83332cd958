"""The paper's table in miniature: every regime trained and measured the same way, on a CPU demo.

    python table.py                    # ~13 min on 2 CPU cores; prints a markdown table, writes runs/table/table.json
    python table.py --preset cpu-demo-math   # ~12 min: the math workflow (tool writes code, reasoner answers)
    python table.py --steps 20 --eval_n 50 --out_dir runs/table-quick    # a quick look

Rows (the paper's five, then two ablations), all from the same warm-started tiny model, the same
seed, the same step budget and problems/step, measured by eval.py on the same held-out test problems
(team success by eval.py's protocol for the task: greedy, or avg@5 at T=0.6 for math):
    single agent                 the deciding role alone (--workflow single), untrained
    single agent + GRPO          the deciding role alone, plain GRPO (--sampling parallel: K episodes per
                                 problem, groups per problem), same step budget
    MAS, untrained               tool agent + planner, untrained
    MAS + AT-GRPO shared         tree sampling, one policy for both roles
    MAS + AT-GRPO per-role       tree sampling, one policy per role
    ablation: parallel sampling  per-role, but K independent episodes instead of tree sampling
    ablation: roles swapped      the per-role run's first role's model serves the second and vice versa
and, first, the floor: the success of uniformly random answers (envs.random_floor) on the same problems.
Each training is a `train.py --preset P` process and each evaluation an `eval.py --preset P` process,
exactly as a user runs them (the preset, cpu-demo or cpu-demo-math, is the one source of the settings).
Finished pieces (a run's final checkpoint, an eval's JSON) are reused, so an interrupted table resumes
where it stopped; a directory holding a table made with other settings is refused, never mixed in, and
an eval JSON whose recorded settings are not the ones its row would run with now (or a torn one) is
made again (the stale file kept aside as .stale-TIME).
The step budget (60) is what fits the 30-minute bar: the parallel-sampling ablation costs ~2.5x a
tree row per step (its episodes do not share prompts, so its update sees ~4x the tokens).
"""
import argparse
import json
import os
import subprocess
import sys
import time

import envs
import rollout
from common import PRESETS, Parser, die, latest_checkpoint, make_env

HERE = os.path.dirname(os.path.abspath(__file__))
# (row, training flags or None for untrained, eval flags)
ROWS = [
    ("single agent", None, ["--workflow", "single"]),
    ("single agent + GRPO", ["--workflow", "single", "--policies", "shared", "--sampling", "parallel"],
     ["--workflow", "single"]),
    ("MAS, untrained", None, []),
    ("MAS + AT-GRPO shared", ["--policies", "shared"], []),
    ("MAS + AT-GRPO per-role", ["--policies", "per-role"], []),
    ("ablation: parallel sampling (per-role)", ["--policies", "per-role", "--sampling", "parallel"], []),
    ("ablation: per-role models swapped", "MAS + AT-GRPO per-role", "swap"),
]


def sh(cmd, log):
    print("$ " + " ".join(cmd), flush=True)
    with open(log, "a") as f:
        p = subprocess.run(cmd, cwd=HERE, stdout=f, stderr=subprocess.STDOUT)
    if p.returncode != 0:
        sys.exit(f"table.py: failed ({p.returncode}); see {log}")


def slug(name):
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")


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
    `temperature` aside: the preset's is training's). A missing, torn or foreign file is not current."""
    try:
        with open(path) as f:
            have = json.load(f)["settings"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    want = {k: v for k, v in settings.items() if k in have and k not in ("model", "temperature")}
    proto = rollout.eval_protocol(settings["task"])
    want.update(preset=preset, seed=seed, n=n, split="test", samples=proto["samples"],
                temperature=proto["temperature"], workflow="mas", role_model=[])
    for k, v in zip(flags[::2], flags[1::2]):  # --model M, --role_model R=M (repeated), --workflow W
        k = k.lstrip("-")
        want[k] = want[k] + [v] if k == "role_model" else v
    real = lambda p: os.path.realpath(os.path.join(HERE, p))  # eval.py runs here; paths compare resolved
    want["model"] = real(want["model"])
    want["role_model"] = [f"{r}={real(m)}" for r, _, m in (x.partition("=") for x in want["role_model"])]
    try:
        have = {**have, "model": real(have["model"]),
                "role_model": [f"{r}={real(m)}" for r, _, m in (x.partition("=") for x in have["role_model"])]}
    except (KeyError, TypeError, AttributeError):
        return False
    return all(k in have and have[k] == v for k, v in want.items())


def main(argv=None):
    ap = Parser(description="The paper's table in miniature (CPU demo). See the docstring.")
    ap.add_argument("--preset", default="cpu-demo", choices=("cpu-demo", "cpu-demo-math"),
                    help="the demo whose settings every row uses (plan_path, or the math workflow)")
    ap.add_argument("--steps", type=int, default=60, help="training steps of every trained row")
    ap.add_argument("--eval_n", type=int, default=200, help="held-out test problems per row")
    ap.add_argument("--seed", type=int, default=0, help="seed of every run")
    ap.add_argument("--out_dir", default=None, help="runs, eval JSONs, logs and table.json go here "
                                                  "(default runs/table, runs/table-math for cpu-demo-math)")
    ap.add_argument("--tiny_dir", default=None, help="the warm-started demo model (built if absent; default: "
                                                    "the preset's, tiny-model or tiny-model-math)")
    a = ap.parse_args(argv)
    if a.steps <= 0 or a.eval_n <= 0:
        die("--steps and --eval_n must be positive")
    preset, settings = a.preset, PRESETS[a.preset]
    a.out_dir = a.out_dir or ("runs/table" if preset == "cpu-demo" else "runs/table-math")
    a.tiny_dir = a.tiny_dir or settings.get("tiny_dir", "tiny-model")
    demo = argparse.Namespace(**settings)  # the preset's task options, picked by the task class as train.py does
    first, second = make_env(demo, "test", 0).roles  # the two roles the swap ablation exchanges
    check_settings(a, settings)
    log, t0 = os.path.join(a.out_dir, "log.txt"), time.time()
    py = sys.executable
    common = ["--preset", preset, "--seed", str(a.seed)]
    train_flags = ["--steps", str(a.steps), "--save_every", "25", "--keep_ckpts", "1", "--eval_n", "0"]
    for name, tflags, _ in ROWS:  # train every row (unless its final checkpoint exists), one process each
        run_dir = os.path.join(a.out_dir, slug(name))
        if isinstance(tflags, list) and not os.path.isdir(os.path.join(run_dir, f"ckpt-{a.steps:06d}")):
            if os.path.isdir(run_dir) and latest_checkpoint(run_dir) is None:
                os.rename(run_dir, f"{run_dir}.partial-{int(time.time())}")  # cut before any checkpoint: kept aside
            resume = ["--resume"] if os.path.isdir(run_dir) else []
            # the first run builds a missing demo model (train.py --model tiny); the others start from it
            model = ["--model", a.tiny_dir] if os.path.isdir(a.tiny_dir) else ["--model", "tiny", "--tiny_dir", a.tiny_dir]
            sh([py, "train.py", *common, *train_flags, *model, *tflags, "--out_dir", run_dir, *resume], log)
    rows = []
    for name, tflags, eflags in ROWS:  # evaluate every row (unless its JSON exists), one process each
        ck = os.path.join(a.out_dir, slug(tflags if isinstance(tflags, str) else name), f"ckpt-{a.steps:06d}")
        if isinstance(tflags, list):
            model = ["--model", ck]
        elif isinstance(tflags, str):  # swap the roles of a trained per-role run
            model, eflags = ["--model", ck, "--role_model", f"{first}={ck}/{second}", "--role_model", f"{second}={ck}/{first}"], []
        else:
            model = ["--model", a.tiny_dir]
        out = os.path.join(a.out_dir, f"eval-{slug(name)}.json")
        if os.path.exists(out) and not eval_is_current(out, preset, settings, a.seed, a.eval_n, model + eflags):
            print(f"{out}: made with other settings (or unreadable): evaluating again", flush=True)
            os.rename(out, f"{out}.stale-{int(time.time())}")
        if not os.path.exists(out):
            sh([py, "eval.py", *common, *model, *eflags, "--n", str(a.eval_n), "--split", "test", "--json", out], log)
        r = json.load(open(out))
        rows.append({"row": name, "success": r["success"], "turns": r["turns"],
                     **{k: v for k, v in r.items() if k.startswith("reward/")}})
        print(f"{name:40s} {100 * r['success']:5.1f}%", flush=True)
    # the floor: every role answers uniformly at random, on the same test problems
    floor = envs.random_floor(lambda i: make_env(demo, "test", i), a.eval_n, seed=a.seed)
    rows.insert(0, {"row": "uniformly random answers (floor)", **floor})
    print(f"{rows[0]['row']:40s} {100 * floor['success']:5.1f}%", flush=True)
    res = {"rows": rows, "steps": a.steps, "eval_n": a.eval_n, "seed": a.seed, "wall_s": round(time.time() - t0, 1),
           "settings": {**settings, "steps": a.steps}}
    with open(os.path.join(a.out_dir, "table.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(f"\n{preset} ({settings['task']}), {a.steps} steps, seed {a.seed}, {a.eval_n} test problems, "
          f"eval.py's protocol; wall {res['wall_s']:.0f} s\n")
    print("| method | success | turns |\n|---|---|---|")
    for r in rows:
        print(f"| {r['row']} | {100 * r['success']:.1f}% | {r['turns']:.2f} |")
    return res


if __name__ == "__main__":
    main()
