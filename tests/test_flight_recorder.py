"""Issue 36, items 2 and 4: the hang verdict from PyTorch's flight-recorder dumps alone (a job ended
by the NCCL watchdog, or killed at its time limit, leaves them and no hang note of hpcprof's).

The dumps are real: a 4-rank gloo job recorded by tests/data/flight_recorder/make_dumps.py (its
docstring), whose answer is known by construction. In `hang/`, rank 2 skipped the seventh
collective (five all_reduce calls and a barrier came before it) while ranks 0, 1 and 3 waited in
all_reduce #7 on a tensor of 1,024 floats; in `mismatch/`, rank 1 called broadcast as #7 where the
others called all_reduce. PyTorch's own analyser (`python -m torch.distributed.flight_recorder.fr_trace`)
stops with a KeyError on gloo dumps (their pg_config names no group), so it cannot be the truth here.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import time
from pathlib import Path

from hpcprof.rundir.flight_recorder import FR_DIR, fr_verdict, read_dumps
from hpcprof.rundir.state import run_state

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "flight_recorder"


def _run_dir(root: Path, dumps: str) -> Path:
    """A run directory as a job killed at its time limit leaves it: manifest, step files, no trace,
    no hang note, the ranks' flight-recorder dumps."""
    root.mkdir(parents=True)
    for d in ("steps", "traces", "logs", "failures"):
        (root / d).mkdir()
    (root / "manifest.json").write_text(json.dumps({
        "name": root.name, "executor": "slurm", "job_id": "77", "world_size": 4,
        "spec": {"train": {"steps": 100}}, "created": "2026-01-01T00:00:00+0000"}))
    old = time.time() - 3600
    for rank in range(4):
        p = root / "steps" / f"rank-{rank}.jsonl"
        p.write_text("".join(json.dumps({"step": s, "rank": rank, "step_s": 0.1}) + "\n" for s in range(5)))
        os.utime(p, (old, old))
    os.utime(root / "manifest.json", (old, old))
    shutil.copytree(DATA / dumps, root / FR_DIR)
    return root


def test_the_rank_that_never_entered_the_collective_is_named_with_its_number():
    dumps, warnings = read_dumps(DATA / "hang")
    assert sorted(dumps) == [0, 1, 2, 3] and warnings == []
    v = fr_verdict(dumps)
    assert v["culprit"] == 2
    assert v["flight_recorder"] == {"group": "default_pg", "seq": 7, "collective": "all_reduce",
                                    "sizes": [[1024]], "dtypes": ["Float"]}
    assert [w["rank"] for w in v["waiters"]] == [0, 1, 3]
    assert all(w["collective"] == "all_reduce" and w["seq"] == 7 for w in v["waiters"])
    assert "rank 2 never entered all_reduce #7 of the default group" in v["text"]
    assert "its last call there was barrier #6" in v["text"]
    assert "ranks 0, 1, 3 waited in it" in v["text"]
    assert "make_dumps.py" in v["text"]  # the training code's line that called it, not torch's


def test_a_mismatch_names_the_rank_and_both_collectives():
    v = fr_verdict(read_dumps(DATA / "mismatch")[0])
    assert v["culprit"] == 1
    assert {m["rank"]: m["collective"] for m in v["mismatch"]} == {0: "all_reduce", 1: "broadcast", 2: "all_reduce",
                                                                 3: "all_reduce"}
    assert "collective mismatch at #7 of the default group: rank 1 called broadcast" in v["text"]
    assert "ranks 0, 2, 3 called all_reduce" in v["text"]


def test_a_job_whose_collectives_all_completed_did_not_hang(tmp_path):
    for rank in range(4):
        dump = pickle.loads((DATA / "hang" / f"rank-{rank}").read_bytes())
        dump["entries"] = [e for e in dump["entries"] if e["collective_seq_id"] <= 6]
        dump["pg_status"] = {k: dict(s, last_completed_collective=6) for k, s in dump["pg_status"].items()}
        (tmp_path / f"rank-{rank}").write_bytes(pickle.dumps(dump))
    assert fr_verdict(read_dumps(tmp_path)[0]) is None


def test_a_run_directory_with_only_dumps_is_hung_and_names_the_rank(tmp_path):
    st = run_state(_run_dir(tmp_path / "r", "hang"))
    assert st.state == "hung" and st.failed_rank == 2
    assert "rank 2 never entered all_reduce #7" in st.describe()
    assert "flight recorder" in st.evidence


def test_analyze_of_a_folder_of_dumps_alone_gives_the_verdict(tmp_path):
    folder = tmp_path / "dumps"
    shutil.copytree(DATA / "hang", folder)
    proc = subprocess.run([sys.executable, "-m", "hpcprof.analyze", str(folder), "--out", str(tmp_path / "out")],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    assert "no trace files" in lines[0] and "rank 2 never entered all_reduce #7 of the default group" in lines[0]


def test_analyze_of_a_hung_run_directory_without_traces_says_which_rank(tmp_path):
    run = _run_dir(tmp_path / "r", "mismatch")
    proc = subprocess.run([sys.executable, "-m", "hpcprof.analyze", str(run), "--out", str(tmp_path / "out")],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "rank 1 called broadcast" in proc.stderr and "hung" in proc.stderr


def test_hang_notes_and_dumps_together_give_one_verdict_with_the_collectives_number(tmp_path):
    run = _run_dir(tmp_path / "r", "hang")
    (run / "hangs").mkdir()
    for rank in range(4):
        stuck = rank == 2
        (run / "hangs" / f"rank-{rank}.json").write_text(json.dumps({
            "rank": rank, "node": "n1", "pid": 100 + rank, "step": 5, "last_completed_step": 4,
            "seconds_without_progress": 30.0, "timeout_s": 20.0, "noticed": "timeout" if stuck else "peer",
            "in_collective": not stuck, "collective": None if stuck else "all_reduce",
            "where": "sleep (drills/hang.py:10)" if stuck else "all_reduce (distributed/distributed_c10d.py:3906)",
            "caller": "train (s.py:12)", "time": 1.0}))
    st = run_state(run)
    assert st.state == "hung" and st.failed_rank == 2
    assert st.hang["flight_recorder"]["seq"] == 7
    text = st.describe()
    assert text.index("rank 2 hung at step 5") < text.index("the flight recorder: rank 2 never entered all_reduce #7")


def test_a_hostile_or_broken_dump_runs_nothing_and_is_named(tmp_path):
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    (tmp_path / "rank-0").write_bytes(pickle.dumps({"entries": [Evil()]}))
    (tmp_path / "rank-1").write_bytes(b"\x80\x05not a pickle")
    (tmp_path / "rank-2").write_bytes(pickle.dumps(["a list"]))
    dumps, warnings = read_dumps(tmp_path)
    assert dumps == {} and not marker.exists()
    assert len(warnings) == 3
    assert all(str(tmp_path / f"rank-{r}") in w for r, w in enumerate(warnings))
    assert "refused to load" in warnings[0]


WATCHDOG = ("[PG ID 0 PG GUID 0(default_pg) Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, "
            "OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, Timeout(ms)=600000) ran for 600008 milliseconds before "
            "timing out.")
"""ProcessGroupNCCL's message, its parts as libtorch_cuda.so spells them (`strings` of the installed torch)."""


def test_the_nccl_watchdogs_own_message_is_quoted_from_the_rank_log(tmp_path):
    run = _run_dir(tmp_path / "r", "hang")
    (run / "logs" / "77_1_log.err").write_text(
        "step 4 done\n"
        f"[rank1]:[E1129 08:30:00.123456789 ProcessGroupNCCL.cpp:632] {WATCHDOG}\n"
        "[rank1]:[E1129 08:30:00.2 ProcessGroupNCCL.cpp:2168] [PG ID 0 PG GUID 0(default_pg) Rank 1] "
        "Process group watchdog thread terminated with exception\n")
    st = run_state(run)
    assert st.state == "hung" and st.failed_rank == 2
    assert st.hang["watchdog"] == WATCHDOG
    assert st.describe().index("rank 2 never entered all_reduce #7") < st.describe().index(
        f"the NCCL watchdog said: {WATCHDOG}")
