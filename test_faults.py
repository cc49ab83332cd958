"""Faults: a crash, a kill or a full disk at any point of a run loses at most the current step.

    python -m pytest -q test_faults.py

The unit tests drive common.py's checkpoint and metrics files directly (no model). The end-to-end ones
train the tiny model (test_train's cheapest config): in this process with a crash or a full disk
simulated by monkeypatch, and in subprocesses that SIGKILL themselves at named points
(ATGRPO_KILL_AT=POINT:STEP, common.kill_point), each resumed until done, then compared with an
uninterrupted run line by line and weight by weight."""
import errno
import json
import os

import pytest
import torch

import common


# ---- checkpoints and metrics files, without a model -------------------------------------------------
class FakePolicy:
    """What save_checkpoint needs of a policy: a name, save_pretrained, trainer state."""
    adapter, sharded = None, False

    def __init__(self, name, value):
        self.name, self.value = name, value
        self.model = self

    def save_pretrained(self, d):
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "w.json"), "w") as f:
            json.dump(self.value, f)

    def trainer_state(self):
        return {"opt": {"v": self.value}, "sched": {}}


class FakeTok:
    def save_pretrained(self, d):
        pass


def save(out, step, keep=2):
    common.save_checkpoint(str(out), step, {"p": FakePolicy("p", step)}, FakeTok(), {"rng": None}, keep=keep,
                           log=lambda s: None)


def latest(out):
    return open(os.path.join(out, "latest")).read().strip()


def test_pruning_never_deletes_latest_and_drops_orphans(tmp_path):
    """A kill between a checkpoint's rename and the `latest` update leaves an orphan newer than `latest`
    (here ckpt-4, latest = ckpt-2). The resumed run's next save must keep what `latest` names, whatever
    --keep_ckpts, and the orphan (a discarded future) goes."""
    save(tmp_path, 2)
    save(tmp_path, 4)
    with open(tmp_path / "latest", "w") as f:  # as if killed after ckpt-4's rename, before `latest` moved
        f.write("ckpt-000002")
    assert common.latest_checkpoint(str(tmp_path)).endswith("ckpt-000002")
    save(tmp_path, 3, keep=1)  # the resumed run (from step 2) saves step 3
    assert latest(tmp_path) == "ckpt-000003"
    assert common.latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-000003")
    assert sorted(d for d in os.listdir(tmp_path) if d.startswith("ckpt-")) == ["ckpt-000003"]


def test_checkpoint_write_fails_one_line_error_previous_intact(tmp_path, monkeypatch, capsys):
    """Disk full while writing a checkpoint (torch.save raises ENOSPC): a one-line error naming the
    directory, no half-written directory left behind, and `latest` still names the previous one, whole."""
    save(tmp_path, 1)

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(SystemExit) as e:
        save(tmp_path, 2)
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert str(tmp_path) in err and "No space left on device" in err and "ckpt-000001" in err, err
    assert sorted(os.listdir(tmp_path)) == ["ckpt-000001", "latest"]  # no .tmp-ckpt-000002 left
    monkeypatch.undo()
    ck = common.latest_checkpoint(str(tmp_path))
    assert ck == str(tmp_path / "ckpt-000001")
    pol = FakePolicy("p", None)
    pol.load_trainer_state = lambda st: setattr(pol, "loaded", st)
    assert common.load_checkpoint(ck, {"p": pol})["step"] == 1 and pol.loaded["opt"] == {"v": 1}


def lines(path):
    return open(path).read().splitlines() if os.path.exists(path) else []


def write_metrics(out, steps, torn=None):
    with open(os.path.join(out, "metrics.jsonl"), "w") as f:
        f.writelines(json.dumps({"step": s, "success": s / 10}) + "\n" for s in steps)
        if torn:
            f.write(torn)  # a line cut by a kill, a power loss or a full disk


def test_trim_tolerates_a_torn_last_line(tmp_path):
    write_metrics(tmp_path, [1, 2, 3], torn='{"step": 4, "succ')
    common.trim_metrics(str(tmp_path), 2)
    assert [json.loads(x)["step"] for x in lines(tmp_path / "metrics.jsonl")] == [1, 2]
    discarded = lines(tmp_path / "metrics.discarded.jsonl")  # kept, the torn piece too, never lost
    assert json.loads(discarded[0])["step"] == 3 and discarded[1] == '{"step": 4, "succ'


def test_trim_torn_line_in_the_middle_is_a_one_line_error(tmp_path, capsys):
    """Only the LAST line can be torn by a kill; a bad line before it is damage the user must see."""
    with open(tmp_path / "metrics.jsonl", "w") as f:
        f.write('{"step": 1}\n{"st\n{"step": 3}\n')
    with pytest.raises(SystemExit):
        common.trim_metrics(str(tmp_path), 1)
    err = capsys.readouterr().err
    assert "metrics.jsonl" in err and "line 2" in err and len(err.strip().splitlines()) == 1, err
    assert lines(tmp_path / "metrics.jsonl") == ['{"step": 1}', '{"st', '{"step": 3}']  # untouched


def test_trim_killed_while_writing_keeps_the_history(tmp_path, monkeypatch):
    """A kill while trim rewrites metrics.jsonl (simulated: the write of the new file dies half-way)
    must leave the old file whole: the new one is written aside and moved in with os.replace."""
    write_metrics(tmp_path, [1, 2, 3, 4])
    before = lines(tmp_path / "metrics.jsonl")

    class Killed(BaseException):
        pass

    real_open = open

    def dying_open(path, mode="r", *a, **k):
        f = real_open(path, mode, *a, **k)
        if "w" in mode and "metrics" in os.path.basename(str(path)) and "discarded" not in str(path):
            real_write = f.write

            def write(s):
                real_write(s[: len(s) // 2])
                f.flush()
                raise Killed()
            f.write = write
        return f
    monkeypatch.setattr(common, "open", dying_open, raising=False)
    with pytest.raises(Killed):
        common.trim_metrics(str(tmp_path), 2)
    monkeypatch.undo()
    assert lines(tmp_path / "metrics.jsonl") == before
    common.trim_metrics(str(tmp_path), 2)  # the resume after the kill: done right this time
    assert [json.loads(x)["step"] for x in lines(tmp_path / "metrics.jsonl")] == [1, 2]
    assert {json.loads(x)["step"] for x in lines(tmp_path / "metrics.discarded.jsonl")} == {3, 4}
