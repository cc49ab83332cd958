"""python -m pytest -q test_grouping.py"""
import numpy as np
import pytest

from grouping import NORMS, advantages, group_stats


def test_hand_computed():
    # group a: rewards 1, 3 -> mean 2, std(ddof=1) = sqrt(2); group b: 0, 0, 3 -> mean 1, std sqrt(3)
    a = advantages([1.0, 0.0, 3.0, 0.0, 3.0], ["a", "b", "a", "b", "b"], eps=0.0)
    s2, s3 = np.sqrt(2), np.sqrt(3)
    np.testing.assert_allclose(a, [-1 / s2, -1 / s3, 1 / s2, -1 / s3, 2 / s3], rtol=1e-12)


def test_eps_in_denominator():
    a = advantages([0.0, 1.0], [0, 0], eps=1.0)
    std = np.std([0, 1], ddof=1)
    np.testing.assert_allclose(a, [-0.5 / (std + 1), 0.5 / (std + 1)])


def test_singletons_and_zero_spread_get_zero():
    a = advantages([5.0, 2.0, 2.0, 2.0, 7.0, 1.0], [1, 2, 2, 2, 3, 3])
    assert a[0] == 0.0 and np.all(a[1:4] == 0.0)
    assert a[4] > 0 > a[5]


def test_std_norm_off():
    a = advantages([1.0, 2.0, 6.0], [(0, 0, "x")] * 3, std_norm=False)
    np.testing.assert_allclose(a, [-2.0, -1.0, 3.0])


def test_tuple_keys_and_order_preserved():
    keys = [(0, 0, "tool"), (0, 1, "tool"), (0, 0, "tool"), (0, 1, "tool")]
    a = advantages([0.0, 10.0, 1.0, 20.0], keys, std_norm=False)
    np.testing.assert_allclose(a, [-0.5, -5.0, 0.5, 5.0])
    # (0, 0, "tool") and (0, 0, "planner") are different groups
    b = advantages([0.0, 1.0], [(0, 0, "tool"), (0, 0, "planner")])
    assert np.all(b == 0.0)


def test_random_against_float64_reference():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 40))
        keys = [tuple(k) for k in rng.integers(0, 4, size=(n, 2))]
        r = rng.normal(size=n).round(int(rng.integers(0, 3)))
        got = advantages(r, keys, std_norm=True, eps=1e-6)
        ref = np.zeros(n)
        for k in set(keys):
            idx = [i for i in range(n) if keys[i] == k]
            g = np.array([r[i] for i in idx], dtype=np.float64)
            if len(g) > 1 and g.max() != g.min():
                ref[idx] = (g - g.mean()) / (g.std(ddof=1) + 1e-6)
        np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-12)


def test_group_stats_and_bad_input():
    st = group_stats([1, 1, 0, 1, 5], ["a", "a", "b", "b", "c"])
    assert st == {"groups": 3, "zero_adv_groups": 2}  # "a": zero spread, "c": a singleton
    with pytest.raises(ValueError):
        advantages([1.0, 2.0], ["a"])


def test_agent_wise_norm_pools_an_agents_turns_on_its_problem_hand_computed():
    # Dr. MAS (arXiv 2602.08847, Eq. 5): one mean and std per (problem, agent) over all its responses
    keys = [(0, 0, "tool"), (0, 0, "tool"), (0, 1, "tool"), (0, 1, "tool"), (0, 0, "planner"), (0, 0, "planner"),
            (1, 0, "tool"), (1, 0, "tool")]
    r = [0.0, 2.0, 4.0, 6.0, 1.0, 5.0, 10.0, 30.0]
    s2, s8, s20 = np.sqrt(2), np.sqrt(8), np.sqrt(20 / 3)  # std(ddof=1) of [0, 2], [1, 5], [0, 2, 4, 6]
    group = advantages(r, keys, eps=0.0)
    np.testing.assert_allclose(group, [-1 / s2, 1 / s2, -1 / s2, 1 / s2, -2 / s8, 2 / s8, -10 / np.sqrt(200), 10 / np.sqrt(200)])
    agent = advantages(r, keys, eps=0.0, norm="agent")
    np.testing.assert_allclose(agent, [-3 / s20, -1 / s20, 1 / s20, 3 / s20, -2 / s8, 2 / s8, -10 / np.sqrt(200), 10 / np.sqrt(200)])
    np.testing.assert_allclose(advantages(r, keys, std_norm=False, norm="agent")[:4], [-3, -1, 1, 3])
    # keys already (problem, role) (parallel sampling): nothing to pool, the same as "group"
    two = [(k[0], k[2]) for k in keys]
    np.testing.assert_array_equal(advantages(r, two, norm="agent"), advantages(r, two))
    with pytest.raises(ValueError):
        advantages(r, keys, norm="global")


@pytest.mark.parametrize("norm", NORMS)
def test_zero_adv_groups_are_the_groups_advantages_leaves_at_zero(norm):
    # train.py logs zero_adv_frac = zero_adv_groups / groups: it must count the groups advantages() divides
    # by under the norm in use (under "agent" it counted tree groups: 100% while every sample trained)
    rng = np.random.default_rng(1)
    for _ in range(200):
        n = int(rng.integers(1, 30))
        keys = [(int(p), int(t), ("tool", "planner")[int(a) % 2]) for p, t, a in rng.integers(0, 3, size=(n, 3))]
        r = rng.integers(0, 2, size=n).astype(float)
        adv = advantages(r, keys, norm=norm)
        pools = {}
        for i, k in enumerate(keys):
            pools.setdefault((k[0], k[2]) if norm == "agent" else k, []).append(i)
        st = group_stats(r, keys, norm)
        assert st == {"groups": len(pools), "zero_adv_groups": sum(not adv[v].any() for v in pools.values())}


def test_zero_adv_frac_under_agent_norm_when_every_sample_trains():
    # each tree group (problem, turn, role) has zero spread, but each agent's pool over turns does not
    keys = [(0, 0, "tool")] * 2 + [(0, 1, "tool")] * 2
    r = [0.0, 0.0, 1.0, 1.0]
    assert advantages(r, keys, norm="agent").all()
    assert group_stats(r, keys, "agent") == {"groups": 1, "zero_adv_groups": 0}
    assert group_stats(r, keys, "group") == {"groups": 2, "zero_adv_groups": 2}
