"""The per-rank map: analyse ONE rank's trace alone and leave small tables for the reduce.

- mapper.py: ``analyze_rank`` (the unit an executor runs), writing through the parse cache;
- result.py: :class:`RankResult`, what ``analyze_rank`` returns to the executors and the reduce;
- HTA's own analyzers on that rank (temporal, idle time, overlap, kernels, launches) are
  analysis/hta/, which owns everything HTA;
- timeline.py: the host/GPU timeline (steps, collectives, time per category) and interval algebra;
- control.py: hpcprof's own control collectives in the trace, told apart from the job's;
- timeline_piece.py: the rank's piece of the merged timeline (cached; the parent only merges);
- select.py: which results enter the reduce (bad files, duplicates, other jobs become warnings);
- further single-rank views (e.g. operators.py) follow the same rule: one rank, no other rank's data.
"""
