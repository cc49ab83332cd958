"""Intervals for the miniature tables (table.py): a row's success over seeds and test problems, and the
PAIRED difference of two rows, with a 95% interval and a one-word verdict.

    python -m pytest -q test_stats.py

The data of a row is a [seeds, problems] matrix of outcomes: eval.py's per_problem of the row trained
(and evaluated) with each seed, on the same test problems in the same order. The interval is a two-stage
percentile bootstrap: each resample draws the seeds with replacement and, independently, the problems
with replacement, and takes the mean of the selected cells; the 2.5th and 97.5th percentiles of 10,000
such means are the interval. A comparison of rows A and B resamples the same seed and problem indices
for both (A[s, p] and B[s, p] share the training seed and the test problem), i.e. it bootstraps the
matrix A - B. Both sources of noise are in it: which seeds (training and sampling randomness) and which
problems (the test set). Its coverage, simulated (a table of 100 problems of varied difficulty, a
seed effect of standard deviation SD points, 300 tables each): 3 seeds: 99% (SD 0), 97% (SD 5), 90% (SD
10), 85% (SD 15); 5 seeds: 99 / 98 / 97 / 93%. Conservative while seeds agree (each cell's own noise is
counted by both stages), narrow when they disagree and are few (3 seeds give the seed stage only 10
distinct draws): there, a verdict whose interval barely excludes 0 is weak evidence.
"""
import numpy as np

BOOT = 10_000  # resamples; the percentiles move by < 0.1 point between RNG seeds at this count


def bootstrap(x, n_boot=BOOT, seed=0):
    """(mean, low, high) of the mean of matrix x [seeds, problems]: a two-stage percentile bootstrap (95%)."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or 0 in x.shape:
        raise ValueError(f"expected a non-empty [seeds, problems] matrix, got shape {x.shape}")
    s, p = x.shape
    rng = np.random.default_rng(seed)
    # how often each seed / problem is drawn, per resample: the resampled mean is ws . x . wp / (s p)
    ws = rng.multinomial(s, np.full(s, 1 / s), size=n_boot)
    wp = rng.multinomial(p, np.full(p, 1 / p), size=n_boot)
    means = np.einsum("bs,sp,bp->b", ws, x, wp) / (s * p)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(x.mean()), float(lo), float(hi)


def paired(a, b, n_boot=BOOT, seed=0):
    """(mean, low, high) of A - B, the two matrices paired cell by cell (same seed, same problem)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired rows need the same seeds and problems: shapes {a.shape} and {b.shape}")
    return bootstrap(a - b, n_boot, seed)


def verdict(lo, hi):
    """'better' when the whole interval of A - B is above 0, 'worse' when below, else 'no difference' (at
    this budget: more seeds or problems could still tell them apart)."""
    return "better" if lo > 0 else "worse" if hi < 0 else "no difference"
