"""--report_to: every tracker installed here logs 2 training steps, and what it logged is read back and
compared with metrics.jsonl; a tracker that is not installed is a one-line error naming the pip command.
    python -m pytest -q test_track.py"""
import importlib.util
import json
import os

import pytest

import track
from test_train import BASE, metrics, run

INSTALLED = [k for k in track.PACKAGES if importlib.util.find_spec(track.PACKAGES[k])]


def read_tensorboard(out):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(os.path.join(out, "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    scal = {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}
    texts = {tag: [e.tensor_proto.string_val[0].decode() for e in acc.Tensors(tag)] for tag in acc.Tags()["tensors"]}
    return scal, texts


def read_wandb(out):
    """History rows of the offline run file: LevelDB-log framing (32 KiB blocks of records, each
    [crc 4][length 2][type 1] + data; type 1 = whole, 2-4 = first/middle/last piece) around wandb's
    protobuf Records."""
    import glob
    import struct
    from wandb.proto import wandb_internal_pb2 as pb
    data = open(glob.glob(os.path.join(out, "wandb", "*run-*", "run-*.wandb"))[0], "rb").read()
    pos, buf, scal = 7, b"", {}
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a header is padding
            pos += 32768 - pos % 32768
            continue
        _, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
        buf, pos = buf + data[pos + 7:pos + 7 + n], pos + 7 + n
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(buf)
            buf = b""
            if rec.WhichOneof("record_type") == "history":
                items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item}
                for k, v in items.items():
                    if isinstance(v, (int, float)) and not k.startswith("_") and k != "train/step":
                        scal.setdefault(k, {})[items.get("train/step", items["_step"])] = v
    return scal, {}


def read_trackio(out):
    """trackio's local SQLite database (TRACKIO_DIR/<project>.db): one row per log call, metrics as JSON."""
    import sqlite3
    db = sqlite3.connect(os.path.join(out, "trackio", "at-grpo.db"))
    scal = {}
    for step, blob in db.execute("SELECT step, metrics FROM metrics"):
        for k, v in json.loads(blob).items():
            if isinstance(v, (int, float)):
                scal.setdefault(k, {})[step] = v
    return scal, {}


READERS = {"tensorboard": read_tensorboard, "wandb": read_wandb, "trackio": read_trackio}


@pytest.mark.slow
@pytest.mark.parametrize("kind", INSTALLED or
                         [pytest.param("tensorboard", marks=pytest.mark.skip(reason="no tracker installed"))])
def test_tracker_gets_every_metric(tiny_dir, tmp_path, kind):
    out = str(tmp_path / "run")
    run(BASE + ["--model", tiny_dir, "--engine", "hf", "--policies", "per-role", "--steps", "2", "--out_dir", out,
                "--eval_n", "2", "--eval_every", "1", "--report_to", kind],
        env={"WANDB_MODE": "offline", "TRACKIO_DIR": os.path.join(out, "trackio")})  # nothing leaves the machine
    scal, texts = READERS[kind](out)
    ms = metrics(out)
    for m in ms:  # every numeric metrics.jsonl key, at its step, with its value
        for k, v in track.scalars(m).items():
            assert scal[k][m["step"]] == pytest.approx(v, rel=1e-5, abs=1e-6), (k, m["step"])
    assert set(scal["eval/success"]) == {0, 1, 2}  # the eval curve starts before training
    if kind == "tensorboard":
        assert len(texts["completions/text_summary"]) == 2 and "| planner |" in texts["completions/text_summary"][0]
        assert '"report_to": "tensorboard"' in texts["config/text_summary"][0]


def test_missing_tracker_is_a_one_line_error(tiny_dir, tmp_path):
    missing = [k for k in track.PACKAGES if k not in INSTALLED]
    if not missing:
        pytest.skip("every tracker is installed here")
    p = run(BASE + ["--model", tiny_dir, "--out_dir", str(tmp_path / "x"), "--report_to", missing[0]], check=False)
    assert p.returncode == 2 and f"pip install {track.PACKAGES[missing[0]]}" in p.stderr, p.stderr[-1500:]
    assert len(p.stderr.strip().splitlines()) == 1 and not os.path.exists(tmp_path / "x"), p.stderr


def test_scalars_flatten_lists_and_drop_text():
    assert track.scalars({"step": 3, "a": 1, "mem": [0.5, 0.25], "s": "x", "f": True}) == {
        "a": 1.0, "mem/rank0": 0.5, "mem/rank1": 0.25}


class FakeWandb:
    """wandb's rules as its docs state them, for a run resumed online: `run.step` continues after the last
    logged step, `log(..., step=s)` with s below it is dropped (a warning), and `log` without a step logs
    at run.step and advances it; define_metric(step_metric=) names the x axis. The server is a dict."""
    server = {}

    class Table:
        def __init__(self, columns, data):
            self.data = data

    def init(self, id, resume, **kw):
        return FakeWandb.Run(FakeWandb.server.setdefault(id, {"rows": []}))

    class Run:
        def __init__(self, state):
            self.state, self.step = state, len(state["rows"])

        def define_metric(self, name, step_metric=None, **kw):
            pass

        def log(self, vals, step=None):
            if step is not None and step < self.step:
                return  # "Tried to log to step 2 that is less than the current step 4 ... will be ignored"
            self.step = self.step if step is None else step
            while len(self.state["rows"]) <= self.step:
                self.state["rows"].append({})
            self.state["rows"][self.step].update(vals)
            if step is None:
                self.step += 1

        def finish(self):
            pass


def test_wandb_resumed_run_keeps_the_relogged_steps(tmp_path, monkeypatch):
    """A run killed after logging step 3, resumed from its step-1 checkpoint, logs steps 2 and 3 again
    (metrics.jsonl's values): none may be dropped for a step that is not increasing."""
    import sys
    monkeypatch.setitem(sys.modules, "wandb", FakeWandb())
    FakeWandb.server.clear()
    t = track.Tracker("wandb", str(tmp_path), {})
    for s in (1, 2, 3):
        t.log({"step": s, "loss": float(s)})
    t.close()  # killed; resumed from step 1, the steps after it are recomputed
    t = track.Tracker("wandb", str(tmp_path), {}, start_step=1)
    for s in (2, 3, 4):
        t.log({"step": s, "loss": 10.0 * s})
        t.samples(s, [{"role": "tool", "reward": 1.0, "advantage": 0.0, "text": "x"}])
    t.close()
    rows = FakeWandb.server[open(tmp_path / "wandb_id").read()]["rows"]
    last = {}
    for r in rows:  # what a chart of loss against the training step shows last at each step
        if "loss" in r:
            last[r.get("train/step", rows.index(r))] = r["loss"]
    assert last == {1: 1.0, 2: 20.0, 3: 30.0, 4: 40.0}
