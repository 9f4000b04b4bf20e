"""The reduce's vectorised steps against the loops they replaced, bit for bit: cause.window_excesses
(every rank's windows of a step graph at once, one median call) and step_graph's anchors,
segments and medians of the others (build_graphs, _anchors, _median_others), and the measured
replay the critical path takes from the what-if's scenarios (StepGraph.measured_ends), on generated jobs (GPU and CPU anchors, ranks missing from
collectives, NaN category times) and the 8 DLRM ranks."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hpcprof.analysis.ranks.categories import CAUSE_CATEGORIES
from hpcprof.analysis.reduce.cause import ClockIndex, cause_clock, window_excesses
from hpcprof.analysis.reduce.matching import match_collectives
from hpcprof.analysis.reduce.step_graph import _anchors, _median_others, _median_others_loop, build_graphs, replay, replay_ends, scenarios

# the reference loop's medians of a category no other rank has: NaN, as numpy warns
pytestmark = pytest.mark.filterwarnings("ignore:All-NaN slice:RuntimeWarning")


def _reference(g, s, clock):
    """The rank-at-a-time window excess (cause.window_excess before window_excesses)."""
    ca, ce, s0, s1 = clock
    R, K = g.member.shape

    def window(i, k, after):
        p = g.prev[i, k] if k >= 0 else g.last_k[i]
        t0, c0 = (g.coll_end[i, p], ce[i, p]) if p >= 0 else (g.start[i], s0[i])
        if after >= 0 and g.member[i, after] and g.arrival[i, after] > t0:
            c0 = ca[i, after]
        return (ca[i, k] if k >= 0 else s1[i]) - c0

    excess = np.zeros(len(CAUSE_CATEGORIES))
    last = np.nanargmax(np.where(g.member, g.arrival, -np.inf), axis=0) if K else np.empty(0, dtype=int)
    after = -1
    for k in np.flatnonzero(last == s):
        others = [window(i, k, after) for i in np.flatnonzero(g.member[:, k]) if i != s]
        if others:
            excess += np.nan_to_num(window(s, k, after) - np.nanmedian(np.asarray(others), axis=0))
        after = k
    if int(np.argmax(g.end)) == s:
        others = [window(i, -1, after) for i in range(R) if i != s]
        excess += np.nan_to_num(window(s, -1, after) - np.nanmedian(np.asarray(others), axis=0))
    return excess


def _reference_anchors(member, arr, end, chain, by_end):
    """step_graph._anchors as it was, one rank and one collective at a time."""
    R, K = member.shape
    chain = chain & member
    own = np.full((R, K), -1, dtype=int)
    for i in range(R):
        ks = np.flatnonzero(member[i])
        for n, k in enumerate(ks):
            done = [j for j in ks[:n] if chain[i, j] and end[i, j] <= arr[i, k]]
            if done:
                own[i, k] = max(done, key=lambda j: (end[i, j], j)) if by_end else done[-1]
    anchor = np.full((R, K), -1, dtype=int)
    for k in range(K):
        m = np.flatnonzero(member[:, k])
        common = own[m, k].min() if m.size else -1
        for i in m:
            anchor[i, k] = common if common < 0 or chain[i, common] else own[i, k]
    return anchor


@pytest.mark.parametrize("seed", range(20))
def test_anchors_are_the_reference_anchors(seed):
    rng = np.random.default_rng(seed)
    R, K = int(rng.integers(1, 7)), int(rng.integers(0, 9))
    arr = np.round(rng.random((R, K)) * 10, 0)  # rounded: equal ends and arrivals happen
    end = arr + np.round(rng.random((R, K)) * 4, 0)
    arr[rng.random((R, K)) < 0.25] = np.nan
    member = ~np.isnan(arr)
    chain = rng.random((R, K)) < 0.7
    for by_end in (False, True):
        assert np.array_equal(_anchors(member, arr, end, chain, by_end), _reference_anchors(member, arr, end, chain, by_end))


@pytest.mark.parametrize("seed", range(30))
def test_medians_of_the_others_are_those_of_the_loop(seed):
    rng = np.random.default_rng(seed)
    R, K = int(rng.integers(0, 9)), int(rng.integers(0, 7))
    x = np.round(rng.normal(size=(R, K)), int(rng.integers(0, 3)))  # rounded: ties happen
    x[rng.random((R, K)) < 0.1] = -0.0
    x[rng.random((R, K)) < 0.1] = np.nan
    member = rng.random((R, K)) < 0.8
    if seed % 7 == 6 and R and K:
        x[0, 0], member[0, 0] = np.inf, True  # an infinite value: the loop itself
    got, want = _median_others(x, member), _median_others_loop(x, member)
    assert np.array_equal(got, want, equal_nan=True) and np.array_equal(np.signbit(got), np.signbit(want))


def _job(rng, n_ranks, n_steps, n_colls, cpu):
    colls, steps = [], []
    for r in range(n_ranks):
        cum = rng.random(len(CAUSE_CATEGORIES)) * 3
        t = rng.random() * 2
        for s in range(n_steps):
            steps.append({"rank": r, "step": s, "ts_us": t * 1e3, **{f"cum_{c}_start_ms": v for c, v in zip(CAUSE_CATEGORIES, cum)}})
            for k in range(n_colls):
                if rng.random() < 0.15:  # this rank is not in this collective
                    continue
                t += rng.exponential(2.0)
                ca = cum + rng.exponential(0.5, len(CAUSE_CATEGORIES))
                if rng.random() < 0.05:
                    ca[rng.integers(len(CAUSE_CATEGORIES))] = np.nan
                end = t + rng.exponential(1.0)
                ce = ca + rng.exponential(0.2, len(CAUSE_CATEGORIES))
                colls.append({"rank": r, "group": "g", "kind": "ar", "name": "ar", "seq": float(s * 1000 + k), "step": s, "idx": k,
                              "arrival_us": t * 1e3, "end_us": end * 1e3, "source": "cpu" if cpu else "gpu",
                              "waited": bool(rng.random() < 0.7),
                              **{f"cum_{c}_arrival_ms": v for c, v in zip(CAUSE_CATEGORIES, ca)},
                              **{f"cum_{c}_end_ms": v for c, v in zip(CAUSE_CATEGORIES, ce)}})
                t, cum = end, ce
            t += rng.exponential(1.0)
            cum = cum + rng.exponential(0.3, len(CAUSE_CATEGORIES))
            steps[-1].update({"end_us": t * 1e3, **{f"cum_{c}_stop_ms": v for c, v in zip(CAUSE_CATEGORIES, cum)}})
    return pd.DataFrame(colls), pd.DataFrame(steps)


def _check(colls, steps, hosts, gpu=True):
    mt = match_collectives(colls, hosts)
    graphs = [g for g in build_graphs(mt.df, steps, mt.offsets) if g.member.shape[1] > 0]
    assert graphs
    index = ClockIndex(mt.df, steps)
    for g in graphs:
        R = len(g.ranks)
        if gpu:  # (CPU graphs anchor on the chain points: _anchors is checked on its own above)
            assert np.array_equal(g.prev, _reference_anchors(g.member, g.arrival, g.coll_end, g.member, False))
        seg = np.full(g.member.shape, np.nan)
        for i in range(R):
            for k in np.flatnonzero(g.member[i]):
                p = g.prev[i, k]
                seg[i, k] = g.arrival[i, k] - (g.coll_end[i, p] if p >= 0 else g.start[i])
        assert np.array_equal(g.seg, seg, equal_nan=True)
        assert g.measured_ends is None
        t = replay(g, *scenarios(g))  # keeps scenario 0's ends: those of the measured replay alone
        assert all(np.array_equal(a, b[0]) for a, b in zip(g.measured_ends, replay_ends(g, g.seg[None], g.tail[None])))
        assert t[0] == replay(g, g.seg[None], g.tail[None])[0]
        clock = cause_clock(g, mt.df, steps, index)
        got = window_excesses(g, clock)
        want = np.array([_reference(g, i, clock) for i in range(len(g.ranks))])
        assert np.array_equal(got, want), (g.step, got - want)
        # the clock gathered with the index is the one gathered without it
        for a, b in zip(clock, cause_clock(g, mt.df, steps)):
            assert np.array_equal(a, b, equal_nan=True)


@pytest.mark.parametrize("seed", range(8))
def test_generated_jobs_give_the_reference_excesses(seed):
    rng = np.random.default_rng(seed)
    n_ranks = int(rng.integers(2, 9))
    colls, steps = _job(rng, n_ranks, int(rng.integers(1, 4)), int(rng.integers(1, 12)), cpu=bool(seed % 2))
    _check(colls, steps, {r: "n" for r in range(n_ranks)}, gpu=not seed % 2)


def test_dlrm_gives_the_reference_excesses(parse_cache):
    from hpcprof.analysis.decode.load import discover_traces
    from hpcprof.analysis.executors import run_map
    from hpcprof.analysis.reduce.crossrank import rank_table
    from hpcprof.analysis.ranks.select import select_ranks

    from .conftest import DLRM, require

    res = run_map("local", discover_traces(require(DLRM)), parse_cache, True, workers=1, progress=False)
    keep, _ = select_ranks(res, {}, None, [])
    _check(rank_table(keep, "collectives"), rank_table(keep, "steps"), {r: "n" for r in keep})
