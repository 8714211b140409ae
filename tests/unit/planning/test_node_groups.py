"""The ranking of cluster-autoscaler's node groups a plan asks for, read back as the priority expander reads it."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
import yaml

from slicewise.planning.node_groups import NodeGroup, parse_node_groups, ranked, ranking_note
from slicewise.planning.types import FleetPlan, Pin
from slicewise.settings import SettingsError

PRODUCT = "nvidia.com/gpu.product"
T4, P100 = "Tesla-T4", "Tesla-P100-PCIE-16GB"
MPS = {"nvidia.com/device-plugin.config": "mps-2", "nvidia.com/gpu.sharing-strategy": "mps"}
GROUPS = (
    NodeGroup("^prod-gpu-t4$", {PRODUCT: T4}),
    NodeGroup("^prod-gpu-mps-t4$", {PRODUCT: f"{T4}-SHARED", **MPS}),
    NodeGroup("^prod-gpu-p100$", {PRODUCT: P100}),
    NodeGroup("^prod-gpu-mps-p100$", {PRODUCT: f"{P100}-SHARED", **MPS}),
)
NAMES = ("prod-gpu-t4", "prod-gpu-mps-t4", "prod-gpu-p100", "prod-gpu-mps-p100", "prod-cpu")


def expander_priority(priorities: str, group: str) -> int:
    """What cluster-autoscaler's priority expander gives a node group: the highest priority whose list has a
    pattern found in the name (expander/priority/priority.go, BestOption); -1: not named, never used."""
    config = yaml.safe_load(priorities)
    assert all(isinstance(p, int) and p > 0 for p in config)  # Go unmarshals into map[int][]string
    return max(
        (p for p, patterns in config.items() if any(re.search(x, group) for x in patterns)), default=-1
    )


def plan(**kept: object) -> FleetPlan:
    return FleetPlan("packing", "champion v1", True, 60, (), **kept)  # type: ignore[arg-type]


def test_without_kept_kinds_shared_groups_rank_first_then_whole_gpus_then_every_other_group() -> None:
    text = ranked(GROUPS, plan()).priorities()

    got = {name: expander_priority(text, name) for name in NAMES}
    assert got == {
        "prod-gpu-mps-t4": 30,
        "prod-gpu-mps-p100": 30,
        "prod-gpu-t4": 20,
        "prod-gpu-p100": 20,
        "prod-cpu": 1,
    }


def test_a_scarce_kind_puts_both_its_groups_below_every_other_gpu_group_and_above_the_rest() -> None:
    text = ranked(GROUPS, plan(scarce_kinds=((PRODUCT, P100),))).priorities()

    got = {name: expander_priority(text, name) for name in NAMES}
    assert got == {
        "prod-gpu-mps-t4": 30,
        "prod-gpu-t4": 20,
        "prod-gpu-p100": 10,
        "prod-gpu-mps-p100": 10,  # its product carries -SHARED: the same kind
        "prod-cpu": 1,
    }


def test_a_scarce_pin_on_another_label_keeps_the_groups_whose_nodes_it_allows() -> None:
    zone = "topology.kubernetes.io/zone"
    groups = (
        NodeGroup("^eu-a-t4$", {PRODUCT: T4, zone: "eu-a"}),
        NodeGroup("^eu-b-t4$", {PRODUCT: T4, zone: "eu-b"}),
    )
    pin = Pin(((zone, ("eu-b",)),), datetime(2026, 12, 7, tzinfo=UTC))

    ranking = ranked(groups, plan(scarce_pins=(pin,)))

    assert [(tier.priority, tier.patterns) for tier in ranking.tiers] == [
        (20, ("^eu-a-t4$",)),
        (10, ("^eu-b-t4$",)),
        (1, (".*",)),
    ]
    note = ranking_note(groups, plan(scarce_pins=(pin,)), "kube-system")
    assert "kube-system/cluster-autoscaler-priority-expander" in note
    assert "10 (kept for pinned pods): ^eu-b-t4$" in note and "as apply mode writes it" in note
    assert "to write by hand" in ranking_note(groups, plan(), "kube-system", written=False)


def test_the_setting_is_read_into_groups() -> None:
    text = (
        '[{"pattern": "^prod-gpu-mps-t4$", "labels": {"nvidia.com/device-plugin.config": "mps-2"}},'
        ' {"pattern": "a"}]'
    )

    groups = parse_node_groups(text)

    assert groups == (
        NodeGroup("^prod-gpu-mps-t4$", {"nvidia.com/device-plugin.config": "mps-2"}),
        NodeGroup("a", {}),
    )
    assert [g.shared for g in groups] == [True, False]
    assert parse_node_groups("[]") == parse_node_groups("") == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not valid JSON"),
        ('{"pattern": "a"}', "must be a JSON list"),
        ('[{"name": "a"}]', r'autoscaler_node_groups\[0\] must be an object with the keys "pattern"'),
        ('[{"pattern": ""}]', "non-empty regular expression"),
        ('[{"pattern": "a("}]', "is not a regular expression"),
        ('[{"pattern": "^gpu-(?!p100)"}]', "look-arounds and back-references are not RE2"),
        ('[{"pattern": ".*"}]', "catch-all"),
        ('[{"pattern": "a", "labels": {"x": 1}}]', "must map label names to values"),
    ],
)
def test_a_malformed_setting_is_refused_saying_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        parse_node_groups(text)
