"""table.py reuses finished pieces by name, so it must refuse a directory made with other settings.

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
    table.check_settings(args(d))                      # a fresh table writes its settings
    (d / "eval-x.json").write_text("{}")               # a finished piece
    table.check_settings(args(d))                      # the same settings: resumes
    before = (d / "table-settings.json").read_text()
    with pytest.raises(SystemExit) as e:
        table.main(["--out_dir", str(d), "--steps", "7"])  # another step budget: refused before any work
    assert e.value.code == 2
    assert "steps: 60" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        table.check_settings(args(d, eval_n=50))
    assert "eval_n: 200" in capsys.readouterr().err
    assert (d / "table-settings.json").read_text() == before and json.loads(before)["steps"] == 60
    assert sorted(os.listdir(d)) == ["eval-x.json", "table-settings.json"]


def test_foreign_nonempty_dir_refused(tmp_path):
    (tmp_path / "table.json").write_text("{}")        # e.g. made by an older table.py
    with pytest.raises(SystemExit):
        table.check_settings(args(tmp_path))
    assert not (tmp_path / "table-settings.json").exists()
