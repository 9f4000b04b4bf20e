"""Re-evaluate the within-run interval (one run each: the first replicates of compare_acceptance.py's
pairs) with single-step and block resampling:

    python benchmarks/compare_resampling.py [OUT_DIR of compare_acceptance.py]"""
import sys
from pathlib import Path

import numpy as np

from hpcprof.analysis.reduce import bootstrap as stats
from hpcprof.compare.core import _arrays
from hpcprof.compare.series import load_series

R = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/hpcprof-compare-acceptance")


def arr(pair, name):
    return _arrays(load_series(name, R / pair / "ladder" / f"{name}-r1" / "analysis"))["samples_per_s"]


for L in ("iid", "sqrt", "cbrt"):
    stats.block_length = {"iid": lambda n: 1, "sqrt": lambda n: max(1, int(np.ceil(np.sqrt(n)))),
                          "cbrt": lambda n: max(1, int(np.ceil(n ** (1 / 3))))}[L]
    out = []
    for pair in sorted(p.name for p in R.glob("pair*")):
        try:
            a, b, s = arr(pair, "01-healthy-a"), arr(pair, "02-healthy-b"), arr(pair, "03-straggler")
        except Exception:
            continue
        h, st = stats.compare_metric("samples_per_s", a, b), stats.compare_metric("samples_per_s", a, s)
        out.append((pair, round(h.change_pct, 1), [round(c, 1) for c in h.ci_pct], h.verdict, round(st.change_pct, 1),
                    [round(c, 1) for c in st.ci_pct], st.verdict))
    nh = sum(o[3] == stats.NO_CHANGE for o in out)
    ns = sum(o[6] == "slower" for o in out)
    print(L, f"healthy no-change {nh}/{len(out)}, straggler slower {ns}/{len(out)}")
    for o in out:
        print("  ", o)
