"""Typed settings: defaults from ``include/config/settings.yaml``, then env, Airflow Variable, Params."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from slicewise.errors import PermanentError

CONFIG_DIR = Path(os.environ.get("SLICEWISE_CONFIG_DIR", Path(__file__).resolve().parents[1] / "config"))
ENV_PREFIX = "SLICEWISE_"
VARIABLE_NAME = "slicewise_settings"


class SettingsError(PermanentError, ValueError):
    """A setting has an unknown name or a value of the wrong type."""


@dataclass(frozen=True)
class Settings:
    storage_root: str
    store_retention_days: float
    prometheus_conn_id: str
    step_s: int
    series_per_shard: int
    max_points_per_query: int
    query_timeout_s: float
    query_retries: int
    query_backoff_s: float
    min_completeness: float
    max_staleness_s: float
    max_vanished_share: float
    mlflow_tracking_uri: str
    mlflow_experiment: str
    forecast_history_hours: int
    cluster_backend: str
    kubernetes_conn_id: str
    simulated_cluster_state: str
    simulated_reconfigure_s: float
    planner_model: str
    planner_policy: str
    planner_low_util: float
    planner_high_util: float
    planner_mps_target_util: float
    planner_min_gain_gpu_hours: float
    planner_change_penalty_gpu_hours: float
    planner_dwell_hours: float
    planner_max_change_share: float
    planner_cordon_to_drain: bool
    planner_fallback: str
    planner_consolidation: str
    planner_release_below: float
    planner_release_below_large: float
    planner_release_min_pod_age_hours: float
    planner_shared_reserve: float
    planner_standby: bool
    planner_keep_shaped: bool
    planner_mps_release_below: float
    planner_pinned_share: float
    planner_scarce_kind_share: float
    planner_pinned_memory_hours: float
    planner_rehome: str
    planner_eviction_cost_s: float
    planner_gpus_without_mig: bool
    planner_split_layouts: bool
    planner_whole_gpu_demand: str
    planner_max_forecast_age_hours: float
    planner_horizon_minutes: int
    rollout_mode: str
    ledger_conn_id: str
    ledger_retention_days: float
    rollout_wave_shares: str
    rollout_max_in_flight: int
    rollout_drain_deadline_s: float
    rollout_mig_timeout_s: float
    rollout_poll_s: float
    rollout_lock_ttl_s: float
    autoscaler_node_groups: str
    autoscaler_write_priorities: bool
    autoscaler_namespace: str
    analysis_bake_s: float
    analysis_interval_s: float
    analysis_count: int
    analysis_util_drop: float
    analysis_pending_tolerance: float
    analysis_extra_checks: str
    cost_mig_share: str
    cost_team_map: str
    cost_prices_file: str
    cost_low_engine: float
    cost_memory_bound_dram: float
    cost_input_bound_pcie_rx_bytes_per_s: float
    cost_share_util: float
    cost_share_min_fraction: float
    cost_savings_window_hours: int

    def with_overrides(self, overrides: Mapping[str, Any]) -> Settings:
        return dataclasses.replace(self, **_coerce_all(overrides))


def slicewise_home() -> Path:
    """Folder of the embedded stack's state; a git-ignored ``var/`` in the checkout by default."""
    return Path(os.environ.get("SLICEWISE_HOME", Path(__file__).resolve().parents[2] / "var"))


def load_settings(*overrides: Mapping[str, Any] | None, environ: Mapping[str, str] | None = None) -> Settings:
    """Defaults, then ``SLICEWISE_*`` env, then each mapping in ``overrides`` (later wins); None is skipped."""
    raw = yaml.safe_load((CONFIG_DIR / "settings.yaml").read_text())
    env = os.environ if environ is None else environ
    from_env = {
        f.name: env[ENV_PREFIX + f.name.upper()]
        for f in fields(Settings)
        if ENV_PREFIX + f.name.upper() in env
    }
    merged: dict[str, Any] = {**raw, **from_env}
    for layer in overrides:
        if layer:
            merged.update(layer)
    values = _coerce_all(merged)
    if not values["storage_root"]:
        values["storage_root"] = (slicewise_home() / "store").as_uri()
    return Settings(**values)


def _coerce_all(values: Mapping[str, Any]) -> dict[str, Any]:
    known = {f.name: f for f in fields(Settings)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise SettingsError(f"unknown setting(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return {name: _coerce(name, str(known[name].type), value) for name, value in values.items()}


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off", ""):
        return False
    raise ValueError("expected true or false")


def _coerce(name: str, type_name: str, value: Any) -> Any:
    casters: dict[str, Callable[[Any], Any]] = {"str": str, "int": int, "float": float, "bool": _bool}
    caster = casters[type_name]
    try:
        if caster is int and isinstance(value, float) and not value.is_integer():
            raise ValueError("not a whole number")
        return caster(value)
    except (TypeError, ValueError) as exc:
        raise SettingsError(f"setting {name}={value!r} is not a valid {type_name}: {exc}") from exc
