#!/usr/bin/env bash
# What CI (2 CPU cores, no GPU) cannot check: FSDP2 on NCCL with bf16 mixed precision, vLLM on the GPU
# (external_launcher, sleep mode, weight pushes), memory. Sized for under 5 minutes on one GPU:
#   1. the GPU half of test_distributed.py: FSDP2 updates vs a 1-process fp32 reference (one rank per
#      GPU, at most 2; with bf16 the loss must be close, the ranks identical)
#   0. the NVIDIA driver (CUDA 13 needs >= 580), first, with a one-line error
#   2. 2 training steps of the tiny model: per-role on 1 process (FSDP as a 1-rank group, bf16, sleep mode,
#      gradient checkpointing; on CUDA under vLLM's Model Runner V2, then again under V1 with
#      VLLM_USE_V2_MODEL_RUNNER=0), then shared and per-role LoRA under torchrun on min(2, GPUs) ranks; every
#      step checks the engines against the trainer (logp_gap); train.py's memory plan beside the measured peak
#   3. with MODEL=/local/hf/dir (e.g. a Qwen3-0.6B): 2 steps of it too, full and LoRA (adds a few minutes); MODEL=wide builds,
#      offline, a randomly initialised 24-layer Qwen3 (~0.2B parameters, the tiny tokenizer) to stand in for one
# then a report: rollout and update tokens/s, peak memory per rank, logp_gap (sampler vs trainer).
#
#   bash gpu_check.sh                  # on the GPU machine (python with vllm==0.32.0, CUDA torch)
#   DEVICE=cpu bash gpu_check.sh       # dry run of the same steps on CPU (fp32, no sleep mode, gloo)
#   SCALE=1 bash gpu_check.sh          # instead: the update at the paper's shapes (issue 24; scale.py): flex and
#                                      # chunked log-probs checked, then bench.py --sections scale at the 1.7B shape
#   SCALE=1 PROFILE=1 SCALE_PARTS=update SCALE_VARIANTS=after SCALE_RESPONSE=2048 bash gpu_check.sh
#                                      # the next GPU step: where the update's time goes (MFU is 18-26%, the goal 40%)
#   ENGINE=hf bash gpu_check.sh        # no vLLM there: the HF engine generates (FSDP2/NCCL/bf16 still checked;
#                                      # sleep mode and pushes into vLLM are not). Chosen by itself if vllm is missing.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PY:-python}
DEVICE=${DEVICE:-cuda}
OUT=${OUT:-$(mktemp -d /tmp/gpu_check.XXXXXX)}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
log() { echo "[gpu_check $(date +%T)] $*"; }

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

ENGINE=${ENGINE:-$($PY -c "import vllm" >/dev/null 2>&1 && echo vllm || echo hf)}
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
[ "$ENGINE" = vllm ] && $PY -c "import vllm; print('vllm', vllm.__version__)"
[ "$ENGINE" = vllm ] || echo "gpu_check: ENGINE=$ENGINE: the HF engine generates; vLLM's sleep mode and weight pushes are NOT checked"
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

log "1/3 tests: FSDP2 update on $DEVICE vs the 1-process reference"
timeout 300 $PY -m pytest -q -s -p no:cacheprovider "test_distributed.py::test_fsdp_update_equals_one_process[$DEVICE]" \
    2>&1 | grep -E "ranks: max|passed|failed|skipped|Error" || { echo "gpu_check: tests failed"; exit 1; }

log "2/3 tiny model: 2 steps per-role (1 process) and shared (torchrun, $NP ranks)"
[ -d "$OUT/tiny" ] || $PY tiny.py --out "$OUT/tiny" --sft_steps 0 >/dev/null 2>&1
# the untrained model's rewards are all equal; KL on makes every sample train (a ref forward is included)
RUN=(--task plan_path --size 4 --tool_mode direct --max_turns 2 "${SIZE[@]}" --steps 2 --lr 1e-5 --kl_coef 0.01
     --device "$DEVICE" --engine "$ENGINE" --model "$OUT/tiny" --save_every 0)
# vLLM 0.32 on CUDA runs its (experimental) Model Runner V2, which no CPU test reaches (it needs Triton);
# VLLM_USE_V2_MODEL_RUNNER=0 switches back to V1. The per-role run under each: logp_gap under both runners
V2=$([ "$DEVICE" = cuda ] && [ "$ENGINE" = vllm ] && echo 1 || echo 0)
VLLM_USE_V2_MODEL_RUNNER=$V2 timeout 300 $PY train.py "${RUN[@]}" "${GPU_FLAGS[@]}" --policies per-role --fsdp 1 --grad_ckpt 1 \
    --out_dir "$OUT/tiny-per-role" >"$OUT/tiny-per-role.log" 2>&1 || { tail -30 "$OUT/tiny-per-role.log"; echo "gpu_check: per-role run failed"; exit 1; }
grep -E "memory (plan|at step)" "$OUT/tiny-per-role.log" || true  # train.py's plan beside the measured peak (cuda)
RUNNER_RUNS=()
if [ "$V2" = 1 ]; then
    VLLM_USE_V2_MODEL_RUNNER=0 timeout 300 $PY train.py "${RUN[@]}" "${GPU_FLAGS[@]}" --policies per-role --fsdp 1 --grad_ckpt 1 \
        --out_dir "$OUT/tiny-per-role-runner-v1" >"$OUT/tiny-per-role-runner-v1.log" 2>&1 \
        || { tail -30 "$OUT/tiny-per-role-runner-v1.log"; echo "gpu_check: per-role run under Model Runner V1 failed"; exit 1; }
    RUNNER_RUNS=("$OUT/tiny-per-role-runner-v1")
fi
timeout 300 $PY -m torch.distributed.run --standalone --nproc_per_node "$NP" train.py "${RUN[@]}" "${GPU_FLAGS[@]}" \
    --policies shared --out_dir "$OUT/tiny-shared-${NP}ranks" >"$OUT/tiny-shared.log" 2>&1 \
    || { tail -30 "$OUT/tiny-shared.log"; echo "gpu_check: torchrun run failed (or hung: timeout)"; exit 1; }

# per-role LoRA (one frozen base, an adapter per role, only adapters pushed) under torchrun
timeout 300 $PY -m torch.distributed.run --standalone --nproc_per_node "$NP" train.py "${RUN[@]}" "${GPU_FLAGS[@]}" \
    --policies per-role --lora_rank 8 --lr 1e-4 --out_dir "$OUT/tiny-lora-${NP}ranks" >"$OUT/tiny-lora.log" 2>&1 \
    || { tail -30 "$OUT/tiny-lora.log"; echo "gpu_check: LoRA run failed"; exit 1; }

RUNS=("$OUT/tiny-per-role" "${RUNNER_RUNS[@]}" "$OUT/tiny-shared-${NP}ranks" "$OUT/tiny-lora-${NP}ranks")
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
if [ -n "${MODEL:-}" ]; then
    log "3/3 $MODEL: 2 steps per-role on $NP rank(s)"
    timeout 600 $PY -m torch.distributed.run --standalone --nproc_per_node "$NP" train.py --task plan_path --size 6 \
        --tool_mode direct --max_turns 2 --K 4 --problems $((4 * NP)) --max_tokens 256 --steps 2 --device "$DEVICE" --engine "$ENGINE" \
        --model "$MODEL" --policies per-role --grad_ckpt 1 --save_every 0 "${GPU_FLAGS[@]}" --out_dir "$OUT/model" \
        >"$OUT/model.log" 2>&1 || { tail -30 "$OUT/model.log"; echo "gpu_check: $MODEL run failed"; exit 1; }
    log "3/3 $MODEL: the same with per-role LoRA (rank 16): compare peak memory"
    timeout 600 $PY -m torch.distributed.run --standalone --nproc_per_node "$NP" train.py --task plan_path --size 6 \
        --tool_mode direct --max_turns 2 --K 4 --problems $((4 * NP)) --max_tokens 256 --steps 2 --device "$DEVICE" --engine "$ENGINE" \
        --model "$MODEL" --policies per-role --grad_ckpt 1 --save_every 0 --lora_rank 16 --lr 1e-5 "${GPU_FLAGS[@]}" \
        --out_dir "$OUT/model-lora" >"$OUT/model-lora.log" 2>&1 || { tail -30 "$OUT/model-lora.log"; echo "gpu_check: $MODEL LoRA run failed"; exit 1; }
    RUNS+=("$OUT/model" "$OUT/model-lora")
else
    log "3/3 skipped (MODEL=/local/hf/dir to add a real model)"
fi

$PY - "${RUNS[@]}" <<'EOF'
import json, os, sys
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
v1 = [d for d in sys.argv[1:] if d.endswith("-runner-v1")]
if v1:  # the same per-role run under each vLLM model runner
    gaps = [max(json.loads(x)["logp_gap"] for x in open(os.path.join(d, "metrics.jsonl"))) for d in (v1[0][:-10], v1[0])]
    print(f"logp_gap per-role: Model Runner V2 (vLLM's default on CUDA) {gaps[0]:.1e}, "
          f"V1 (VLLM_USE_V2_MODEL_RUNNER=0) {gaps[1]:.1e}")
else:
    print("logp_gap under vLLM's Model Runner V1 only (V2 needs CUDA, Triton and ENGINE=vllm)")
EOF
log "done; logs and metrics in $OUT"
