"""Agent- and turn-wise groups and their advantages (pure numpy, no torch).

AT-GRPO groups every sample by its key (problem, turn, role): the K samples of a group were drawn from
ONE prompt, so GRPO's "same prompt" baseline is valid again. This file only knows keys and rewards.

    python -m pytest -q test_grouping.py
"""
from collections import defaultdict

import numpy as np


def group_indices(keys):
    """{key: [positions in input order]} for hashable keys (tuples, ints, strings)."""
    groups = defaultdict(list)
    for i, k in enumerate(keys):
        groups[k].append(i)
    return dict(groups)


def advantages(rewards, keys, std_norm=True, eps=1e-6):
    """Per-sample advantage, same order as the inputs.

    A = (r - mean_g) / (std_g + eps), std_g the unbiased (ddof=1) std of the sample's group;
    with std_norm=False, A = r - mean_g. Singleton and zero-spread groups get A = 0: they carry no signal.
    """
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim != 1 or len(r) != len(keys):
        raise ValueError(f"rewards ({r.shape}) and keys ({len(keys)}) must be 1-D and equally long")
    adv = np.zeros_like(r)
    for idx in group_indices(keys).values():
        g = r[idx]
        if len(g) < 2 or np.ptp(g) == 0.0:
            continue  # exact zero spread: leave A = 0 (never divide 0 by eps)
        a = g - g.mean()
        if std_norm:
            a = a / (g.std(ddof=1) + eps)
        adv[idx] = a
    return adv


def group_stats(rewards, keys):
    """Counts for the logs: groups, and groups with no learning signal (singletons, zero spread)."""
    r = np.asarray(rewards, dtype=np.float64)
    groups = group_indices(keys).values()
    return {"groups": len(groups), "zero_adv_groups": sum(len(v) < 2 or np.ptp(r[v]) == 0.0 for v in groups)}
