"""Re-evaluate the run-comparison acceptance (compare_acceptance.py's runs) with single-step and
block resampling: python benchmarks/compare_resampling.py [OUT_DIR of compare_acceptance.py]"""
import sys
from pathlib import Path
import numpy as np
from hpcprof.compare import stats
from hpcprof.compare.series import load_series
from hpcprof.compare.core import _arrays
R = Path(sys.argv[1] if len(sys.argv) > 1 else '/tmp/hpcprof-compare-acceptance') / 'runs'
def arr(name):
    return _arrays(load_series(name, R / name / 'analysis'))['samples_per_s']
for L in ('iid', 'sqrt', 'cbrt'):
    stats.block_length = {'iid': lambda n: 1, 'sqrt': lambda n: max(1, int(np.ceil(np.sqrt(n)))), 'cbrt': lambda n: max(1, int(np.ceil(n ** (1/3))))}[L]
    out = []
    for i in range(10):
        try:
            a, b, s = arr(f'h{i}a'), arr(f'h{i}b'), arr(f's{i}')
        except Exception as e:
            continue
        h = stats.compare_metric('samples_per_s', a, b); st = stats.compare_metric('samples_per_s', b, s)
        out.append((i, round(h.change_pct, 1), [round(c, 1) for c in h.ci_pct], h.verdict, round(st.change_pct, 1), [round(c, 1) for c in st.ci_pct], st.verdict))
    nh = sum(o[3] == stats.NO_CHANGE for o in out); ns = sum(o[6] == 'slower' for o in out)
    print(L, f'healthy no-change {nh}/{len(out)}, straggler slower {ns}/{len(out)}')
    for o in out: print('  ', o)
