"""Rollouts through the real ``kubernetes`` client against the stand-in API server: stale success, PDBs past
their deadline, write conflicts, server errors and timeouts. Each ends with every node at its planned state or
its snapshot, uncordoned, and the ledger telling the story."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from typing import Any

import pytest

from slicewise.cluster.kubernetes import KubernetesCluster
from slicewise.planning.types import FleetPlan, PodMove
from slicewise.rollout import engine
from slicewise.rollout import ledger as ledger_mod
from tests.support.fake_apiserver import FakeApiServer
from tests.support.k8s_objects import pdb
from tests.support.stand_in_fleet import TOKEN, Reacting, StandInOperator, fleet_api_server, serving_pod

from .conftest import Harness, fleet_plan

NODE = "sim-a100-80-0"
MIG = "nvidia.com/mig.config"


def backend(api: FakeApiServer, **kwargs: Any) -> KubernetesCluster:
    from kubernetes import client

    configuration = client.Configuration()
    configuration.host = api.url
    configuration.api_key = {"authorization": f"Bearer {TOKEN}"}
    return KubernetesCluster(client.ApiClient(configuration), backoff_s=0.0, **kwargs)


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with fleet_api_server(pods=[serving_pod(NODE, evictable=True)]) as server:
        yield server


def run_one(h: Harness, cluster: Any, nodes: list[str]) -> int:
    ctx = h.rollouts(backend=cluster)
    rollout_id = engine.start(ctx, fleet_plan(nodes), "plan.json")["rollout_id"]
    assert rollout_id is not None
    for index in range(3):
        engine.apply_wave(ctx, rollout_id, index)
        engine.analyse_wave(ctx, rollout_id, index, h.prometheus, h.checks, bake_s=60)
    engine.finish(ctx, rollout_id)
    engine.rollback(ctx, rollout_id)
    return int(rollout_id)


def node_labels(api: FakeApiServer, name: str) -> dict[str, Any]:
    return dict(api.node(name)["metadata"]["labels"])


def test_a_change_the_operator_completes_is_verified_and_promoted(
    harness: Harness, api: FakeApiServer
) -> None:
    rollout_id = run_one(harness, Reacting(backend(api), StandInOperator(api)), [NODE])
    assert harness.ledger.rollout(rollout_id).status == ledger_mod.RolloutStatus.PROMOTED
    assert node_labels(api, NODE)[MIG] == "all-3g.40gb"
    assert not api.node(NODE)["spec"].get("unschedulable")
    assert api.pod("team-a", "svc-0") is None  # evicted through the Eviction API
    kinds = {(r.method, r.path.rsplit("/", 1)[-1]) for r in api.writes()}
    assert ("POST", "eviction") in kinds and ("PATCH", NODE) in kinds


def test_a_stale_success_is_not_taken_for_the_change_and_the_node_is_put_back(
    harness: Harness, api: FakeApiServer
) -> None:
    operator = StandInOperator(api)
    operator.idle = True  # the MIG manager never reacts: mig.config.state stays at the old "success"
    rollout_id = run_one(harness, Reacting(backend(api), operator), [NODE])
    record = harness.ledger.node(rollout_id, NODE)
    assert harness.ledger.rollout(rollout_id).status == ledger_mod.RolloutStatus.ROLLED_BACK
    assert record.status == ledger_mod.NodeStatus.RESTORED
    assert "stale success" in harness.ledger.story(rollout_id)
    assert node_labels(api, NODE)[MIG] == "all-balanced"
    assert not api.node(NODE)["spec"].get("unschedulable")


def test_an_eviction_refused_by_a_pdb_past_the_deadline_aborts_only_that_node(harness: Harness) -> None:
    guarded = serving_pod(NODE, evictable=True)
    budget = pdb("team-a", "svc", disruptions_allowed=0, match_labels={"app": "svc-0"})
    with fleet_api_server(pods=[guarded], pdbs=[budget]) as api:
        # The planner saw the PDB allowing a disruption; it allows none by the time the node drains.
        rollout_id = run_one(harness, Reacting(backend(api), StandInOperator(api)), [NODE])
        record = harness.ledger.node(rollout_id, NODE)
        assert record.status == ledger_mod.NodeStatus.ABORTED
        assert "drain deadline" in record.detail
        assert node_labels(api, NODE)[MIG] == "all-balanced"  # never labelled
        assert not api.node(NODE)["spec"].get("unschedulable")
        assert api.pod("team-a", "svc-0") is not None
        evictions = [r for r in api.requests if r.path.endswith("/eviction")]
        assert len(evictions) > 1  # retried until the deadline


def test_a_write_conflict_is_retried_on_fresh_state(harness: Harness, api: FakeApiServer) -> None:
    def someone_else() -> None:
        api.set_node_labels_externally(NODE, {"team": "vision"})

    api.before_next("PATCH", f"/api/v1/nodes/{NODE}", someone_else)  # strikes between read and cordon patch
    rollout_id = run_one(harness, Reacting(backend(api), StandInOperator(api)), [NODE])
    assert harness.ledger.rollout(rollout_id).status == ledger_mod.RolloutStatus.PROMOTED
    assert any(r.status == 409 for r in api.requests)
    labels = node_labels(api, NODE)
    assert labels["team"] == "vision" and labels[MIG] == "all-3g.40gb"


def test_server_errors_and_timeouts_are_retried(harness: Harness, api: FakeApiServer) -> None:
    api.fail_next("PATCH", f"/api/v1/nodes/{NODE}", 500)
    api.fail_next("GET", f"/api/v1/nodes/{NODE}", 503)
    api.before_next("GET", f"/api/v1/nodes/{NODE}", lambda: time.sleep(1.5))  # longer than the read timeout
    rollout_id = run_one(harness, Reacting(backend(api, timeout_s=1.0), StandInOperator(api)), [NODE])
    assert harness.ledger.rollout(rollout_id).status == ledger_mod.RolloutStatus.PROMOTED
    assert any(r.status >= 500 for r in api.requests)


def test_an_api_that_keeps_failing_fails_the_wave_and_the_rollback_restores_the_node(
    harness: Harness, api: FakeApiServer
) -> None:
    from slicewise.cluster.base import ClusterError

    cluster = Reacting(backend(api, retries=1), StandInOperator(api))
    ctx = harness.rollouts(backend=cluster)
    rollout_id = engine.start(ctx, fleet_plan([NODE]), "plan.json")["rollout_id"]
    for _ in range(6):  # every attempt of the wave's cordon/uncordon patch fails
        api.fail_next("PATCH", f"/api/v1/nodes/{NODE}", 500)
    with pytest.raises(ClusterError):
        engine.apply_wave(ctx, rollout_id, 0)  # the task fails; Airflow's retries are exhausted
    engine.finish(ctx, rollout_id)  # not reached in the DAG (upstream failed); a no-op here
    result = engine.rollback(ctx, rollout_id)
    assert result["status"] == ledger_mod.RolloutStatus.ROLLED_BACK
    assert node_labels(api, NODE)[MIG] == "all-balanced"
    assert not api.node(NODE)["spec"].get("unschedulable")


def _t4_server() -> FakeApiServer:
    from tests.support.k8s_objects import gpu_node

    t4 = gpu_node(
        "t4-0",
        product="Tesla-T4",
        gpu_count=2,
        mig_config=None,  # no MIG, so no MIG manager and neither mig.config label
        mig_state=None,
        allocatable={"nvidia.com/gpu": 2},
        device_plugin_config="default",
    )
    return FakeApiServer(nodes=[t4], pods=[serving_pod("t4-0", evictable=True)], token=TOKEN)


def _mps_on_t4(harness: Harness, cluster: Any) -> int:
    import dataclasses

    from slicewise.planning.types import DesiredState

    (plan,) = fleet_plan(["sim-h100-1"]).nodes
    t4 = dataclasses.replace(
        plan, node="t4-0", current=DesiredState("", "default"), desired=DesiredState("", "mps-2")
    )
    ctx = harness.rollouts(backend=cluster, shares=(1.0,))
    rollout_id = engine.start(ctx, dataclasses.replace(fleet_plan([]), nodes=(t4,)), "plan.json")[
        "rollout_id"
    ]
    assert rollout_id is not None
    engine.apply_wave(ctx, rollout_id, 0)
    return int(rollout_id)


def test_mps_on_a_gpu_without_mig_is_verified_by_what_the_device_plugin_advertises(harness: Harness) -> None:
    with _t4_server() as api:
        rollout_id = _mps_on_t4(harness, Reacting(backend(api), StandInOperator(api)))
        record = harness.ledger.node(rollout_id, "t4-0")
        labels = node_labels(api, "t4-0")
        allocatable = api.node("t4-0")["status"]["allocatable"]["nvidia.com/gpu"]
    assert record.status == ledger_mod.NodeStatus.DONE, record.detail
    assert labels["nvidia.com/device-plugin.config"] == "mps-2"
    assert MIG not in labels and "nvidia.com/mig.config.state" not in labels  # nothing written for MIG
    assert allocatable == "4"


def test_mps_on_a_gpu_without_mig_fails_while_the_device_plugin_still_advertises_whole_gpus(
    harness: Harness,
) -> None:
    with _t4_server() as api:
        operator = StandInOperator(api)
        operator.idle = True  # the device plugin never restarts with the new config
        rollout_id = _mps_on_t4(harness, Reacting(backend(api), operator))
        record = harness.ledger.node(rollout_id, "t4-0")
    assert record.status == ledger_mod.NodeStatus.FAILED
    assert "stale success: allocatable {'nvidia.com/gpu': 2}" in record.detail


def test_start_carries_the_standby_lists_as_prefer_no_schedule_taints(
    harness: Harness, api: FakeApiServer
) -> None:
    # sim-h200-0 carries two grades from an earlier plan and is now listed in the first grade only; sim-h100-0
    # is newly listed in three. Under the lock, before any wave, each taint that changes gets one guarded write;
    # the rollout itself goes on as planned.
    standby, large, larger = (
        {"key": f"slicewise.io/standby{suffix}", "value": "", "effect": "PreferNoSchedule"}
        for suffix in ("", "-large", "-larger")
    )
    api.update_node_externally("sim-h200-0", lambda n: n["spec"].update(taints=[standby, large]))
    grades = (("sim-h100-0", "sim-h200-0"), ("sim-h100-0",), ("sim-h100-0",))
    plan = dataclasses.replace(fleet_plan([NODE]), standby_grades=grades)
    ctx = harness.rollouts(backend=backend(api))

    started = engine.start(ctx, plan, "plan.json")

    assert started["standby"] == {
        "slicewise.io/standby": {"added": ["sim-h100-0"], "removed": []},
        "slicewise.io/standby-large": {"added": ["sim-h100-0"], "removed": ["sim-h200-0"]},
        "slicewise.io/standby-larger": {"added": ["sim-h100-0"], "removed": []},
        "slicewise.io/standby-largest": {"added": [], "removed": []},
    }
    assert api.node("sim-h100-0")["spec"]["taints"] == [standby, large, larger]
    assert api.node("sim-h200-0")["spec"]["taints"] == [standby]
    tainted = [n for n in ("sim-a100-80-0", "sim-a100-40-0") if api.node(n)["spec"].get("taints")]
    assert tainted == [] and started["action"] == "started"
    events = [e.message for e in harness.ledger.events(started["rollout_id"])]
    assert any("slicewise.io/standby:" in message and "sim-h100-0" in message for message in events)
    assert any("slicewise.io/standby-large:" in message and "sim-h200-0" in message for message in events)


def test_a_plan_without_standby_nodes_clears_the_taint_and_changes_nothing_else(
    harness: Harness, api: FakeApiServer
) -> None:
    # planner_standby turned off: the plan lists nothing, and the taints left by earlier plans go; another
    # controller's taint on the same node stays.
    ours = {"key": "slicewise.io/standby", "value": "", "effect": "PreferNoSchedule"}
    large = {"key": "slicewise.io/standby-large", "value": "", "effect": "PreferNoSchedule"}
    largest = {"key": "slicewise.io/standby-largest", "value": "", "effect": "PreferNoSchedule"}
    theirs = {"key": "dedicated", "value": "llm", "effect": "NoSchedule"}
    api.update_node_externally(
        "sim-h200-0", lambda n: n["spec"].update(taints=[theirs, ours, large, largest])
    )

    started = engine.start(
        harness.rollouts(backend=backend(api)), FleetPlan("packing", "v1", True, 60, ()), "p"
    )

    assert started == {
        "rollout_id": None,
        "action": "nothing to change",
        "waves": [],
        "standby": {
            "slicewise.io/standby": {"added": [], "removed": ["sim-h200-0"]},
            "slicewise.io/standby-large": {"added": [], "removed": ["sim-h200-0"]},
            "slicewise.io/standby-larger": {"added": [], "removed": []},
            "slicewise.io/standby-largest": {"added": [], "removed": ["sim-h200-0"]},
        },
        "scale_down_disabled": {"added": [], "removed": []},
        "moves": {"evicted": [], "skipped": []},
        "node_groups": None,  # no autoscaler_node_groups: the ConfigMap is not read
        "holds": {"held": [], "released": [], "cleared": [], "refused": []},
    }
    assert api.node("sim-h200-0")["spec"]["taints"] == [theirs]
    # Told though no rollout followed: one line per taint removed, none for the grade that changed nothing.
    told = sorted(m.message for m in harness.ledger.recent_marks())
    assert told == sorted(
        f"standby taint {key}:PreferNoSchedule added on 0 nodes (-), removed from 1 (sim-h200-0)"
        for key in ("slicewise.io/standby", "slicewise.io/standby-large", "slicewise.io/standby-largest")
    )
    assert {m.kind for m in harness.ledger.recent_marks()} == {ledger_mod.MarkKind.STANDBY}


def test_start_keeps_the_listed_shaped_nodes_from_the_autoscaler_and_touches_no_one_elses_annotation(
    harness: Harness, api: FakeApiServer
) -> None:
    # Listed: sim-h100-0 (new: both annotations in one write) and sim-a100-40-0, which someone else already keeps
    # from the autoscaler (left as it is, not taken over). sim-h200-0 carries Slicewise's mark from an earlier
    # plan and is not listed any more: both go. The node the plan changes is kept by someone else and not listed:
    # left alone.
    disabled, mark = (
        "cluster-autoscaler.kubernetes.io/scale-down-disabled",
        "slicewise.io/scale-down-disabled",
    )

    def annotate(values: dict[str, str]) -> Any:
        return lambda n: n["metadata"].setdefault("annotations", {}).update(values)

    api.update_node_externally("sim-a100-80-0", annotate({disabled: "true"}))
    api.update_node_externally("sim-a100-40-0", annotate({disabled: "true"}))
    api.update_node_externally("sim-h200-0", annotate({disabled: "true", mark: "true"}))
    plan = dataclasses.replace(fleet_plan([NODE]), scale_down_disabled=("sim-a100-40-0", "sim-h100-0"))

    started = engine.start(harness.rollouts(backend=backend(api)), plan, "plan.json")

    assert started["scale_down_disabled"] == {"added": ["sim-h100-0"], "removed": ["sim-h200-0"]}

    def annotations(node: str) -> dict[str, str]:
        found = api.node(node)["metadata"].get("annotations") or {}
        return {k: v for k, v in found.items() if k in (disabled, mark)}

    assert annotations("sim-h100-0") == {disabled: "true", mark: "true"}
    assert annotations("sim-h200-0") == {}
    assert annotations("sim-a100-80-0") == annotations("sim-a100-40-0") == {disabled: "true"}
    events = [e.message for e in harness.ledger.events(started["rollout_id"])]
    assert any(disabled in message and "sim-h100-0" in message for message in events)


def test_start_evicts_the_planned_moves_that_still_hold_and_says_why_of_the_others(harness: Harness) -> None:
    # sim-h100-1 shares its 4 GPUs among 16 MPS tenants (mps-4), one of them taken. Planned: two fractional pods
    # on whole GPUs of sim-h100-0 (one evictable, one whose PodDisruptionBudget allows no disruption now), one
    # that has left since the plan, one on sim-a100-80-1 that no longer asks a whole GPU, and one on a tenant of
    # sim-h100-1 (its node switched to MPS since the plan).
    share = {"slicewise.io/gpu-share": "0.25"}
    pods = [
        serving_pod("sim-h100-1", "tenant-0", annotations=share),
        serving_pod("sim-h100-0", "frac-0", evictable=True, annotations=share),
        serving_pod("sim-h100-0", "frac-1", evictable=True, annotations=share),
        serving_pod("sim-a100-80-1", "frac-2", "nvidia.com/mig-1g.10gb", evictable=True, annotations=share),
        serving_pod("sim-h100-1", "frac-3", evictable=True, annotations=share),
    ]
    guarded = pdb("team-a", "guarded", disruptions_allowed=0, match_labels={"app": "frac-1"})
    moves = tuple(
        PodMove("team-a", name, node, 0.25, ("sim-h100-1",))
        for name, node in (
            ("frac-0", "sim-h100-0"),
            ("frac-1", "sim-h100-0"),
            ("gone-0", "sim-h100-0"),
            ("frac-2", "sim-a100-80-1"),
            ("frac-3", "sim-h100-1"),
        )
    )
    with fleet_api_server(pods=pods, pdbs=[guarded]) as api:
        plan = FleetPlan("packing", "v1", True, 60, (), moves=moves)

        started = engine.start(harness.rollouts(backend=backend(api)), plan, "plan.json")

        assert started["moves"]["evicted"] == ["team-a/frac-0"]
        skipped = started["moves"]["skipped"]
        assert [s.split(":")[0] for s in skipped] == [
            "team-a/frac-1",
            "team-a/gone-0",
            "team-a/frac-2",
            "team-a/frac-3",
        ]
        assert "not evictable now" in skipped[0] and "guarded" in skipped[0]  # the PodDisruptionBudget
        assert "no longer on sim-h100-0" in skipped[1]
        assert "no longer on one whole GPU" in skipped[2] and "no longer on one whole GPU" in skipped[3]
        assert api.pod("team-a", "frac-0") is None
        assert all(api.pod("team-a", name) is not None for name in ("frac-1", "frac-2", "frac-3"))


def test_a_move_waits_for_a_tenant_nobody_requests(harness: Harness) -> None:
    # The MPS node's 16 tenants are all taken since the plan: the move is skipped and the pod stays.
    share = {"slicewise.io/gpu-share": "0.25"}
    pods = [serving_pod("sim-h100-1", f"tenant-{i}", annotations=share) for i in range(16)]
    pods.append(serving_pod("sim-h100-0", "frac-0", evictable=True, annotations=share))
    with fleet_api_server(pods=pods) as api:
        plan = FleetPlan(
            "packing",
            "v1",
            True,
            60,
            (),
            moves=(PodMove("team-a", "frac-0", "sim-h100-0", 0.25, ("sim-h100-1",)),),
        )

        started = engine.start(harness.rollouts(backend=backend(api)), plan, "plan.json")

        assert started["moves"] == {
            "evicted": [],
            "skipped": ["team-a/frac-0: no tenant free on sim-h100-1 any more"],
        }
        assert api.pod("team-a", "frac-0") is not None
