"""Trace decoding: find a run's traces, read and validate each one, decode it ONCE into an event table.

- load.py: trace discovery (a run's ``traces/`` or any folder), reading (gzip or plain), the
  per-trace metadata (rank, world size, host) and the content hash that keys the caches;
- events.py: msgspec decoding straight into small typed records, then one column-per-field table;
- stream.py: the same table decoded block by block: a large trace read as a stream (neither its
  bytes nor one record per event all in memory), the others read whole and split in blocks;
- columns.py: each block's records turned into compact columns, and the blocks joined into the table.

HTA's per-rank DataFrame is built from that table in analysis/hta/frame.py.

Nothing here looks at more than one trace, and nothing here analyses.
"""
