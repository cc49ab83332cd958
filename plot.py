"""Training curves of one run, or of several overlaid, from each run directory's metrics.jsonl (and the
step-0 evaluation in its summary.json): one PNG, five panels: held-out success (dashed: the training
success), mean reward per role, zero-advantage fraction, logp_gap (log scale), and the step time split
into rollout / update / sync. A run keeps one colour on every panel; line styles say what a line is.
An entry may be several runs of one configuration (seeds): DIR1,DIR2 or a glob pattern (expanded here,
sorted); its curves are the mean over the runs at the steps every run logged, with a shaded band from the
runs' lowest to their highest value (min..max, not an interval).

    python plot.py runs/cpu-demo                                       # -> runs/cpu-demo/curves.png
    python plot.py runs/cpu-demo runs/cpu-demo-shared --out cmp.png    # overlaid (default: ./curves.png)
    python plot.py per-role=runs/cpu-demo shared=runs/cpu-demo-shared  # LABEL=RUN_DIR: the legend's name
    python plot.py "shared=runs/table/seed-*/mas---at-grpo-shared" "per-role=runs/table/seed-*/mas---at-grpo-per-role" --out cmp.png
                                                  # LABEL=PATTERN or LABEL=DIR1,DIR2: the seeds as mean + band
    python eval.py --plot runs/cpu-demo runs/cpu-demo-shared --out cmp.png   # the same, from eval.py
    python -m pytest -q test_plot.py

matplotlib is an optional dependency (pip install matplotlib); the Agg backend needs no display.
"""
import glob
import json
import os

import numpy as np

from common import Parser, die

STYLES = ("-", "--", ":", "-.")  # roles in panel (b), by first appearance
TIMES = (("rollout", "-", "rollout (env included)"), ("update", "--", "update"), ("sync", ":", "sync"))


def load(spec):
    """(label, [(run dir, metrics, summary)]) of [LABEL=]RUNS, RUNS a run dir, a glob pattern or a comma list of
    both; by default named by the directory (several runs: their common name and "(N runs)")."""
    label, ds = (None, spec) if os.path.isdir(spec) or "=" not in spec else spec.split("=", 1)
    dirs = []
    for p in [ds] if os.path.isdir(ds) else ds.split(","):
        if not os.path.isdir(p) and any(ch in p for ch in "*?["):
            dirs += sorted(glob.glob(p)) or die(f"no run dir matches {p}")
        else:
            dirs.append(p)
    runs = [load_run(os.path.normpath(d)) for d in dirs]
    names = [os.path.basename(os.path.abspath(d)) for d, _, _ in runs]
    if len(runs) > 1:
        label = label or f"{os.path.commonprefix(names).rstrip('-_ .') or 'runs'} ({len(runs)} runs)"
    return label or names[0], runs


def load_run(d):
    """(run dir, metrics, summary) of one run dir."""
    path = os.path.join(d, "metrics.jsonl")
    if not os.path.isfile(path):
        die(f"no metrics.jsonl in {d}")
    lines = [line for line in open(path).read().splitlines() if line.strip()]
    ms = []
    for i, line in enumerate(lines):
        try:
            ms.append(json.loads(line))
        except ValueError:
            if i < len(lines) - 1:  # only the last line may be half-written (a run still going)
                die(f"{path}:{i + 1}: not a JSON object")
    if not ms:
        die(f"{path} holds no steps yet")
    summary = {}
    if os.path.isfile(os.path.join(d, "summary.json")):
        try:
            summary = json.load(open(os.path.join(d, "summary.json")))
        except ValueError:
            die(f"{d}/summary.json is not JSON")
    return d, ms, summary


def series(ms, key, positive=False):
    """(steps, values) of the steps that logged `key` (eval/success only on eval steps; older runs lack some)."""
    pts = [(m["step"], m[key]) for m in ms if m.get(key) is not None and (not positive or m[key] > 0)]
    return [p[0] for p in pts], [p[1] for p in pts]


def draw(ax, curves, fmt, col, **kw):
    """Plot the mean of the runs' curves [(steps, values)] at the steps all of them have; several: a min..max band."""
    xs = sorted(set.intersection(*(set(x) for x, _ in curves)))
    v = np.array([[dict(zip(x, y))[s] for s in xs] for x, y in curves]).reshape(len(curves), len(xs))
    ax.plot(xs, v.mean(0), fmt, color=col, **kw)
    if len(curves) > 1 and xs:
        ax.fill_between(xs, v.min(0), v.max(0), color=col, alpha=0.2 * kw.get("alpha", 1), lw=0)  # faint line: fainter band


def plot(run_dirs, out=None):
    """Draw the runs' curves to one PNG (`out`; default RUN_DIR/curves.png for one run, ./curves.png for
    several). Returns the five panels' titles."""
    entries = [load(s) for s in run_dirs]  # every run checked before any drawing
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
    except ImportError:
        die("plotting needs matplotlib (an optional dependency): pip install matplotlib")
    one = len(entries) == 1 and len(entries[0][1]) == 1
    out = out or (os.path.join(entries[0][1][0][0], "curves.png") if one else "curves.png")
    roles = list(dict.fromkeys(k[len("reward/"):] for _, runs in entries for _, ms, _ in runs for m in ms
                               for k in m if k.startswith("reward/")))
    style = {r: STYLES[i % len(STYLES)] for i, r in enumerate(roles)}
    fig, axes = plt.subplots(2, 3, figsize=(16, 8.5))
    a, b, c, d, e, key = axes.flat
    for i, (_, runs) in enumerate(entries):
        col = f"C{i % 10}"
        held = []
        for _, ms, summary in runs:
            x, y = series(ms, "eval/success")
            if summary.get("success_before") is not None and 0 not in x:  # evaluated before step 1, not in metrics.jsonl
                x, y = [0] + x, [summary["success_before"]] + y
            held.append((x, y))

        def each(k, positive=False):  # one curve per run
            return [series(ms, k, positive) for _, ms, _ in runs]
        draw(a, held, "o-", col, ms=4)
        draw(a, each("success"), "--", col, lw=0.8, alpha=0.6)
        for r in roles:
            draw(b, each(f"reward/{r}"), style[r], col, lw=1)
        draw(c, each("zero_adv_frac"), "-", col, lw=1)
        draw(d, each("logp_gap", positive=True), "-", col, lw=1)  # log scale: a zero gap has no point
        for t, ls, _ in TIMES:
            draw(e, each(f"time/{t}"), ls, col, lw=1)

    def styles(ax, pairs):  # the legend of line styles, in grey: colours are runs (the sixth panel)
        ax.legend(handles=[Line2D([], [], color="0.35", ls=ls, marker=mk, label=lb) for ls, mk, lb in pairs],
                  fontsize="small")
    styles(a, [("-", "o", "held-out"), ("--", "", "train (tree-continued episodes)")])
    styles(b, [(style[r], "", r) for r in roles])
    styles(e, [(ls, "", lb) for _, ls, lb in TIMES])
    a.set_ylim(-0.03, 1.03)
    d.set_yscale("log")
    for ax, title, ylabel in ((a, "team success", "success"), (b, "mean reward per role", "reward"),
                              (c, "zero-advantage fraction", "fraction of groups"),
                              (d, "logp_gap (max |sampler - trainer|)", "log-prob"),
                              (e, "step time: rollout / update / sync", "seconds")):
        ax.set_title(title), ax.set_xlabel("step"), ax.set_ylabel(ylabel), ax.grid(alpha=0.3)
    key.axis("off")
    ns = "/".join(str(n) for n in sorted({len(runs) for _, runs in entries} - {1}))
    key.legend(handles=[Line2D([], [], color=f"C{i % 10}", lw=2, label=lb) for i, (lb, _) in enumerate(entries)],
               loc="center", fontsize="medium", title="runs" + (f"\n(mean; band: min..max over {ns} runs)" if ns else ""))
    fig.tight_layout()
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    print(f"wrote {out}")
    return [ax.get_title() for ax in (a, b, c, d, e)]


def main(argv=None):
    ap = Parser(description="Training curves of runs, overlaid, to one PNG. See the docstring of plot.py.")
    ap.add_argument("runs", nargs="+", metavar="RUN_DIR",
                    help="a train.py --out_dir, LABEL=RUN_DIR, or [LABEL=]DIR1,DIR2 / a glob pattern: runs of one configuration")
    ap.add_argument("--out", default=None, help="the PNG (default: RUN_DIR/curves.png for one run, ./curves.png for several)")
    args = ap.parse_args(argv)
    return plot(args.runs, args.out)


if __name__ == "__main__":
    main()
