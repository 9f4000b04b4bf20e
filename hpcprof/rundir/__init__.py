"""The run directory: the contract between the launch side, the ranks and the analysis.

- layout.py: paths and name templates, atomic writes, :class:`RunDir`;
- manifest.py: the typed manifest.json and its one writer (manifest_codec.py: its records to JSON and back);
- records.py: step records, failure notes and region names, each defined once.
"""

from .layout import (
    ANALYSIS_DIR,
    CAPTURE_DIR_TEMPLATE,
    CHECKPOINT_FILE,
    CYCLE_DIR_TEMPLATE,
    FAILURE_TEMPLATE,
    FAILURES_DIR,
    EXIT_TEMPLATE,
    FATAL_TEMPLATE,
    LOGS_DIR,
    MANIFEST_FILE,
    SPEC_FILE,
    STEPS_DIR,
    STEPS_TEMPLATE,
    TRACE_TEMPLATE,
    TRACE_TMP_DIR,
    TRACES_DIR,
    TRIGGERS_FILE,
    RunDir,
    RunDirError,
    atomic_write_text,
    default_run_name,
    rank_from_name,
    read_jsonl,
    temporary_then_rename,
)
from .manifest import Attempt, Clock, Drills, Manifest, RankEntry, Versions
from .records import (
    CONTROL_REGION,
    FAILURE_KEYS,
    KNOWN_REGIONS,
    REGION_BACKWARD,
    REGION_COPY,
    REGION_DATA,
    REGION_FORWARD,
    REGION_OPTIMIZER,
    REGIONS,
    STEP_KEYS,
    STEP_TIME_KEYS,
    FailureNote,
    StepRecord,
    StepWriter,
    control_label,
    region_label,
)

__all__ = [
    "ANALYSIS_DIR", "CAPTURE_DIR_TEMPLATE", "CHECKPOINT_FILE", "CYCLE_DIR_TEMPLATE", "FAILURE_TEMPLATE", "FAILURES_DIR",
    "EXIT_TEMPLATE", "FATAL_TEMPLATE", "LOGS_DIR", "MANIFEST_FILE", "SPEC_FILE", "STEPS_DIR", "STEPS_TEMPLATE",
    "TRACE_TEMPLATE", "TRACE_TMP_DIR", "TRACES_DIR", "TRIGGERS_FILE",
    "RunDir", "RunDirError", "atomic_write_text", "default_run_name", "rank_from_name", "read_jsonl",
    "temporary_then_rename",
    "Attempt", "Clock", "Drills", "Manifest", "RankEntry", "Versions",
    "CONTROL_REGION", "FAILURE_KEYS", "KNOWN_REGIONS", "REGION_BACKWARD", "REGION_COPY", "REGION_DATA",
    "REGION_FORWARD", "REGION_OPTIMIZER", "REGIONS",
    "STEP_KEYS", "STEP_TIME_KEYS", "FailureNote", "StepRecord", "StepWriter", "control_label", "region_label",
]
