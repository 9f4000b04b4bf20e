"""Re-pairing collective instances by end time (reduce.matching._rematch), against its definition.

The definition, written here the plain way (the way the reduce did it before it was vectorised):
for each kind and group, for every two ranks a < b, the distance matrix of their ends; x of rank a
and y of rank b pair when each is the other's nearest (numpy's argmin: the first row on a tie),
they end at most tol apart and both arrived before either ended (within tol); pairs are joined
in order, rank a, then rank b, then x, by `parent[find(x)] = find(y)`. The vectorised version must
give the same instances, in the same order, under the same keys, on inputs built to hit its edge
cases: equal ends, ends exactly halfway between two others, ranks with nothing near, a rank with a
NaN end, several kinds and groups, and index labels that are not 0..n-1.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hpcprof.analysis.reduce import matching


def rematch_by_definition(rest: pd.DataFrame, tol: float) -> pd.DataFrame:
    parent: dict = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for _, grp in rest.groupby(["kind", "group"]):
        by_rank = {int(r): (g.index.to_numpy(), g["end"].to_numpy(float), g["arrival"].to_numpy(float))
                   for r, g in grp.groupby("rank", sort=True)}
        ranks = list(by_rank)
        for i, a in enumerate(ranks):
            ia, ea, aa = by_rank[a]
            for b in ranks[i + 1:]:
                ib, eb, ab = by_rank[b]
                d = np.abs(ea[:, None] - eb[None, :])
                na, nb = d.argmin(axis=1), d.argmin(axis=0)
                x = np.arange(na.size)
                y = na
                ok = (nb[y] == x) & (d[x, y] <= tol) & (np.maximum(aa[x], ab[y]) <= np.minimum(ea[x], eb[y]) + tol)
                for xx, yy in zip(x[ok], y[ok]):
                    parent[find(ia[xx])] = find(ib[yy])
    if not parent:
        return rest.iloc[:0]
    members = list(parent)
    roots = pd.Series([find(i) for i in members], index=members)
    sub = rest.loc[members].assign(_root=roots.to_numpy())
    g = sub.groupby("_root")["rank"]
    ok = (g.transform("size") >= 2) & (g.transform("nunique") == g.transform("size"))
    sub = sub[ok.to_numpy()]
    order = {r: i for i, r in enumerate(dict.fromkeys(roots.to_numpy().tolist()))}
    sub = sub.iloc[np.argsort(sub["_root"].map(order).to_numpy(), kind="stable")]
    return sub.assign(key=["end-matched|" + str(r) for r in sub["_root"]]).drop(columns="_root")


def leftovers(rng: np.random.Generator, n_ranks: int, per_rank: int, base: float, jitter: float, nan_rank: bool) -> pd.DataFrame:
    """Instances of collectives that end near common instants, on a grid of 10 us so that equal ends
    and ends exactly halfway between two others are frequent; some instances lost on some ranks,
    some doubled (two instances of one rank with the same end)."""
    rows = []
    centres = base + 10.0 * rng.integers(0, 40 * per_rank, per_rank)
    kinds = rng.choice(["allreduce", "broadcast"], per_rank)
    groups = rng.choice(["g0", "g1"], per_rank)
    for r in range(n_ranks):
        for c, kind, group in zip(centres, kinds, groups):
            if rng.random() < 0.15:  # this rank has no instance of that collective
                continue
            end = c + 10.0 * rng.integers(-int(jitter), int(jitter) + 1)
            for _ in range(2 if rng.random() < 0.2 else 1):
                rows.append({"rank": r, "kind": kind, "group": group, "end": end,
                             "arrival": end - 10.0 * rng.integers(1, 30), "step": 0})
    df = pd.DataFrame(rows)
    if nan_rank and len(df):
        df.loc[df.index[df["rank"] == n_ranks - 1][:1], "end"] = np.nan
    df.index = rng.permutation(np.arange(len(df)) * 3 + 7)  # labels as a filtered frame has them
    return df


@pytest.mark.parametrize("seed", range(12))
def test_rematch_is_its_definition(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    n_ranks = int(rng.integers(2, 10))
    base = 1.7e15 if seed % 2 else 0.0  # epoch microseconds, or a trace's own small times
    df = leftovers(rng, n_ranks, per_rank=int(rng.integers(1, 25)), base=base, jitter=rng.choice([0, 1, 3, 8]),
                   nan_rank=seed % 3 == 0)
    tol = float(rng.choice([10.0, 25.0, 80.0]))
    if seed % 4 == 0:  # pairs joined a few at a time: the skipping of pairs already joined is exercised
        monkeypatch.setattr(matching, "UNION_BATCH", 3)
    want = rematch_by_definition(df, tol)
    got = matching._rematch(df, tol)
    pd.testing.assert_frame_equal(got, want)
    assert list(got["key"]) == list(want["key"])
    # the grouping rules, stated apart from the definition's code (which shares _rematch's last lines)
    g = got.groupby("key")
    assert (g.size() >= 2).all() and (g["rank"].nunique() == g.size()).all()
    assert (g["kind"].nunique() == 1).all() and (g["group"].nunique() == 1).all()
    assert got["end"].notna().all() and not got.index.duplicated().any()


def test_rematch_groups_a_collective_across_many_ranks():
    """64 ranks, every collective on every rank: one group of 64 per collective, whatever the order
    the pairs were joined in."""
    rng = np.random.default_rng(3)
    n, k = 64, 20
    ends = np.arange(k) * 1000.0
    df = pd.DataFrame({"rank": np.repeat(np.arange(n), k), "kind": "allreduce", "group": "g",
                       "end": np.tile(ends, n) + rng.integers(-3, 4, n * k), "arrival": np.tile(ends, n) - 500.0})
    got = matching._rematch(df, 20.0)
    assert len(got) == n * k
    assert (got.groupby("key")["rank"].nunique() == n).all() and got["key"].nunique() == k
    pd.testing.assert_frame_equal(got, rematch_by_definition(df, 20.0))
