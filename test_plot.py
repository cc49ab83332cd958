"""plot.py (and eval.py --plot): two hand-written runs overlaid in one PNG, every panel drawn from the
right keys, the step-0 point from summary.json, one-line errors; several seeds of one configuration (comma
list or glob) drawn as their mean at the common steps with a min..max band.

    python -m pytest -q test_plot.py
"""
import json
import os
import subprocess
import sys

import numpy as np

import plot

HERE = os.path.dirname(os.path.abspath(__file__))
TITLES = ["team success", "mean reward per role", "zero-advantage fraction", "logp_gap (max |sampler - trainer|)",
          "step time: rollout / update / sync"]


def fake_run(d, seed, steps=12, before=0.1, lift=0.0):
    """A run dir as train.py writes it: eval every 4 steps (success step/40 + lift), two roles; summary.json
    with success_before."""
    rng = np.random.default_rng(seed)
    os.makedirs(d)
    with open(os.path.join(d, "metrics.jsonl"), "w") as f:
        for s in range(1, steps + 1):
            m = {"step": s, "success": float(rng.uniform()), "reward/tool": float(rng.uniform()),
                 "reward/planner": float(rng.uniform()), "zero_adv_frac": s / steps, "logp_gap": 10.0 ** -rng.uniform(3, 6),
                 "time/rollout": 2.0 + rng.uniform(), "time/env": 0.5, "time/update": 1.0 + rng.uniform(), "time/sync": 0.1}
            if s % 4 == 0:
                m["eval/success"] = s / 40 + lift
            f.write(json.dumps(m) + "\n")
    json.dump({"success_before": before, "success_after": 0.4}, open(os.path.join(d, "summary.json"), "w"))
    return d


def run(script, *args, cwd=HERE):
    return subprocess.run([sys.executable, os.path.join(HERE, script), *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def captured(monkeypatch):
    """The figures plot.py saves, kept open for reading their plotted data."""
    import matplotlib.figure
    figs, save = [], matplotlib.figure.Figure.savefig
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda self, *x, **k: (figs.append(self), save(self, *x, **k)))
    return figs


def panels(fig):
    """{title: [(x, y) of each line]} and {title: [vertices of each band]} of a saved figure."""
    axes = [ax for ax in fig.axes if ax.get_title()]
    return ({ax.get_title(): [(list(ln.get_xdata()), list(ln.get_ydata())) for ln in ax.get_lines()] for ax in axes},
            {ax.get_title(): [p.get_paths()[0].vertices for p in ax.collections] for ax in axes})


def test_two_runs_overlaid_via_eval_py(tmp_path):
    a, b = fake_run(str(tmp_path / "A"), 0), fake_run(str(tmp_path / "B"), 1)
    out = str(tmp_path / "X.png")
    p = run("eval.py", "--plot", a, b, "--out", out)
    assert p.returncode == 0, p.stderr[-2000:]
    import matplotlib.image
    img = matplotlib.image.imread(out)  # raises on anything but a PNG
    assert img.shape[0] >= 600 and img.shape[1] >= 1000 and img.shape[2] in (3, 4)
    rgb = img[..., :3]
    assert rgb.std() > 0.05 and (rgb.min(axis=2) < 0.9).mean() > 0.02  # not blank: ink on a good part of it
    # each run's colour (C0, C1) is drawn, i.e. both runs are in it
    for hexcol in ("#1f77b4", "#ff7f0e"):
        c = np.array([int(hexcol[i:i + 2], 16) / 255 for i in (1, 3, 5)])
        assert (np.abs(rgb - c).max(axis=2) < 0.02).sum() > 200, hexcol


def test_panels_and_their_data(tmp_path, monkeypatch):
    a, b = fake_run(str(tmp_path / "A"), 0, before=0.05), fake_run(str(tmp_path / "B"), 1, steps=8)
    os.remove(os.path.join(b, "summary.json"))  # no step-0 point for B
    figs = captured(monkeypatch)
    monkeypatch.chdir(tmp_path)
    assert plot.plot(["first=" + a, b]) == TITLES
    assert os.path.isfile(tmp_path / "curves.png")  # several runs: ./curves.png
    axes = {ax.get_title(): ax for ax in figs[0].axes}
    lines = lambda t: [(list(l.get_xdata()), list(l.get_ydata())) for l in axes[t].get_lines()]
    succ = lines("team success")
    assert succ[0] == ([0, 4, 8, 12], [0.05, 0.1, 0.2, 0.3])  # A: held-out with the summary's step 0
    assert succ[2] == ([4, 8], [0.1, 0.2])                    # B: no summary.json, no step 0
    assert succ[1][0] == list(range(1, 13)) and succ[3][0] == list(range(1, 9))  # training success, every step
    assert len(lines("mean reward per role")) == 4            # 2 runs x 2 roles
    assert len(lines("step time: rollout / update / sync")) == 6
    assert axes[TITLES[3]].get_yscale() == "log"
    legend = [t.get_text() for ax in figs[0].axes for lg in [ax.get_legend()] if lg for t in lg.get_texts()]
    assert "first" in legend and "B" in legend and {"tool", "planner"} <= set(legend)
    assert not any(ax.collections for ax in figs[0].axes)      # one run per entry: no band


SEEDS = ((0, 0.05, 0.0), (1, 0.3, 0.1), (2, 0.15, -0.05))  # (seed, success_before, lift of eval/success)


def seed_runs(tmp_path):
    return [fake_run(str(tmp_path / f"seed-{s}" / "cfg-x"), s, before=bf, lift=lf) for s, bf, lf in SEEDS]


def test_seeds_mean_and_band(tmp_path, monkeypatch):
    figs = captured(monkeypatch)
    plot.plot(["cfg=" + ",".join(seed_runs(tmp_path))], str(tmp_path / "s.png"))
    lines, bands = panels(figs[0])
    vals = np.array([[bf] + [s / 40 + lf for s in (4, 8, 12)] for _, bf, lf in SEEDS])  # runs x steps 0, 4, 8, 12
    x, y = lines["team success"][0]
    assert x == [0, 4, 8, 12] and np.allclose(y, vals.mean(0))
    band = bands["team success"][0]                              # held-out first, then training success
    for j, s in enumerate(x):                                    # the band spans the seeds' min..max at each step
        at = band[band[:, 0] == s, 1]
        assert np.isclose(at.min(), vals[:, j].min()) and np.isclose(at.max(), vals[:, j].max()), s
    assert np.isclose(band[:, 1].min(), vals.min()) and np.isclose(band[:, 1].max(), vals.max())
    # every curve is one mean line with a band: 2 in (a), 2 roles, 1, 1, 3 step times
    assert [len(bands[t]) for t in TITLES] == [2, 2, 1, 1, 3] and [len(lines[t]) for t in TITLES] == [2, 2, 1, 1, 3]
    key = next(ax.get_legend() for ax in figs[0].axes if not ax.get_title())
    assert [t.get_text() for t in key.get_texts()] == ["cfg"] and "min..max over 3 runs" in key.get_title().get_text()


def test_seeds_by_glob_same_as_list(tmp_path, monkeypatch):
    figs, dirs = captured(monkeypatch), seed_runs(tmp_path)
    plot.plot([",".join(dirs)], str(tmp_path / "l.png"))
    plot.main([str(tmp_path / "seed-*" / "cfg-x"), "--out", str(tmp_path / "g.png")])
    (l1, b1), (l2, b2) = panels(figs[0]), panels(figs[1])
    assert l1 == l2 and all(np.array_equal(p, q) for t in b1 for p, q in zip(b1[t], b2[t], strict=True))
    key = next(ax.get_legend() for ax in figs[1].axes if not ax.get_title())
    assert [t.get_text() for t in key.get_texts()] == ["cfg-x (3 runs)"]  # default label: common name + count


def test_seeds_only_common_steps(tmp_path, monkeypatch):
    a, b = fake_run(str(tmp_path / "s0"), 0), fake_run(str(tmp_path / "s1"), 1, steps=8)  # b stopped at step 8
    ms = [json.loads(line) for line in open(os.path.join(a, "metrics.jsonl"))]
    ms[1]["logp_gap"] = 0.0                                      # step 2: no point on the log scale for a
    open(os.path.join(a, "metrics.jsonl"), "w").write("".join(json.dumps(m) + "\n" for m in ms))
    figs = captured(monkeypatch)
    plot.plot([f"{a},{b}"], str(tmp_path / "c.png"))
    lines, bands = panels(figs[0])
    assert lines["team success"][0][0] == [0, 4, 8] and lines["team success"][1][0] == list(range(1, 9))
    assert all(ln[0] == list(range(1, 9)) for t in TITLES[1:3] + TITLES[4:] for ln in lines[t])
    assert lines[TITLES[3]][0][0] == [1] + list(range(3, 9))
    assert all(v[:, 0].max() <= 8 for t in TITLES for v in bands[t])


def test_seeds_errors(tmp_path):
    a = fake_run(str(tmp_path / "A"), 0)
    pattern = str(tmp_path / "nope-*" / "cfg")
    for spec in ("cfg=" + pattern, f"{a},{pattern}"):
        p = run("plot.py", spec)
        assert p.returncode == 2 and pattern in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    p = run("plot.py", f"{a},{tmp_path}")                        # one dir of the list is no run
    assert p.returncode == 2 and "no metrics.jsonl" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_one_run_default_out_and_errors(tmp_path):
    a = fake_run(str(tmp_path / "A"), 0)
    p = run("plot.py", a)
    assert p.returncode == 0 and os.path.isfile(os.path.join(a, "curves.png")), p.stderr[-2000:]
    with open(os.path.join(a, "metrics.jsonl"), "a") as f:
        f.write('{"step": 13, "succ')  # a run still writing its last line: plotted without it
    assert run("plot.py", a).returncode == 0
    for args in (["plot.py", a, str(tmp_path)], ["eval.py", "--plot", a, str(tmp_path)]):  # tmp_path: no metrics.jsonl
        p = run(*args)
        assert p.returncode == 2 and "no metrics.jsonl" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    # without matplotlib: one line naming the install
    code = f"import sys; sys.modules['matplotlib'] = None; sys.argv = ['plot.py', {a!r}]; import plot; plot.main()"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=HERE, timeout=300)
    assert p.returncode == 2 and "pip install matplotlib" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
