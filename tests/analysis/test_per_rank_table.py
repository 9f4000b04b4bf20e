"""reduce.per_rank.per_rank_table splits the step rows by rank once: each rank's numbers are those of
its own rows (a mask per rank), ranks without rows or step records included."""

import numpy as np
import pandas as pd

from hpcprof.analysis.reduce.per_rank import per_rank_table


def test_each_rank_gets_the_numbers_of_its_own_rows():
    rng = np.random.default_rng(3)
    n = 40
    steps = pd.DataFrame({"rank": rng.choice([2, 0, 5], n), "step": np.arange(n), "dur_ms": rng.random(n) * 10,
                          "data_loading_ms": rng.random(n), "host_gap_ms": rng.random(n)})
    steps.loc[3, "dur_ms"] = np.nan
    steps.loc[steps["rank"] == 5, "dur_ms"] = 0.0  # no step time to share out
    stats = pd.DataFrame({"rank": [2], "step_median_ms": [7.5]})
    metas = {r: {"file": f"rank-{r}.json", "temporal": {"idle_time_pctg": 1.0 * r}} for r in (0, 1, 2, 5)}
    got = per_rank_table(metas, {0: "a"}, steps, stats).set_index("rank")
    for r in metas:
        st = steps[steps["rank"] == r]
        median = float(st["dur_ms"].median()) if len(st) else None
        assert got.loc[r, "profiled_steps"] == len(st)
        want = 7.5 if r == 2 else median
        assert (got.loc[r, "step_time_ms"] == want) or (pd.isna(got.loc[r, "step_time_ms"]) and want is None)
        total = st["dur_ms"].sum()
        for col, part in (("host_data_loading_pct", "data_loading_ms"), ("host_gap_pct", "host_gap_ms")):
            if total:
                assert got.loc[r, col] == float(100 * st[part].sum() / total)
            else:
                assert pd.isna(got.loc[r, col])
    assert got.loc[0, "node"] == "a" and pd.isna(got.loc[1, "node"]) and got.loc[1, "profiled_steps"] == 0
