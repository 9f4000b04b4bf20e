"""The merged timeline: every rank's events in one Perfetto/Chrome trace, on one aligned clock.

- trace.py: the file, streamed from the ranks' pieces (ranks/timeline_piece.py writes each rank's
  piece during the map), one rank at a time, on the clock alignment of reduce/clocks.py;
- render.py: one rank's events as JSON text (the window of the chosen steps, the lanes' labels);
- budget.py: the size budget (which kinds of event are dropped first when the file would be too big);
- critical_lane.py: the critical path as a lane of its own;
- gzip_out.py: the .json.gz, one gzip member (python-isal's threaded writer, Python's gzip where missing).
"""
