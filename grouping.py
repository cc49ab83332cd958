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


NORMS = ("group", "agent")  # train.py --adv_norm


def advantages(rewards, keys, std_norm=True, eps=1e-6, norm="group"):
    """Per-sample advantage, same order as the inputs.

    A = (r - mean_g) / (std_g + eps), std_g the unbiased (ddof=1) std of the sample's group;
    with std_norm=False, A = r - mean_g. Singleton and zero-spread groups get A = 0: they carry no signal.

    norm="group": g = the samples of the sample's key (AT-GRPO: one (problem, turn, role) draw).
    norm="agent": Dr. MAS's agent-wise normalisation (Feng et al. 2026, arXiv 2602.08847, Eq. 5; in their
    code verl's compute_grpo_outcome_advantage with group_by_agent_id: the group index is the prompt's uid
    joined with the agent id, and every step the agent took counts): g = EVERY response of the sample's
    agent on its problem this step, all turns and branches pooled: keys (problem, ..., role) pool by
    (key[0], key[-1]). Each agent gets its own mean and std, never another agent's. With one turn, or keys
    already (problem, role) (parallel sampling), it equals "group": AT-GRPO's groups already hold one agent.
    """
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim != 1 or len(r) != len(keys):
        raise ValueError(f"rewards ({r.shape}) and keys ({len(keys)}) must be 1-D and equally long")
    adv = np.zeros_like(r)
    for idx in norm_groups(keys, norm):
        g = r[idx]
        if len(g) < 2 or np.ptp(g) == 0.0:
            continue  # exact zero spread: leave A = 0 (never divide 0 by eps)
        a = g - g.mean()
        if std_norm:
            a = a / (g.std(ddof=1) + eps)
        adv[idx] = a
    return adv


def norm_groups(keys, norm="group"):
    """The lists of positions that share a mean and std under `norm` (see advantages)."""
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {', '.join(NORMS)}, got {norm!r}")
    if norm == "agent":
        if not all(isinstance(k, tuple) and len(k) >= 2 for k in keys):
            raise ValueError("norm='agent' needs tuple keys (problem, ..., role)")
        keys = [(k[0], k[-1]) for k in keys]
    return list(group_indices(keys).values())


def group_stats(rewards, keys, norm="group"):
    """Counts for the logs: the normalisation groups of `norm` (what advantages() divides by), and those
    with no learning signal (singletons, zero spread). Counted over the same groups advantages() uses, so
    zero_adv_frac is the share of groups whose samples all get A = 0, under either norm."""
    r = np.asarray(rewards, dtype=np.float64)
    groups = norm_groups(keys, norm)
    return {"groups": len(groups), "zero_adv_groups": sum(len(v) < 2 or np.ptp(r[v]) == 0.0 for v in groups)}
