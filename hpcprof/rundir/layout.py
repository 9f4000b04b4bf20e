"""The run directory's layout: the contract between launch, ranks and analysis. Every path of a run
is built here from the name templates below, and every file is written atomically (readers never
see half a file). What goes into the files is defined beside this module: the manifest in
manifest.py, step records, failure notes and region names in records.py (docs/contract.md lists
them and tests/test_contract.py checks the list against the code).

    runs/<name>/spec.toml, manifest.json, traces/rank-<r>.pt.trace.json.gz, steps/rank-<r>.jsonl,
    checkpoint/latest.pt, failures/rank-<r>.json, logs/, analysis/
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from ..spec import JobSpec, validate_run_name

SPEC_FILE = "spec.toml"
MANIFEST_FILE = "manifest.json"
TRACES_DIR = "traces"
TRACE_TEMPLATE = "rank-{rank}.pt.trace.json.gz"
CYCLE_DIR_TEMPLATE = "cycle-{cycle}"
CAPTURE_DIR_TEMPLATE = "capture-{capture}"
"""Profiler mode "triggered": capture k > 0 goes to traces/capture-<k>/ (capture 0, the baseline, to traces/)."""
TRIGGERS_FILE = "triggers.jsonl"
"""Profiler mode "triggered": steps/triggers.jsonl, one line per decision (rank 0 writes it)."""
TRACE_TMP_DIR = ".tmp"
STEPS_DIR = "steps"
STEPS_TEMPLATE = "rank-{rank}.jsonl"
CHECKPOINT_FILE = "checkpoint/latest.pt"
FAILURES_DIR = "failures"
FAILURE_TEMPLATE = "rank-{rank}.json"
FATAL_TEMPLATE = "rank-{rank}.fatal.txt"
"""Beside the failure notes: what Python's faulthandler wrote when a rank died of a fatal signal
(SIGABRT from the NCCL watchdog, SIGSEGV...), where no note can be written."""
EXIT_TEMPLATE = "rank-{rank}.exit.json"
"""Beside the failure notes: how a local rank ended when not with 0 (exit code or signal, and
when), written by the process that started it (hpcprof.witness): the one record of an os._exit(),
an exit from native code or a SIGKILL."""
_FAILURE_NOTE = re.compile(r"^rank-\d+\.json$")
LOGS_DIR = "logs"
ANALYSIS_DIR = "analysis"
# every per-rank file above is named rank-<r>.<suffix>
_RANK_FILE = re.compile(r"^rank-(\d+)\.")


def rank_from_name(name: str) -> int | None:
    """The rank in a per-rank file name (traces, steps, failures: rank-<r>.*), None otherwise."""
    m = _RANK_FILE.match(name)
    return int(m.group(1)) if m else None


class RunDirError(RuntimeError):
    """A run directory that cannot be used as asked (exists already, missing, unreadable)."""


def default_run_name(spec: JobSpec, world_size: int) -> str:
    """A readable, unique-enough name: <arch or workload>-<ranks>r-<date>-<time> (the ResNet's arch
    for the built-in trainer, the script's stem or the function's name for user code)."""
    label = spec.model.arch if spec.workload.builtin else re.sub(r"[^A-Za-z0-9._-]", "_", spec.workload.label)
    return f"{label}-{world_size}r-{time.strftime('%Y%m%d-%H%M%S')}"


def current_umask() -> int:
    """The process' umask, read without changing it where Linux shows it (/proc/self/status);
    elsewhere set and restored at once."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def new_file_mode(path: Path, executable: bool = False) -> int:
    """The mode a file written in place at `path` would have: the existing file's mode when it
    is replaced, else what the umask leaves of 0666 (0777 for an executable). Why: tempfile creates
    its files 0600, and a temporary file renamed into place kept that, so manifest.json, spec.toml
    and summary.json were unreadable to the group on a shared $WORK, unlike every other file (issue
    23, item 6)."""
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        return (0o777 if executable else 0o666) & ~current_umask()


def atomic_write_text(path: Path, text: str) -> None:
    """Write through a temporary file in the same folder, then rename: readers never see half a file.
    The file gets the mode a plain write would give it (:func:`new_file_mode`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = new_file_mode(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_jsonl(path: Path, problems: list[str] | None = None) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file. A torn last line (writer killed mid-write) is skipped
    silently; any other line that is not a JSON object (`42`, a list, garbage) is skipped and, when
    `problems` is given, named there ("<file> line <n>: ...")."""
    if not path.exists():
        return []
    out = []
    lines = path.read_text(errors="replace").splitlines()
    for n, line in enumerate(lines, 1):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            if problems is not None and n < len(lines) and line.strip():
                problems.append(f"{path.parent.name}/{path.name} line {n}: not JSON ({line[:40]!r}); skipped")
            continue
        if isinstance(obj, dict):
            out.append(obj)
        elif problems is not None:
            problems.append(f"{path.parent.name}/{path.name} line {n}: not a JSON object ({line[:40]!r}); skipped")
    return out


class RunDir:
    """Paths of one run directory, and reading its files for the analysis side."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    @classmethod
    def for_spec(cls, spec: JobSpec, name: str) -> "RunDir":
        return cls(Path(spec.runs_dir) / validate_run_name(name))

    def __repr__(self) -> str:
        return f"RunDir({str(self.root)!r})"

    # ------------------------------------------------------------------ paths
    @property
    def name(self) -> str:
        return self.root.name

    @property
    def spec_path(self) -> Path:
        return self.root / SPEC_FILE

    @property
    def manifest_path(self) -> Path:
        return self.root / MANIFEST_FILE

    @property
    def traces_dir(self) -> Path:
        return self.root / TRACES_DIR

    def trace_path(self, rank: int, cycle: int = 0) -> Path:
        folder = self.traces_dir if cycle == 0 else self.traces_dir / CYCLE_DIR_TEMPLATE.format(cycle=cycle)
        return folder / TRACE_TEMPLATE.format(rank=rank)

    def capture_dir(self, capture: int) -> Path:
        """traces/ for the baseline (capture 0), traces/capture-<k>/ for capture k."""
        return self.traces_dir if capture == 0 else self.traces_dir / CAPTURE_DIR_TEMPLATE.format(capture=capture)

    def capture_trace_path(self, rank: int, capture: int) -> Path:
        return self.capture_dir(capture) / TRACE_TEMPLATE.format(rank=rank)

    @property
    def triggers_path(self) -> Path:
        return self.steps_dir / TRIGGERS_FILE

    def trace_tmp_path(self, rank: int, cycle: int = 0) -> Path:
        return self.traces_dir / TRACE_TMP_DIR / f"c{cycle}-{TRACE_TEMPLATE.format(rank=rank)}"

    @property
    def steps_dir(self) -> Path:
        return self.root / STEPS_DIR

    def steps_path(self, rank: int) -> Path:
        return self.steps_dir / STEPS_TEMPLATE.format(rank=rank)

    @property
    def checkpoint_path(self) -> Path:
        return self.root / CHECKPOINT_FILE

    def failure_path(self, rank: int) -> Path:
        return self.root / FAILURES_DIR / FAILURE_TEMPLATE.format(rank=rank)

    def fatal_path(self, rank: int) -> Path:
        return self.root / FAILURES_DIR / FATAL_TEMPLATE.format(rank=rank)

    def exit_path(self, rank: int) -> Path:
        return self.root / FAILURES_DIR / EXIT_TEMPLATE.format(rank=rank)

    def read_exit(self, rank: int) -> dict | None:
        """How `rank` ended when not with 0 ({"rank", "time", "exit_code"} or {"rank", "time",
        "signal", "signal_name"}), or None: no record (it ended with 0, it ran under SLURM, or the
        record is unreadable)."""
        try:
            entry = json.loads(self.exit_path(rank).read_text())
        except (OSError, ValueError):
            return None
        return entry if isinstance(entry, dict) and ("exit_code" in entry or "signal" in entry) else None

    def read_fatal(self, rank: int) -> str | None:
        """What faulthandler wrote for `rank` (its fatal signal and stacks), or None (no file, or
        empty: the rank ended cleanly, or was killed by a signal no handler sees, SIGKILL)."""
        try:
            text = self.fatal_path(rank).read_text(errors="replace")
        except OSError:
            return None
        return text if text.strip() else None

    @property
    def logs_dir(self) -> Path:
        return self.root / LOGS_DIR

    @property
    def analysis_dir(self) -> Path:
        return self.root / ANALYSIS_DIR

    # ------------------------------------------------------------------ life cycle
    def create(self, spec: JobSpec) -> "RunDir":
        """Create a fresh run directory; refuse to reuse one that holds a run already."""
        if self.manifest_path.exists() or self.spec_path.exists():
            raise RunDirError(
                f"run directory {self.root} already holds a run; choose another --name (or remove it)"
            )
        for d in (self.traces_dir / TRACE_TMP_DIR, self.steps_dir, self.logs_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.write_spec(spec)
        return self

    def write_spec(self, spec: JobSpec) -> None:
        atomic_write_text(self.spec_path, spec.to_toml())

    def ensure_layout(self) -> None:
        """Folders every rank writes into (idempotent, safe when ranks race)."""
        for d in (self.traces_dir / TRACE_TMP_DIR, self.steps_dir, self.logs_dir, self.root / FAILURES_DIR):
            d.mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------------ manifest
    def read_manifest(self) -> dict[str, Any]:
        """manifest.json as written ({} when there is none), old runs included: readers use .get.
        Writers go through hpcprof.rundir.manifest (typed, one writer)."""
        if not self.manifest_path.exists():
            return {}
        try:
            data = json.loads(self.manifest_path.read_text())
        except json.JSONDecodeError as exc:
            raise RunDirError(f"{self.manifest_path} is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise RunDirError(f"{self.manifest_path}: expected a JSON object, found {type(data).__name__}")
        return data

    # ------------------------------------------------------------------ steps
    def read_steps(self, rank: int, problems: list[str] | None = None) -> list[dict[str, Any]]:
        """Step records of one rank as dicts (keys: records.STEP_KEYS; older runs may lack some).
        A torn last line (rank killed mid-write) is skipped; lines that are not step records (not an
        object, no integer `step`) are skipped and named in `problems` when it is given."""
        path = self.steps_path(rank)
        recs = read_jsonl(path, problems)
        good = [r for r in recs if isinstance(r.get("step"), int) and not isinstance(r.get("step"), bool)]
        if problems is not None and len(good) < len(recs):
            problems.append(f"{path.parent.name}/{path.name}: {len(recs) - len(good)} line(s) without an integer "
                            "'step' are not step records; skipped")
        return good

    def usable_steps(self, rank: int, max_step: int | None = None, problems: list[str] | None = None) -> list[dict[str, Any]]:
        """The step records of one rank that can enter any figure, by step: :meth:`read_steps` less
        the records hpcprof.rundir.records.step_record_problem refuses (another rank's, a step out of
        0..max_step-1, a step time that is not a finite positive number, a batch of 0...), which
        are named in `problems`."""
        from .records import usable_step_records

        path = self.steps_path(rank)
        return usable_step_records(self.read_steps(rank, problems), rank, max_step,
                                   f"{path.parent.name}/{path.name}", problems)

    def step_ranks(self) -> list[int]:
        ranks = (rank_from_name(p.name) for p in self.steps_dir.glob(STEPS_TEMPLATE.format(rank="*")))
        return sorted(r for r in ranks if r is not None)

    def read_failures(self) -> list[dict[str, Any]]:
        out = []
        for p in sorted((self.root / FAILURES_DIR).glob(FAILURE_TEMPLATE.format(rank="*"))):
            if not _FAILURE_NOTE.match(p.name):  # rank-<r>.exit.json is not a note
                continue
            try:
                out.append(json.loads(p.read_text()))
            except (OSError, json.JSONDecodeError):
                continue
        return sorted(out, key=lambda f: f.get("time", 0.0))


@contextmanager
def temporary_then_rename(tmp: Path, final: Path) -> Iterator[Path]:
    """Yield a temporary path; rename it to `final` only if the block succeeds."""
    tmp.parent.mkdir(parents=True, exist_ok=True)
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        yield tmp
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
