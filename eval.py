"""Evaluate a model (or one model per role) on a task's workflow, the same way training sees it:
same envs, same engines, no tree sampling, no learning.

    python eval.py --task plan_path --model runs/cpu-demo/ckpt-000150 --size 5 --tool_mode direct --max_turns 2 --n 200
    python eval.py --task plan_path --model tiny-model --role_model planner=runs/x/ckpt-000150/planner ...
    python eval.py --plot runs/cpu-demo            # reward and success curves -> runs/cpu-demo/curves.png
    python -m pytest -q test_eval.py

--model may be a plain model directory, or a checkpoint directory written by train.py holding one
sub-directory per policy (tool/, planner/ or shared/): each role then finds its own model.
Reports team success (pass@1 for one sample; avg@S and pass@S for S samples per problem), per-role mean
reward, mean turns, tokens generated and wall time; --json writes them with every setting used.
"""
import json
import os
import sys
import time

import train


def resolve_models(model, role_models, roles):
    """{role: model dir}. A train.py checkpoint dir routes each role to its policy's sub-directory."""
    out = {}
    for r in roles:
        if os.path.isdir(os.path.join(model, r)):
            out[r] = os.path.join(model, r)
        elif os.path.isdir(os.path.join(model, "shared")):
            out[r] = os.path.join(model, "shared")
        else:
            out[r] = model
    for spec in role_models:
        role, _, path = spec.partition("=")
        if role not in roles or not path:
            train.die(f"--role_model {spec!r}: expected ROLE=PATH with ROLE in {roles}")
        out[role] = path
    for r, p in out.items():
        if not os.path.isfile(os.path.join(p, "config.json")):
            train.die(f"model for role {r!r} not found: {p} has no config.json")
    return out


def shape(cfg):
    """What an engine's weights must match: a model of another shape needs its own engine."""
    return tuple(getattr(cfg, k, None) for k in ("model_type", "vocab_size", "hidden_size", "intermediate_size",
                                                 "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                                                 "head_dim", "tie_word_embeddings"))


def run_eval(a, engines=None):
    """`engines`: a dict kept across calls to reuse one engine (table.py evaluates every row on one
    vLLM engine, swapping weights: starting an engine costs ~25 s on the CPU)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    import rollout as R
    t0 = time.time()
    torch.manual_seed(a.seed)
    roles = train.make_env(a, a.split, 0).roles
    dirs = resolve_models(a.model, a.role_model, roles)
    names = sorted(set(dirs.values()))
    models = {d: AutoModelForCausalLM.from_pretrained(d, dtype=getattr(torch, a.dtype)).eval() for d in names}
    tok = AutoTokenizer.from_pretrained(dirs[roles[0]])
    shapes = {d: shape(models[d].config) for d in names}
    if len(set(shapes.values())) > 1:  # one engine serves every role: their weights must fit one model
        train.die("the roles' models differ in shape (one engine serves every role): "
                  + "; ".join(f"{d}: {s}" for d, s in shapes.items()))
    limit = getattr(models[names[0]].config, "max_position_embeddings", 4096)
    spec = (a.engine, a.device, a.dtype, a.seed, shapes[names[0]], min(limit, a.max_prompt_tokens + a.max_tokens))
    engine = (engines or {}).get(spec)
    if engine is None:
        engine = R.make_engine(a.engine, names[0], device=a.device, dtype=a.dtype, seed=a.seed, max_model_len=spec[-1])
        if engines is not None:
            engines[spec] = engine
    sampler = R.Sampler(engine, tok, lambda role: dirs[role], lambda d: models[d].state_dict())
    # seeded on its own: a reused engine (whatever it sampled before) gives a fresh process's numbers,
    # and train.py's evaluation of the same weights with the same seed gives these
    res = R.evaluate(lambda i: train.make_env(a, a.split, i), a.n, sampler, a.temperature, a.max_tokens,
                     a.samples, min(a.max_prompt_tokens, limit - a.max_tokens), seed=a.seed)
    res.update(wall_s=round(time.time() - t0, 1), models=dirs,
               settings={k: v for k, v in vars(a).items() if k != "plot"})
    return res


def plot(run_dir):
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        train.die(f"no metrics.jsonl in {run_dir}")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        train.die("--plot needs matplotlib (an optional dependency): pip install matplotlib")
    ms = [json.loads(line) for line in open(path)]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for k in sorted({k for m in ms for k in m if k.startswith("reward/")}):
        ax1.plot([m["step"] for m in ms], [m[k] for m in ms], label=k)
    ax1.set_xlabel("step"), ax1.set_title("mean reward per role"), ax1.legend()
    ax2.plot([m["step"] for m in ms], [m["success"] for m in ms], label="train (tree-continued episodes)")
    ev = [m for m in ms if "eval/success" in m]
    ax2.plot([m["step"] for m in ev], [m["eval/success"] for m in ev], "o-", label="held-out")
    ax2.set_xlabel("step"), ax2.set_title("team success"), ax2.legend()
    out = os.path.join(run_dir, "curves.png")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    print(f"wrote {out}")


def main(argv=None, engines=None):
    ap = train.Parser(description="Evaluate a task's workflow. See the docstring of eval.py.")
    A = ap.add_argument
    A("--plot", default=None, help="run directory: draw its metrics.jsonl curves to curves.png and exit")
    train.add_common_args(A)
    A("--model", default=None, help="model dir, or a train.py checkpoint dir with one sub-dir per policy")
    A("--role_model", action="append", default=[], help="ROLE=PATH: serve ROLE with this model (repeatable)")
    A("--split", default="test", help="train, val or test")
    A("--n", type=int, default=200, help="problems")
    A("--samples", type=int, default=None,
      help="episodes per problem (avg@S and pass@S); default: the task's protocol (rollout.eval_protocol: 5 for math, else 1)")
    A("--temperature", type=float, default=None,
      help="0 = greedy; default: the task's protocol, as the paper (0.6 for math, greedy for games, planning and code)")
    A("--json", default=None, help="write the results (with every setting) to this file")
    a = ap.parse_args(argv)
    if a.plot:
        return plot(a.plot)
    if a.model is None:
        train.die("--model is required")
    import rollout as R
    proto = R.eval_protocol(a.task)  # train.py --eval_n uses the same
    if a.samples is None:
        a.samples = proto["samples"]
    if a.temperature is None:
        a.temperature = proto["temperature"]
    if a.n <= 0 or a.samples <= 0 or a.temperature < 0:
        train.die("--n and --samples must be positive, --temperature >= 0")
    if a.split not in ("train", "val", "test"):
        train.die(f"unknown --split {a.split!r}; choose from train, val, test")
    train.check_common(a)
    a.n = min(a.n, train.problem_count(a, a.split) or a.n)  # a dataset holds only so many problems
    res = run_eval(a, engines)
    print(f"{a.task} ({a.workflow}, {a.split}, n={a.n}, samples={a.samples}, T={a.temperature})")
    for k in ["success", f"pass@{a.samples}", "turns", "tokens", "wall_s"] + [k for k in res if k.startswith("reward/")]:
        v = res[k]
        print(f"  {k:16s} {v:.4f}" if isinstance(v, float) else f"  {k:16s} {v}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return res


if __name__ == "__main__":
    main(sys.argv[1:])
