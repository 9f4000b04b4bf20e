"""The cross-rank reduce: job-level numbers from the small per-rank tables of the map (never a trace).

crossrank.py runs the steps in order and returns one ``Reduced``; each step is its own module
(step_stats, per_rank, kernels, whatif: straggler costs, flags and causes, recommend), as are the analyses that
other steps build on or that are wired in separately (clocks, throughput, whatif, workload: what ran and
whether its ranks worked together, ...). Nothing here
writes a file: outputs/ does.
"""
