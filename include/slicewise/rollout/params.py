"""The Params of ``gpu_partition_rollout`` (the Trigger form): each empty one means the setting of the same name
(the Variable ``slicewise_settings``, then ``SLICEWISE_*`` environment, then the shipped default)."""

from __future__ import annotations

from typing import Any

from airflow.sdk import Param


def _param(kind: str, description: str, **schema: Any) -> Param:
    """An optional Param: empty means the setting of the same name."""
    return Param(None, type=["null", kind], description=description, **schema)


def rollout_params() -> dict[str, Param]:
    """Fresh Param objects for each parse of the DAG file: a run's values must never leak into the next DAG
    object built in the same process (dag.test() and the DAG processor import this module once)."""
    return {
        "mode": _param(
            "string",
            "recommend: plan and report only. apply: change nodes gradually (canary waves). "
            "Empty: the setting rollout_mode (recommend unless set to apply for this cluster).",
            enum=[None, "recommend", "apply"],
        ),
        "planner_policy": _param("string", "Planner policy.", enum=[None, "packing", "thresholds"]),
        "planner_fallback": _param(
            "string",
            "When the forecaster is not trusted: none (change nothing) or baseline (act on it).",
            enum=[None, "none", "baseline"],
        ),
        "planner_cordon_to_drain": _param(
            "boolean",
            "Blocked changes read cordon-to-drain; apply mode cordons (holds) such a node until its pods end.",
        ),
        "cluster_backend": _param("string", "Cluster backend.", enum=[None, "simulated", "kubernetes"]),
        "rollout_wave_shares": _param("string", "Cumulative shares after the canary, e.g. 0.1,0.25,0.5,1.0"),
        "rollout_max_in_flight": _param("integer", "Most nodes being changed at once.", minimum=1),
    }
