"""The layout history (observed snapshots overlaid by applied changes) and where MPS replicas come from."""

from __future__ import annotations

from datetime import timedelta

from slicewise.cluster.base import DEVICE_PLUGIN_CONFIG_LABEL
from slicewise.costs.sharing import (
    DEFAULT,
    DEMAND,
    LEDGER,
    OBSERVED,
    LayoutHistory,
    ledger_event,
    mps_replicas,
)
from tests.unit.costs.frames import CATALOG, HOUR, observed_at


def test_the_newest_snapshot_at_or_before_the_moment_wins_and_nothing_is_known_before_the_first() -> None:
    history = LayoutHistory.of(
        [*observed_at(HOUR, "n", "mps-4"), *observed_at(HOUR - timedelta(hours=3), "n", "mps-2")]
    )
    assert history.at("n", HOUR - timedelta(hours=4)) is None
    assert history.at("n", HOUR - timedelta(hours=1)).labels[DEVICE_PLUGIN_CONFIG_LABEL] == "mps-2"  # type: ignore[union-attr]
    assert history.at("n", HOUR).labels[DEVICE_PLUGIN_CONFIG_LABEL] == "mps-4"  # type: ignore[union-attr]
    assert history.at("other", HOUR) is None


def test_an_applied_change_overlays_the_snapshot_and_a_later_snapshot_replaces_it() -> None:
    history = LayoutHistory.of(
        [
            *observed_at(HOUR, "n", "mps-2", {"slicewise.io/node-pool": "a"}),
            ledger_event("n", HOUR + timedelta(minutes=20), {DEVICE_PLUGIN_CONFIG_LABEL: "mps-4"}),
            *observed_at(HOUR + timedelta(hours=2), "n", "default"),
        ]
    )
    changed = history.at("n", HOUR + timedelta(hours=1))
    assert changed is not None
    assert changed.labels[DEVICE_PLUGIN_CONFIG_LABEL] == "mps-4"
    assert changed.sources[DEVICE_PLUGIN_CONFIG_LABEL] == LEDGER
    assert changed.labels["slicewise.io/node-pool"] == "a"  # the rest of the snapshot stays
    later = history.at("n", HOUR + timedelta(hours=2))
    assert later is not None and later.labels[DEVICE_PLUGIN_CONFIG_LABEL] == "default"
    assert later.sources[DEVICE_PLUGIN_CONFIG_LABEL] == OBSERVED


def test_replicas_come_from_the_history_then_the_demand_then_default_to_one() -> None:
    known = LayoutHistory.of(observed_at(HOUR, "n", "mps-8")).at("n", HOUR)
    assert mps_replicas(known, CATALOG, [1.0], 2).replicas == 8
    assert mps_replicas(known, CATALOG, [1.0], 2).method == OBSERVED
    inferred = mps_replicas(None, CATALOG, [3.0, 7.0, 5.0], 2)
    assert (inferred.replicas, inferred.method) == (4, DEMAND)  # busiest minute: 7 requests on 2 GPUs
    assert "lower bound" in inferred.detail
    assert (mps_replicas(None, CATALOG, [2.0], 2).replicas, mps_replicas(None, CATALOG, [], 2).method) == (
        1,
        DEFAULT,
    )


def test_an_unknown_device_plugin_config_falls_back_to_the_demand_and_says_why() -> None:
    known = LayoutHistory.of(observed_at(HOUR, "n", "custom-sharing")).at("n", HOUR)
    found = mps_replicas(known, CATALOG, [6.0], 2)
    assert (found.replicas, found.method) == (3, DEMAND)
    assert "custom-sharing" in found.detail
