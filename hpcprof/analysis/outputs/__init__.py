"""What the analysis writes into its output folder (``<run>/analysis`` or ``--out``).

- layout.py: the folder's paths and file names (:class:`AnalysisDir`);
- tables.py: reading the per-rank tables the map left, writing ``tables/*.csv|parquet``;
- charts.py: the PNG charts and the process pool that draws them while the reduce runs;
- summary.py: ``summary.json`` (built from the reduce's result, written atomically);
- report.py: the self-contained ``report.html``;
- run_config.py: the run's configuration as the report and the console say it (a user's workload by name);
- console.py: the few lines printed at the end of ``python -m hpcprof.analyze``;
- timeline/: the merged timeline of every rank as one Perfetto/Chrome trace, streamed from the
  ranks' pieces (its own docstring says which module does what).
"""
