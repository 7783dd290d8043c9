"""Tie groups and Chatbot Arena ranks against hand-computed cases and a direct implementation."""

from __future__ import annotations

import numpy as np
import pytest

from countboard.quantify.ranks import arena_ranks, rank_ranges, ranks_within, tie_groups


def _direct_groups(mean, low, high, higher: bool) -> list[int]:
    """Connected components of the graph "intervals overlap" (union-find), numbered by their best upper bound."""
    m, lo, hi = (np.asarray(x, dtype=float) for x in (mean, low, high))
    if not higher:
        m, lo, hi = -m, -hi, -lo
    n = len(m)
    parent = list(range(n))

    def find(i):
        while parent[i] != i:
            i = parent[i]
        return i

    for i in range(n):
        for j in range(n):
            if lo[i] <= hi[j] and lo[j] <= hi[i]:
                parent[find(i)] = find(j)
    roots = {}
    for i in sorted(range(n), key=lambda k: -hi[k]):
        roots.setdefault(find(i), len(roots) + 1)
    return [roots[find(i)] for i in range(n)]


def test_hand_computed_groups_higher_is_better():
    # A [.85,.95] and B [.70,.86] overlap; C [.40,.60] and D [.30,.50] overlap; E [0,.2] alone
    mean, low, high = [0.9, 0.8, 0.5, 0.45, 0.1], [0.85, 0.7, 0.4, 0.3, 0.0], [0.95, 0.86, 0.6, 0.5, 0.2]
    assert tie_groups(mean, low, high, True).tolist() == [1, 1, 2, 2, 3]
    # Arena: B has A's lower bound .85 below its upper .86, so nothing is surely ahead of B; C has A and B ahead
    assert arena_ranks(mean, low, high, True).tolist() == [1, 1, 3, 3, 5]


def test_a_chain_of_overlaps_is_one_group_though_its_ends_do_not_overlap():
    # A [.8,1] overlaps B [.6,.85], B overlaps C [.4,.65]; A and C do not: one group, but C's arena rank is 2
    mean, low, high = [0.9, 0.7, 0.5], [0.8, 0.6, 0.4], [1.0, 0.85, 0.65]
    assert tie_groups(mean, low, high, True).tolist() == [1, 1, 1]
    assert arena_ranks(mean, low, high, True).tolist() == [1, 1, 2]


def test_lower_is_better_turns_the_order():
    # MAE: 1 [0.5,1.5] and 2 [1.2,2.8] overlap; 9 [8,10] alone and last
    assert tie_groups([2.0, 9.0, 1.0], [1.2, 8.0, 0.5], [2.8, 10.0, 1.5], False).tolist() == [1, 2, 1]
    assert arena_ranks([2.0, 9.0, 1.0], [1.2, 8.0, 0.5], [2.8, 10.0, 1.5], False).tolist() == [1, 3, 1]


def test_touching_bounds_overlap_and_missing_values_get_no_group():
    assert tie_groups([0.6, 0.4], [0.5, 0.3], [0.7, 0.5], True).tolist() == [1, 1]
    got = tie_groups([0.6, np.nan, 0.1], [0.5, np.nan, np.nan], [0.7, np.nan, np.nan], True)
    assert got[0] == 1 and np.isnan(got[1]) and got[2] == 2


def test_without_bounds_equal_values_share_a_group():
    v = [0.5, 0.9, 0.9, 0.1]
    assert tie_groups(v, v, v, True).tolist() == [2, 1, 1, 3]


@pytest.mark.parametrize("higher", [True, False])
def test_against_the_direct_implementation(higher):
    rng = np.random.default_rng(11)
    for _ in range(200):
        n = int(rng.integers(1, 12))
        mean = rng.random(n)
        half = rng.random(n) * 0.2
        low, high = mean - half, mean + half
        assert tie_groups(mean, low, high, higher).tolist() == _direct_groups(mean, low, high, higher)
        surely_ahead = [sum((lo_j > hi_i) if higher else (hi_j < lo_i) for lo_j, hi_j in zip(low, high, strict=True))
                        for lo_i, hi_i in zip(low, high, strict=True)]
        assert arena_ranks(mean, low, high, higher).tolist() == [1 + k for k in surely_ahead]


def test_groups_never_interleave_with_arena_ranks():
    """A better group's entries all have an arena rank no worse than any entry of a later group."""
    rng = np.random.default_rng(3)
    for _ in range(100):
        mean = rng.random(10)
        half = rng.random(10) * 0.15
        group = tie_groups(mean, mean - half, mean + half, True)
        arena = arena_ranks(mean, mean - half, mean + half, True)
        for g in range(1, int(group.max())):
            assert arena[group == g].max() <= arena[group == g + 1].min()


def test_ranks_within_ranks_each_group_apart():
    best, worst, group = ranks_within([0, 1, 0, 1], [0.9, 0.9, 0.2, 0.1], [0.8, 0.0, 0.1, 0.0],
                                      [1.0, 1.0, 0.3, 0.2], True)
    assert best.tolist() == [1, 1, 2, 1] and worst.tolist() == [1, 2, 2, 2] and group.tolist() == [1, 1, 2, 1]
    ref_best, ref_worst = rank_ranges([0.9, 0.2], [0.8, 0.1], [1.0, 0.3], True)
    assert best[[0, 2]].tolist() == ref_best.tolist() and worst[[0, 2]].tolist() == ref_worst.tolist()
    best, worst, group = ranks_within([0, 0, 0], [0.5, 0.7, 0.5], None, None, True)
    assert best.tolist() == [2, 1, 2] and group.tolist() == [2, 1, 2]
