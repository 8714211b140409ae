"""Apply mode writes the plan's ranking of node groups into cluster-autoscaler's priority expander ConfigMap:
through the real ``kubernetes`` client against the stand-in API server (take-over, no-op, a person's edit, a
conflict, a missing ConfigMap), and through the rollout's start on the simulated cluster."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from slicewise.cluster.base import PRIORITY_EXPANDER_CONFIG_MAP, ConfigMapNotFound
from slicewise.cluster.kubernetes import KubernetesCluster
from slicewise.errors import PermanentError
from slicewise.planning.node_groups import NodeGroup, ranked
from slicewise.planning.types import FleetPlan
from slicewise.rollout import engine
from slicewise.rollout.ledger import MarkKind
from slicewise.rollout.node_groups import (
    BEFORE_ANNOTATION,
    LEFT,
    UNCHANGED,
    WRITTEN,
    WRITTEN_ANNOTATION,
    rank_node_groups,
)
from slicewise.rollout.wiring import groups_to_rank
from slicewise.settings import load_settings
from slicewise.simulator.cluster_state import SHIPPED_CONFIG_MAPS
from tests.support.fake_apiserver import FakeApiServer

from .conftest import Harness, fleet_plan

NS = "kube-system"
PATH = f"/api/v1/namespaces/{NS}/configmaps/{PRIORITY_EXPANDER_CONFIG_MAP}"
SHIPPED = yaml.safe_load(SHIPPED_CONFIG_MAPS[0].read_text())["data"]["priorities"]
PRODUCT = "nvidia.com/gpu.product"
GROUPS = (
    NodeGroup("^prod-gpu-t4$", {PRODUCT: "Tesla-T4"}),
    NodeGroup("^prod-gpu-mps-t4$", {PRODUCT: "Tesla-T4-SHARED", "nvidia.com/device-plugin.config": "mps-2"}),
    NodeGroup("^prod-gpu-p100$", {PRODUCT: "Tesla-P100-PCIE-16GB"}),
)
PLAIN = FleetPlan("packing", "champion v1", True, 60, ())
KEEPING_P100 = FleetPlan(
    "packing", "champion v1", True, 60, (), scarce_kinds=((PRODUCT, "Tesla-P100-PCIE-16GB"),)
)


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    shipped = {
        "metadata": {
            "name": PRIORITY_EXPANDER_CONFIG_MAP,
            "namespace": NS,
            "annotations": {"owner": "platform-team"},
        },
        "data": {"priorities": SHIPPED},
    }
    with FakeApiServer(config_maps=[shipped]) as server:
        yield server


def cluster(api: FakeApiServer) -> KubernetesCluster:
    from kubernetes import client

    configuration = client.Configuration()
    configuration.host = api.url
    return KubernetesCluster(client.ApiClient(configuration), backoff_s=0.0)


def stored(api: FakeApiServer) -> tuple[str, dict[str, Any]]:
    found = api.config_map(NS, PRIORITY_EXPANDER_CONFIG_MAP)
    return found["data"]["priorities"], found["metadata"].get("annotations", {})


def edit(text: str) -> Any:
    def change(obj: dict[str, Any]) -> None:
        obj["data"]["priorities"] = text

    return change


def test_the_first_write_takes_the_configmap_over_then_writes_only_what_changed(api: FakeApiServer) -> None:
    first = rank_node_groups(cluster(api), KEEPING_P100, GROUPS, NS)

    text, annotations = stored(api)
    assert (first.outcome, first.took_over) == (WRITTEN, True)
    assert text == ranked(GROUPS, KEEPING_P100).priorities()
    assert yaml.safe_load(text) == {
        30: ["^prod-gpu-mps-t4$"],
        20: ["^prod-gpu-t4$"],
        10: ["^prod-gpu-p100$"],
        1: [".*"],
    }
    assert annotations[BEFORE_ANNOTATION] == SHIPPED  # what the operator had, to hand it back
    assert annotations[WRITTEN_ANNOTATION] == hashlib.sha256(text.encode()).hexdigest()
    assert annotations["owner"] == "platform-team"  # a merge patch: the rest is kept

    api.clear_requests()
    assert rank_node_groups(cluster(api), KEEPING_P100, GROUPS, NS).outcome == UNCHANGED
    assert api.writes() == []

    again = rank_node_groups(cluster(api), PLAIN, GROUPS, NS)  # the P100s are no longer kept
    text, annotations = stored(api)
    assert (again.outcome, again.took_over) == (WRITTEN, False)
    assert yaml.safe_load(text) == {
        30: ["^prod-gpu-mps-t4$"],
        20: ["^prod-gpu-t4$", "^prod-gpu-p100$"],
        1: [".*"],
    }
    assert annotations[BEFORE_ANNOTATION] == SHIPPED


def test_a_persons_edit_is_left_as_it_is_until_they_remove_the_mark(api: FakeApiServer) -> None:
    rank_node_groups(cluster(api), PLAIN, GROUPS, NS)
    api.update_config_map_externally(NS, PRIORITY_EXPANDER_CONFIG_MAP, edit("50:\n  - .*-spot-.*\n"))
    api.clear_requests()

    left = rank_node_groups(cluster(api), KEEPING_P100, GROUPS, NS)

    assert left.outcome == LEFT
    assert f"remove its annotation {WRITTEN_ANNOTATION}" in left.describe()
    assert stored(api)[0] == "50:\n  - .*-spot-.*\n" and api.writes() == []

    def unmark(obj: dict[str, Any]) -> None:
        del obj["metadata"]["annotations"][WRITTEN_ANNOTATION]

    api.update_config_map_externally(NS, PRIORITY_EXPANDER_CONFIG_MAP, unmark)
    back = rank_node_groups(cluster(api), KEEPING_P100, GROUPS, NS)

    text, annotations = stored(api)
    assert (back.outcome, back.took_over) == (WRITTEN, True)
    assert text == ranked(GROUPS, KEEPING_P100).priorities()
    assert annotations[BEFORE_ANNOTATION] == "50:\n  - .*-spot-.*\n"


def test_a_change_between_the_read_and_the_write_is_decided_again_on_a_fresh_read(api: FakeApiServer) -> None:
    rank_node_groups(cluster(api), PLAIN, GROUPS, NS)
    api.clear_requests()

    # Someone touches only an annotation while Slicewise writes: the write is refused (409) and made again.
    def touch(obj: dict[str, Any]) -> None:
        obj["metadata"]["annotations"]["owner"] = "someone"

    api.before_next(
        "PATCH", PATH, lambda: api.update_config_map_externally(NS, PRIORITY_EXPANDER_CONFIG_MAP, touch)
    )
    assert rank_node_groups(cluster(api), KEEPING_P100, GROUPS, NS).outcome == WRITTEN
    assert stored(api)[0] == ranked(GROUPS, KEEPING_P100).priorities()
    assert [r.status for r in api.writes()] == [409, 200]

    # Someone rewrites the priorities meanwhile: on the fresh read they are theirs, and left as they are.
    api.before_next(
        "PATCH",
        PATH,
        lambda: api.update_config_map_externally(NS, PRIORITY_EXPANDER_CONFIG_MAP, edit("5:\n  - .*\n")),
    )
    assert rank_node_groups(cluster(api), PLAIN, GROUPS, NS).outcome == LEFT
    assert stored(api)[0] == "5:\n  - .*\n"


def test_a_missing_configmap_fails_at_once_and_writes_nothing() -> None:
    with FakeApiServer() as api:
        with pytest.raises(
            ConfigMapNotFound, match=f"{NS}/{PRIORITY_EXPANDER_CONFIG_MAP} does not exist"
        ) as err:
            rank_node_groups(cluster(api), PLAIN, GROUPS, NS)
        assert isinstance(err.value, PermanentError)  # no retry: an operator must apply the manifest
        assert api.writes() == []


def test_a_rollout_start_ranks_the_groups_on_the_simulated_cluster_and_says_so(harness: Harness) -> None:
    plan = fleet_plan()
    unranked = engine.start(harness.rollouts(), plan, "plan.json")
    assert unranked["node_groups"] is None
    assert harness.cluster.get_config_map(NS, PRIORITY_EXPANDER_CONFIG_MAP).data["priorities"] == SHIPPED
    engine.rollback(harness.rollouts(), unranked["rollout_id"])
    harness.ledger.release_lock("simulated:test", "gpu_partition_rollout/run-1")

    started = engine.start(
        harness.rollouts(run_id="gpu_partition_rollout/run-2", node_groups=GROUPS), plan, "p"
    )

    assert started["node_groups"] == {
        "config_map": f"{NS}/{PRIORITY_EXPANDER_CONFIG_MAP}",
        "outcome": WRITTEN,
        "took_over": True,
    }
    written = harness.cluster.get_config_map(NS, PRIORITY_EXPANDER_CONFIG_MAP)
    assert written.data["priorities"] == ranked(GROUPS, plan).priorities()
    assert written.annotations[BEFORE_ANNOTATION] == SHIPPED
    assert "taken over and written: 30: - ^prod-gpu-mps-t4$" in harness.ledger.story(started["rollout_id"])
    engine.rollback(harness.rollouts(run_id="gpu_partition_rollout/run-2"), started["rollout_id"])
    harness.ledger.release_lock("simulated:test", "gpu_partition_rollout/run-2")

    # A person edits the ranking: the next run leaves it and the ledger's marks say so, with no rollout either.
    read = harness.cluster.get_config_map(NS, PRIORITY_EXPANDER_CONFIG_MAP)
    harness.cluster.update_config_map(read, {"priorities": "50:\n  - .*-spot-.*\n"}, {})
    nothing = dataclasses.replace(plan, nodes=())
    left = engine.start(
        harness.rollouts(run_id="gpu_partition_rollout/run-3", node_groups=GROUPS), nothing, "p"
    )
    assert (left["rollout_id"], left["node_groups"]["outcome"]) == (None, LEFT)
    (mark,) = harness.ledger.recent_marks(run_id="gpu_partition_rollout/run-3")
    assert mark.kind == MarkKind.NODE_GROUPS and "left as it is" in mark.message


def test_apply_mode_ranks_the_listed_groups_unless_told_to_leave_the_configmap_to_others() -> None:
    listed = '[{"pattern": "^prod-gpu-t4$", "labels": {"nvidia.com/gpu.product": "Tesla-T4"}}]'
    settings = load_settings({"autoscaler_node_groups": listed}, environ={})

    assert groups_to_rank(settings) == (GROUPS[0],)
    assert groups_to_rank(settings.with_overrides({"autoscaler_write_priorities": "false"})) == ()
    assert groups_to_rank(load_settings(environ={})) == ()  # the default lists none
