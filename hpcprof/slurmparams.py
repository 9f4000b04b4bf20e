"""SLURM choices (partition, account, ...) as submitit parameters: one mapping for every place that
submits through submitit (the training job in hpcprof.submit, the analysis array in
hpcprof.analysis.array)."""

from __future__ import annotations

from typing import Any, Iterable, Mapping


def submitit_slurm_parameters(
    partition: str | None = None,
    account: str | None = None,
    qos: str | None = None,
    constraint: str | None = None,
    setup: Iterable[str] = (),
    extra: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The ``slurm_*`` keys for ``submitit.AutoExecutor.update_parameters``; empty values left out."""
    params: dict[str, Any] = {}
    for key, value in (("partition", partition), ("account", account), ("qos", qos), ("constraint", constraint)):
        if value:
            params[f"slurm_{key}"] = value
    if extra:
        params["slurm_additional_parameters"] = dict(extra)
    setup = list(setup)
    if setup:
        params["slurm_setup"] = setup
    return params
