"""Evaluate a model (or one model per role) on a task's workflow, the same way training sees it:
same envs, same engines, no tree sampling, no learning.

    python eval.py --preset cpu-demo --model runs/cpu-demo/ckpt-000200 --n 200     # the demo's task settings
    python eval.py --preset cpu-demo --model tiny-model --role_model planner=runs/cpu-demo/ckpt-000200/planner
    python eval.py --preset cpu-real --data humaneval --n 164        # the preset's base model (smol.py builds it)
    python eval.py --plot runs/cpu-demo            # training curves (plot.py) -> runs/cpu-demo/curves.png
    python eval.py --plot runs/cpu-demo runs/cpu-demo-shared --out cmp.png   # several runs overlaid
    python -m pytest -q test_eval.py

--model may be a plain model directory, or a checkpoint directory written by train.py holding one
sub-directory per policy (tool/, planner/ or shared/): each role then finds its own model. A role's
model may be a peft LoRA adapter directory (train.py --lora_rank): the engine then serves the adapters'
base (adapter_config.json names it; --base overrides) with every adapter loaded at once, and a role given
the base model itself samples without one.
    python eval.py --preset cpu-demo --model runs/lora/ckpt-000200                  # adapters of a LoRA run
    python eval.py --merge runs/lora/ckpt-000200/planner --out planner-merged       # adapter -> full HF model
Reports team success (pass@1 for one sample; avg@S and pass@S for S samples per problem) with its
standard error over the problems, for each benchmark of the split apart (a problem's `source`, e.g. AIME24,
AIME25, OlympiadBench: the paper's columns) and pooled over them (labelled so); --n takes every
benchmark's share of N problems (rollout.eval_problems: the same problems every run); per-role mean
reward, mean turns, tokens generated and wall time;
--json writes them with every setting used and each problem's success (`per_problem`: the mean of its
samples, in test-problem order; table.py's paired intervals resample these), `problems` (their test-set
indices), `sources` and `by_source` (each benchmark's n, success, success_se, pass@S).
"""
import json
import os
import sys
import time

import torch
from transformers import AutoConfig, AutoModelForCausalLM

import rollout
import tiny
from common import (LOAD_ERRORS, Parser, add_common_args, die, gpu_full, load_error, load_tokenizer, make_env,
                    parse_args, problem_count, write_json)


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
            die(f"--role_model {spec!r}: expected ROLE=PATH with ROLE in {roles}")
        out[role] = path
    for r, p in out.items():
        if not (os.path.isfile(os.path.join(p, "config.json")) or is_adapter(p)):
            die(f"model for role {r!r} not found: {p} has no config.json (nor adapter_config.json)")
    return out


def is_adapter(path):
    return os.path.isfile(os.path.join(path, "adapter_config.json"))


def adapter_base(adapter_dirs, base=None):
    """The one base model of these adapters: --base, else what their adapter_config.json names."""
    named = {json.load(open(os.path.join(d, "adapter_config.json"))).get("base_model_name_or_path") for d in adapter_dirs}
    if base is None and len(named) != 1:
        die(f"the adapters name different base models {sorted(map(str, named))} (one engine serves one base); pass --base")
    if base is None and (named_base := next(iter(named))) and not os.path.isabs(named_base):  # written before the fix
        print(f"eval.py: note: the adapters name their base by the relative path {named_base!r}, read from the "
              "current directory (--base DIR says which model)", file=sys.stderr)
    base = base or named.pop()
    if not base or not os.path.isfile(os.path.join(base, "config.json")):
        die(f"the adapters' base model {base!r} is not a local model directory; pass --base DIR")
    return base


def merge(adapter_dir, out, base=None):
    """A LoRA adapter folded into its base: a full Hugging Face model directory (serve it anywhere)."""
    from peft import PeftModel
    if not is_adapter(adapter_dir):
        die(f"--merge {adapter_dir}: not a peft adapter directory (no adapter_config.json)")
    if os.path.exists(out):
        die(f"--out {out} already exists; choose another directory")
    base = adapter_base([adapter_dir], base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    merged = PeftModel.from_pretrained(model, adapter_dir).merge_and_unload()
    merged.save_pretrained(out)
    load_tokenizer(base).save_pretrained(out)
    print(f"wrote {out} ({base} + {adapter_dir})")
    return out


def shape(cfg):
    """What an engine's weights must match: a model of another shape needs its own engine."""
    return tuple(getattr(cfg, k, None) for k in ("model_type", "vocab_size", "hidden_size", "intermediate_size",
                                                 "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                                                 "head_dim", "tie_word_embeddings"))


def make_engine(args, model_dir, context, **lora):
    """The one engine serving every role (of a full model, or of the adapters' base with `lora`), started
    from eval.py's flags; room for the longest prompt and answer the model's context allows."""
    return rollout.make_engine(args.engine, model_dir, device=args.device, dtype=args.dtype, seed=args.seed,
                               max_model_len=min(context, args.max_prompt_tokens + args.max_tokens),
                               gpu_memory_utilization=args.gpu_memory_utilization, **lora)


def run_eval(args):
    t0 = time.time()
    torch.manual_seed(args.seed)
    roles = make_env(args, args.split, 0).roles
    dirs = resolve_models(args.model, args.role_model, roles)
    if any(is_adapter(d) for d in dirs.values()):
        return run_eval_adapters(args, roles, dirs, t0)
    names = sorted(set(dirs.values()))
    try:  # a missing or broken model directory: one line
        models = {d: AutoModelForCausalLM.from_pretrained(d, dtype=getattr(torch, args.dtype)).eval() for d in names}
        tok = load_tokenizer(dirs[roles[0]])
    except LOAD_ERRORS as e:
        die(load_error(e, names))
    shapes = {d: shape(models[d].config) for d in names}
    if len(set(shapes.values())) > 1:  # one engine serves every role: their weights must fit one model
        die("the roles' models differ in shape (one engine serves every role): "
            + "; ".join(f"{d}: {s}" for d, s in shapes.items()))
    context = getattr(models[names[0]].config, "max_position_embeddings", 4096)
    engine = make_engine(args, names[0], context)
    sampler = rollout.Sampler(engine, tok, lambda role: dirs[role], lambda d: models[d].state_dict(),
                              overrides=args.role_sampling)
    return finish(args, sampler, context, dirs, t0)


def run_eval_adapters(args, roles, dirs, t0):
    """LoRA adapters: one engine holds their base and every adapter; roles given the base use none."""
    from peft import LoraConfig
    from common import read_adapter
    adapters = sorted({d for d in dirs.values() if is_adapter(d)})
    base = adapter_base(adapters, args.base)
    for r, d in dirs.items():
        if not is_adapter(d) and os.path.realpath(d) != os.path.realpath(base):
            die(f"role {r!r} is served by the full model {d}, the others by adapters on {base}: one engine "
                "serves one base (merge the adapters with --merge, or give that role the base)")
    configs = {d: LoraConfig.from_pretrained(d) for d in adapters}
    context = getattr(AutoConfig.from_pretrained(base), "max_position_embeddings", 4096)
    engine = make_engine(args, base, context, lora_rank=max(c.r for c in configs.values()), max_loras=len(adapters))
    names = {d: f"adapter{i}" for i, d in enumerate(adapters)}  # not the path: peft reads a '.' as a module path
    for d in adapters:
        engine.load_adapter(names[d], read_adapter(d).items(), configs[d])
    tok = load_tokenizer(base)
    sampler = rollout.Sampler(engine, tok, lambda role: names.get(dirs[role]), None, overrides=args.role_sampling)
    return finish(args, sampler, context, {**dirs, "base": base}, t0)


def finish(args, sampler, context, dirs, t0):
    # every benchmark of the split gets its share of --n (train.py --eval_n plays the same problems)
    chosen = rollout.eval_problems(lambda i: make_env(args, args.split, i), problem_count(args, args.split), args.n)
    # seeded on its own: train.py's evaluation of the same weights with the same seed gives these numbers
    res = rollout.evaluate(lambda j: make_env(args, args.split, chosen[j][0]), len(chosen), sampler, args.temperature,
                           args.max_tokens, args.samples, min(args.max_prompt_tokens, context - args.max_tokens),
                           seed=args.seed)
    res.update(wall_s=round(time.time() - t0, 1), models=dirs, problems=[i for i, _ in chosen],
               settings={k: v for k, v in vars(args).items() if k != "plot"})
    return res


def main(argv=None):
    ap = Parser(description="Evaluate a task's workflow. See the docstring of eval.py.")
    A = ap.add_argument
    A("--plot", nargs="+", default=None, metavar="RUN_DIR",
      help="run directories (or LABEL=RUN_DIR): draw their metrics.jsonl curves, overlaid, to one PNG "
           "(--out; default RUN_DIR/curves.png for one run, ./curves.png for several) and exit; see plot.py")
    add_common_args(ap)
    A("--model", default=None, help="model dir, or a train.py checkpoint dir with one sub-dir per policy; "
      "'tiny' / 'smollm2' (a preset's) as train.py: the model it starts from, built on first use")
    A("--tiny_dir", default="tiny-model", help="where --model tiny lives (train.py --tiny_dir)")
    A("--tiny_warmup", default="auto", choices=("auto",) + tiny.WARMUPS, help="its warm-up (train.py --tiny_warmup)")
    A("--role_model", action="append", default=[], help="ROLE=PATH: serve ROLE with this model or adapter (repeatable)")
    A("--base", default=None, help="the base model of LoRA adapters (default: the one their adapter_config.json names)")
    A("--merge", default=None, help="adapter dir: merge it into its base, write a full HF model to --out, and exit")
    A("--out", default=None, help="where --merge writes (default: ADAPTER_DIR-merged), or the PNG of --plot")
    A("--split", default="test", choices=("train", "val", "test"), help="which problems")
    A("--n", type=int, default=200, help="problems")
    A("--samples", type=int, default=None,
      help="episodes per problem (avg@S and pass@S); default: the task's protocol (rollout.eval_protocol: 5 for math, else 1)")
    # its own dest: a preset's `temperature` is the TRAINING sampling temperature and must not set this one
    A("--temperature", dest="eval_temperature", type=float, default=None,
      help="0 = greedy; default: the task's protocol, as the paper (0.6 for math, 0.7 for code, greedy for the games)")
    A("--json", default=None, help="write the results (with every setting) to this file")
    args = parse_args(ap, argv)
    if args.plot:
        import plot  # plot.py draws them (matplotlib only then)
        return plot.plot(args.plot, args.out)
    if args.merge:
        return merge(args.merge.rstrip("/"), args.out or args.merge.rstrip("/") + "-merged", args.base)
    if args.model is None:
        die("--model is required")
    if args.json and not os.path.isdir(os.path.dirname(os.path.abspath(args.json))):  # before, not after, the work
        die(f"--json {args.json}: no such directory")
    args.model = tiny.resolve_model(args)  # tiny / smollm2 (a preset's): the directory train.py starts from
    proto = rollout.eval_protocol(args.task)  # train.py --eval_n uses the same
    args.samples = proto["samples"] if args.samples is None else args.samples
    args.temperature = proto["temperature"] if args.eval_temperature is None else args.eval_temperature
    del args.eval_temperature
    if args.n <= 0 or args.samples <= 0 or args.temperature < 0:
        die("--n and --samples must be positive, --temperature >= 0")
    args.n = min(args.n, problem_count(args, args.split) or args.n)  # a dataset holds only so many problems
    with gpu_full(args, "the evaluation"):  # the engine's start or its generation: one line, not vLLM's traceback
        res = run_eval(args)
    print(f"{args.task} ({args.workflow}, {args.split}, n={args.n}, samples={args.samples}, T={args.temperature})")
    for src, b in res.get("by_source", {}).items():  # the paper's columns: each benchmark over its own problems
        print(f"  {src:16s} {b['success']:.4f} +- {b['success_se']:.4f} ({b['n']} problems)")
    pooled = len(res.get("by_source", ())) > 1
    print(f"  {'pooled' if pooled else 'success':16s} {res['success']:.4f} +- {res['success_se']:.4f} (standard error over "
          f"{args.n} problems{', every benchmark pooled' if pooled else ''})")
    for k in [f"pass@{args.samples}", "turns", "tokens", "wall_s"] + [k for k in res if k.startswith(("reward/", "notes/"))]:
        v = res[k]
        print(f"  {k:16s} {v:.4f}" if isinstance(v, float) else f"  {k:16s} {v}")
    if args.json:  # whole or not at all (table.py reads it back); a failed write is one line, the results above
        write_json(args.json, res, hint="the results are printed above")
    return res


if __name__ == "__main__":
    main(sys.argv[1:])
