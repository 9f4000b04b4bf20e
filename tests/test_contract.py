"""docs/contract.md against the code: every record block of the page (``Name = {...}``) lists exactly
the keys its type in hpcprof.rundir writes, every type has its block, and the region list is the
one the trainer uses. A field added to the code without the page (or the reverse) fails here."""

from __future__ import annotations

import re

from helpers import REPO
from hpcprof.rundir import hangs, manifest, records

CONTRACT = REPO / "docs" / "contract.md"
TYPES = {t.__name__: manifest.fields_of(t) for t in manifest.MANIFEST_TYPES}
TYPES["StepRecord"] = list(records.STEP_KEYS)
TYPES["FailureNote"] = list(records.FAILURE_KEYS)
TYPES["HangNote"] = list(hangs.HANG_KEYS)


def blocks(text: str) -> dict[str, list[str]]:
    """``Name = {...}`` blocks (one line, or up to a closing brace alone on its line) -> their keys."""
    out = {}
    for m in re.finditer(r"^(\w+) = \{(.*?)\}$(?=\n(?:\w+ = |```|\s*$))", text, re.M | re.S):
        keys = re.findall(r'"(\w+)"\s*:', m.group(2))
        assert m.group(1) not in out, f"docs/contract.md: {m.group(1)} described twice"
        out[m.group(1)] = keys
    return out


def test_every_record_type_has_exactly_its_keys_in_the_contract():
    doc = blocks(CONTRACT.read_text())
    assert sorted(doc) == sorted(TYPES), "record blocks in docs/contract.md differ from hpcprof.rundir's types"
    for name, keys in TYPES.items():
        assert doc[name] == keys, f"docs/contract.md {name}: {doc[name]} != code {keys}"


def test_the_contract_names_the_regions_of_the_trainer_in_order():
    text = CONTRACT.read_text()
    section = text.split("## record_function regions", 1)[1]
    first_line = section.split("\n")[1]
    assert tuple(re.findall(r"`(hpcprof\.\w+)`", first_line)) == records.REGIONS


def test_step_records_written_are_the_contract_keys(tmp_path):
    """A record goes to disk with the keys (and order) of StepRecord, gpu_ms null until read back."""
    path = tmp_path / "rank-0.jsonl"
    writer = records.StepWriter(path)
    writer.write(records.StepRecord(step=3, epoch=0, rank=0, t_start=1.0, t_end=2.0, step_s=1.0, data_wait_s=0.1,
                                    host_pre_forward_s=0.2, drill_sleep_s=0.0, forward_s=0.3, backward_s=0.4,
                                    optimizer_s=0.1, batch_size=8, profiled=False))
    writer.close()
    import json

    rec = json.loads(path.read_text())
    assert list(rec) == list(records.STEP_KEYS) and rec["gpu_ms"] is None and rec["step"] == 3
