"""The suite carries its own real traces (tests/data) and never writes into its input folders.

The session-wide check itself is the autouse fixture of tests/conftest.py (it hashes the input
folders at the start and fails the session at its end if anything changed); these tests check that
the check can fail, that tests/data documents what it holds, and that no test reads data from
outside the repository.
"""

from __future__ import annotations

import re
import shutil

from helpers import INPUT_DIRS, REPO, TRACES, input_snapshot, snapshot_changes


def test_the_snapshot_sees_a_changed_an_added_and_a_removed_file(tmp_path):
    src = tmp_path / "data"
    shutil.copytree(TRACES / "hta_sampled_2of128", src / "set")
    before = input_snapshot([src])
    f = next((src / "set").iterdir())
    f.write_bytes(f.read_bytes()[:-1])  # one byte less
    (src / "set" / "analysis").mkdir()  # what an analysis without --out writes beside its traces
    (src / "set" / "sampled_rank-1.json.gz").unlink()
    changes = snapshot_changes(before, input_snapshot([src]))
    assert f"changed: data/set/{f.name}" in changes
    assert "added: data/set/analysis" in changes
    assert "removed: data/set/sampled_rank-1.json.gz" in changes
    assert snapshot_changes(before, before) == []


def test_every_trace_set_is_documented_with_its_licence():
    readme = (TRACES / "README.md").read_text()
    recorded_here = ["flight_recorder", "h200_torch211"]  # not traces: this project's own recordings, documented too
    sets = sorted(p.name for p in TRACES.iterdir() if p.is_dir() and p.name not in ("licenses", *recorded_here))
    for s in recorded_here:
        assert (TRACES / s).is_dir() and f"`{s}/`" in readme, s
    assert sorted(p.name for p in TRACES.iterdir() if p.is_file()) == ["README.md", "reference_outputs.json"]
    assert sets == ["hta_sampled_2of128", "hta_tests", "kineto_resnet50_v100_workers0", "kineto_resnet50_v100_workers4",
                    "param_dlrm_8x_v100"]
    for s in sets:
        assert f"`{s}/`" in readme, s
        assert any(p.suffix in (".gz", ".json") for p in (TRACES / s).rglob("*")), s
    for lic in ("licenses/param-MIT.txt", "licenses/HolisticTraceAnalysis-MIT.txt", "licenses/kineto-BSD-3-Clause.txt",
                "hta_tests/LICENSE"):
        assert lic in readme and (TRACES / lic).stat().st_size > 500, lic
    # the large HTA folders left out are named with the reason, and how to check them anyway
    for left_out in ("df_index_resolver", "negative_queue_length_values_check", "ns_resolution_trace"):
        assert left_out in readme and not (TRACES / "hta_tests" / left_out).exists()
    assert "HPCPROF_HTA_TESTS_DIR" in readme


def test_no_test_reads_data_from_outside_the_repository():
    # the trace collection beside the checkout (../shared) is not there in a clone: every test reads
    # tests/data; only the benchmarks may fall back to it
    offenders = []
    for p in sorted((REPO / "tests").rglob("*.py")):
        text = p.read_text()
        if re.search(r"""["'/]shared["'/]|\.\./shared|SHARED_TRACES""", text) and p.name != "test_inputs.py":
            offenders.append(str(p.relative_to(REPO)))
    assert offenders == []
    assert TRACES in INPUT_DIRS
