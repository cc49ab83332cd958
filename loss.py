"""The objective, on one screen: per-token log-probs and advantages in, a loss and named stats out.

An ablation of the objective (GSPO's sequence-level ratio, another normaliser, another clip, a KL
variant) is a new function here with the same signature, passed to `policies.update` as `loss_fn`
(train.py builds it in one line); the update plumbing (log-probs, micro-batches, ranks in lockstep,
all-reduce, optimiser step) stays as it is and logs whatever stats the function returns.

The contract `policies.update` relies on:
    logp, old_logp, adv, ref_logp: [T] tensors over the response tokens of ONE micro-batch, samples
        concatenated in order; adv is each sample's advantage broadcast to its tokens; ref_logp is
        None without a reference model. lengths: each sample's token count (sample boundaries, for
        sequence-level objectives). denom: the token count of the whole mini-batch over ALL ranks.
    returns (loss, stats): the loss must be additive over micro-batches and ranks (here: a token SUM
        divided by denom, so accumulating micro-batches and summing ranks gives the mini-batch
        token-mean); stats: name -> a token sum (a float or 0-d tensor) that update sums over
        micro-batches and ranks, divides by denom and averages over mini-batches (e.g. clipfrac).
    Samples with advantage 0 are skipped by update unless kl_coef > 0: for PPO-clip they carry no
    gradient. An objective where they do must say so (update's `skip_zero_adv=False`).

    python -m pytest -q test_policies.py
"""
import torch


def ppo_clip(logp, old_logp, adv, lengths, denom, ref_logp=None, eps_low=0.2, eps_high=0.2, kl_coef=0.0):
    """PPO-clip (no value net): per token -min(r*A, clip(r, 1-eps_low, 1+eps_high)*A), plus optionally
    kl_coef * k3(pi || ref); token-mean over the mini-batch (the paper's normaliser)."""
    ratio = torch.exp(logp - old_logp)
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    tok = -torch.minimum(ratio * adv, clipped * adv)
    if ref_logp is not None and kl_coef > 0:
        d = ref_logp - logp
        tok = tok + kl_coef * (torch.exp(d) - d - 1)  # k3 estimator of KL(pi || ref), unbiased, >= 0
    clipfrac = ((ratio < 1 - eps_low) | (ratio > 1 + eps_high)).float().sum()
    return tok.sum() / denom, {"clipfrac": clipfrac}
