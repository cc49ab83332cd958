"""Shared test fixtures: one untrained tiny model per test session (built offline in about a second), and one
briefly warmed-up one (about 15 s; test_train, test_faults, test_lora and test_controls read it, none writes it)."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
# Under pytest-xdist (-n N) every worker, and every train.py / eval.py / torchrun it starts, would run
# cpu_count OpenMP threads; their spin-waits fight over cores another worker holds. One share each.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // WORKERS)))


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    import tiny
    return tiny.build(str(tmp_path_factory.mktemp("tiny") / "model"), sft_steps=0, log=lambda s: None)


@pytest.fixture(scope="session")
def tok(tiny_dir):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(tiny_dir)


@pytest.fixture(scope="session")
def keep_engines():
    """In-process vLLM engines share the process's model-parallel groups: when one is garbage collected it
    tears them down and every other engine fails ('pipeline model parallel group is not initialized').
    A test that makes its own engine appends it here, so it lives as long as the session's."""
    return []


@pytest.fixture(scope="session")
def vllm_engine(tiny_dir):
    import rollout
    return rollout.VLLMEngine(tiny_dir, max_model_len=512, seed=0)


# not LOCAL_WORLD_SIZE: vLLM's CPU platform exports it (= its tensor parallel size, 1) when an engine starts
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture(autouse=True)
def no_torchrun_vars_leak():
    """A test that leaves torchrun's variables in this process's environment makes every later train.py
    subprocess believe it runs under torchrun (it then binds the leaked MASTER_PORT: EADDRINUSE)."""
    before = {k: os.environ.get(k) for k in TORCHRUN_VARS}
    yield
    leaked = {k: os.environ[k] for k in TORCHRUN_VARS if os.environ.get(k) != before[k]}
    assert not leaked, f"the test left torchrun variables in os.environ: {leaked}"


@pytest.fixture(scope="session")
def warm_dir(tmp_path_factory):
    """The tiny model after a short warm-up: unlike the untrained one (every response cut at --max_tokens,
    reward -1, nothing learnt), its lengths, rewards and updates depend on what was sampled, so a resume that
    draws other random numbers shows in the metrics, and adapters really train. Read only: shared."""
    import tiny
    return tiny.build(str(tmp_path_factory.mktemp("warm") / "model"), sft_steps=15, log=lambda s: None)
