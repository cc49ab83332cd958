"""table.py: the whole table end to end (one step per row) and its resume; since finished pieces are
reused by name, a directory made with other settings is refused.

    python -m pytest -q test_table.py
"""
import json
import os
from types import SimpleNamespace

import pytest

import table


def args(d, **kw):
    return SimpleNamespace(**{"steps": 60, "eval_n": 200, "seed": 0, "tiny_dir": "tiny-model", "out_dir": str(d), **kw})


def test_same_settings_resume_other_settings_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(table, "sh", lambda *a: pytest.fail("trained although the settings differ"))
    d = tmp_path / "t"
    table.check_settings(args(d), table.PRESETS["cpu-demo"])                      # a fresh table writes its settings
    (d / "eval-x.json").write_text("{}")               # a finished piece
    table.check_settings(args(d), table.PRESETS["cpu-demo"])                      # the same settings: resumes
    before = (d / "table-settings.json").read_text()
    with pytest.raises(SystemExit) as e:
        table.main(["--out_dir", str(d), "--steps", "7"])  # another step budget: refused before any work
    assert e.value.code == 2
    assert "steps: 60" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        table.check_settings(args(d, eval_n=50), table.PRESETS["cpu-demo"])
    assert "eval_n: 200" in capsys.readouterr().err
    assert (d / "table-settings.json").read_text() == before and json.loads(before)["steps"] == 60
    assert sorted(os.listdir(d)) == ["eval-x.json", "table-settings.json"]


def test_foreign_nonempty_dir_refused(tmp_path):
    (tmp_path / "table.json").write_text("{}")        # e.g. made by an older table.py
    with pytest.raises(SystemExit):
        table.check_settings(args(tmp_path), table.PRESETS["cpu-demo"])
    assert not (tmp_path / "table-settings.json").exists()


def fake_pieces(monkeypatch, calls):
    """table.sh with no real work: a training run leaves its final checkpoint directory, an evaluation is
    eval.py's own main (its command line parsed, its JSON written with every setting) minus the rollouts."""
    import importlib
    ev = importlib.import_module("eval")
    monkeypatch.setattr(ev, "run_eval", lambda a: {"success": 0.5, "pass@1": 0.5, "turns": 1.0, "tokens": 3,
                                                   "wall_s": 0.0, "models": {},
                                                   "settings": {k: v for k, v in vars(a).items() if k != "plot"}})

    def sh(cmd, log):
        calls.append(cmd)
        if "train.py" in cmd:
            os.makedirs(os.path.join(cmd[cmd.index("--out_dir") + 1], "ckpt-000001"))
        else:
            ev.main(cmd[2:])
    monkeypatch.setattr(table, "sh", sh)


def test_a_stale_eval_is_recomputed(tmp_path, monkeypatch, capsys):
    """Finished evaluations are reused by name only when the settings they recorded are the ones this
    table would run them with (model, roles' models, workflow, n, split, seed, the task protocol's
    samples and temperature, the preset's task settings); a stale or torn one is made again, never mixed
    into the table (table.py used to reuse any eval-*.json of that name)."""
    calls, d = [], tmp_path / "t"
    fake_pieces(monkeypatch, calls)
    argv = ["--steps", "1", "--eval_n", "4", "--out_dir", str(d), "--tiny_dir", str(tmp_path / "tiny")]
    res = table.main(argv)
    assert sum("eval.py" in c for c in calls) == len(table.ROWS) and res["rows"][1]["success"] == 0.5
    calls.clear()
    assert table.main(argv)["rows"] == res["rows"] and calls == []  # every piece fresh: nothing redone
    path = lambda name: d / f"eval-{table.slug(name)}.json"
    stale = {"single agent": dict(n=50), "MAS, untrained": dict(seed=1),
             "MAS + AT-GRPO shared": dict(samples=5, temperature=0.6),  # another protocol
             "single agent + GRPO": dict(workflow="mas"), "MAS + AT-GRPO per-role": dict(size=5),
             "ablation: per-role models swapped": dict(role_model=[])}  # the unswapped model
    for name, change in stale.items():
        r = json.load(open(path(name)))
        r["settings"].update(change)
        r["success"] = 0.99
        path(name).write_text(json.dumps(r))
    path("ablation: parallel sampling (per-role)").write_text('{"success": 0.99, "sett')  # torn
    calls.clear()
    again = table.main(argv)
    assert again["rows"] == res["rows"]  # none of the 0.99s
    redone = sorted(c[c.index("--json") + 1] for c in calls)
    assert redone == sorted(str(path(n)) for n in [*stale, "ablation: parallel sampling (per-role)"])
    assert "train.py" not in str(calls)


@pytest.mark.slow
def test_table_end_to_end_then_resume(tiny_dir, tmp_path, monkeypatch):
    """One training step per row (4 real train.py processes, vLLM-CPU), every row evaluated (7 eval.py
    processes); both driven through their command lines with --preset cpu-demo; a second
    call trains nothing and re-evaluates only a missing piece, to the same number."""
    d = tmp_path / "t"
    argv = ["--steps", "1", "--eval_n", "4", "--out_dir", str(d), "--tiny_dir", tiny_dir]
    res = table.main(argv)
    assert [r["row"] for r in res["rows"]] == ["uniformly random answers (floor)"] + [name for name, _, _ in table.ROWS]
    assert all(0.0 <= r["success"] <= 1.0 and r["turns"] >= 1 for r in res["rows"])
    trained = [name for name, t, _ in table.ROWS if isinstance(t, list)]
    for name in trained:
        assert (d / table.slug(name) / "ckpt-000001").is_dir(), name
    ev = {name: json.load(open(d / f"eval-{table.slug(name)}.json")) for name, _, _ in table.ROWS}
    assert ev["single agent"]["settings"]["workflow"] == "single" and ev["MAS, untrained"]["settings"]["workflow"] == "mas"
    assert ev["single agent + GRPO"]["settings"]["model"].endswith("single-agent---grpo/ckpt-000001")
    ck = ev["MAS + AT-GRPO per-role"]["settings"]["model"]
    assert ev["MAS + AT-GRPO per-role"]["models"] == {"tool": f"{ck}/tool", "planner": f"{ck}/planner"}
    assert ev["ablation: per-role models swapped"]["models"] == {"tool": f"{ck}/planner", "planner": f"{ck}/tool"}
    sh, evals = table.sh, []
    monkeypatch.setattr(table, "sh", lambda cmd, log: pytest.fail("trained again although every checkpoint exists")
                        if "train.py" in cmd else (evals.append(cmd), sh(cmd, log)))
    os.remove(d / "eval-mas---at-grpo-per-role.json")
    again = table.main(argv)
    assert again["rows"] == res["rows"]
    assert (d / "eval-mas---at-grpo-per-role.json").exists()
    assert len(evals) == 1  # the real eval.py JSONs' recorded settings are found current: only the missing one ran
