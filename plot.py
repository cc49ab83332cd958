"""Training curves of one run, or of several overlaid, from each run directory's metrics.jsonl (and the
step-0 evaluation in its summary.json): one PNG, five panels: held-out success (dashed: the training
success), mean reward per role, zero-advantage fraction, logp_gap (log scale), and the step time split
into rollout / update / sync. A run keeps one colour on every panel; line styles say what a line is.

    python plot.py runs/cpu-demo                                       # -> runs/cpu-demo/curves.png
    python plot.py runs/cpu-demo runs/cpu-demo-shared --out cmp.png    # overlaid (default: ./curves.png)
    python plot.py per-role=runs/cpu-demo shared=runs/cpu-demo-shared  # LABEL=RUN_DIR: the legend's name
    python eval.py --plot runs/cpu-demo runs/cpu-demo-shared --out cmp.png   # the same, from eval.py
    python -m pytest -q test_plot.py

matplotlib is an optional dependency (pip install matplotlib); the Agg backend needs no display.
"""
import json
import os

from common import Parser, die

STYLES = ("-", "--", ":", "-.")  # roles in panel (b), by first appearance
TIMES = (("rollout", "-", "rollout (env included)"), ("update", "--", "update"), ("sync", ":", "sync"))


def load(spec):
    """(label, run dir, metrics, summary) of RUN_DIR or LABEL=RUN_DIR; by default a run is named by its directory."""
    label, d = (None, spec) if os.path.isdir(spec) or "=" not in spec else spec.split("=", 1)
    d = os.path.normpath(d)
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
    return label or os.path.basename(os.path.abspath(d)), d, ms, summary


def series(ms, key, positive=False):
    """(steps, values) of the steps that logged `key` (eval/success only on eval steps; older runs lack some)."""
    pts = [(m["step"], m[key]) for m in ms if m.get(key) is not None and (not positive or m[key] > 0)]
    return [p[0] for p in pts], [p[1] for p in pts]


def plot(run_dirs, out=None):
    """Draw the runs' curves to one PNG (`out`; default RUN_DIR/curves.png for one run, ./curves.png for
    several). Returns the five panels' titles."""
    runs = [load(s) for s in run_dirs]  # every run checked before any drawing
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
    except ImportError:
        die("plotting needs matplotlib (an optional dependency): pip install matplotlib")
    out = out or (os.path.join(runs[0][1], "curves.png") if len(runs) == 1 else "curves.png")
    roles = list(dict.fromkeys(k[len("reward/"):] for _, _, ms, _ in runs for m in ms for k in m if k.startswith("reward/")))
    style = {r: STYLES[i % len(STYLES)] for i, r in enumerate(roles)}
    fig, axes = plt.subplots(2, 3, figsize=(16, 8.5))
    a, b, c, d, e, key = axes.flat
    for i, (label, _, ms, summary) in enumerate(runs):
        col = f"C{i % 10}"
        x, y = series(ms, "eval/success")
        if summary.get("success_before") is not None and 0 not in x:  # evaluated before step 1, not in metrics.jsonl
            x, y = [0] + x, [summary["success_before"]] + y
        a.plot(x, y, "o-", color=col, ms=4)
        a.plot(*series(ms, "success"), "--", color=col, lw=0.8, alpha=0.6)
        for r in roles:
            b.plot(*series(ms, f"reward/{r}"), style[r], color=col, lw=1)
        c.plot(*series(ms, "zero_adv_frac"), color=col, lw=1)
        d.plot(*series(ms, "logp_gap", positive=True), color=col, lw=1)  # log scale: a zero gap has no point
        for t, ls, _ in TIMES:
            e.plot(*series(ms, f"time/{t}"), ls, color=col, lw=1)

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
    key.legend(handles=[Line2D([], [], color=f"C{i % 10}", lw=2, label=r[0]) for i, r in enumerate(runs)],
               loc="center", title="runs", fontsize="medium")
    fig.tight_layout()
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    print(f"wrote {out}")
    return [ax.get_title() for ax in (a, b, c, d, e)]


def main(argv=None):
    ap = Parser(description="Training curves of runs, overlaid, to one PNG. See the docstring of plot.py.")
    ap.add_argument("runs", nargs="+", metavar="RUN_DIR", help="a train.py --out_dir, or LABEL=RUN_DIR")
    ap.add_argument("--out", default=None, help="the PNG (default: RUN_DIR/curves.png for one run, ./curves.png for several)")
    args = ap.parse_args(argv)
    return plot(args.runs, args.out)


if __name__ == "__main__":
    main()
