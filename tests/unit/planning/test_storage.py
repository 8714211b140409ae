"""What a planning run writes between its tasks reads back as it was written."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from slicewise import store
from slicewise.cluster.base import GpuNode, GpuPod, Taint
from slicewise.forecasting.forecasts import DemandForecast, Forecasts, SeriesForecast
from slicewise.planning import storage
from slicewise.planning.types import DesiredState, FleetPlan, NodeObservation, NodePlan, Pin, PodMove


def test_forecasts_read_back_with_the_pending_pods_model_and_label_pins(tmp_path: Path) -> None:
    folder = store.storage_path(tmp_path.as_uri()) / "plans" / "run"
    folder.mkdir(parents=True)
    written = Forecasts(
        series=(SeriesForecast("n1", 0, "", "", 0.25, 0.5, 0.1),),
        demand=(
            DemandForecast("nvidia.com/gpu", 1.0, 2.0, share=0.5, models=("A100-80GB",)),
            DemandForecast(
                "slicewise.io/whole-gpus", 1.0, 1.0, 1.0, 2, node_selector=(("pool", ("a", "b")),), latest=1.0
            ),
        ),
        predictor="p90_last_hour",
        trusted=True,
    )
    path = storage.write_forecasts(folder, written)
    assert storage.read_forecasts(path) == written
    # Forecasts written before the pending-now count was kept read back without it (the planner then counts
    # whole-GPU requests at the median).
    raw = json.loads(path.read_text())
    for demand in raw["demand"]:
        del demand["latest"]
    path.write_text(json.dumps(raw))
    assert [d.latest for d in storage.read_forecasts(path).demand] == [None, None]


def test_observed_nodes_and_pods_read_back_with_taints_and_starts(tmp_path: Path) -> None:
    folder = store.storage_path(tmp_path.as_uri()) / "plans" / "run"
    folder.mkdir(parents=True)
    node = GpuNode(
        "n1", "NVIDIA-H100-80GB-HBM3", 2, "all-disabled", "success", "default", {}, False,
        taints=(Taint("slicewise.io/standby", "PreferNoSchedule"),),
    )  # fmt: skip
    started = GpuPod(
        "ml", "a", "n1", "Running", {"nvidia.com/gpu": 1}, "Job", "a", True,
        node_selector={"pool": ("x",)}, started_at=datetime(2026, 12, 5, 6, 30, tzinfo=UTC),
    )  # fmt: skip
    unknown = dataclasses.replace(started, name="b", started_at=None)
    written = [NodeObservation(node, (started, unknown))]
    path = storage.write_observations(folder, written)
    assert storage.read_observations(path) == written
    # Observations written before the start was kept read back as not known (the planner then lets them move).
    raw = json.loads(path.read_text())
    for pod in raw[0]["pods"]:
        del pod["started_at"]
    path.write_text(json.dumps(raw))
    assert [p.started_at for p in storage.read_observations(path)[0].pods] == [None, None]


def test_a_plan_reads_back_with_its_standby_grades_and_an_older_plan_with_two_lists(tmp_path: Path) -> None:
    folder = store.storage_path(tmp_path.as_uri()) / "plans" / "run"
    keep = DesiredState("all-disabled", "")
    node = NodePlan("t4-0", "T4-16GB", 2, keep, keep, "keep", "packing", "keep", ("idle",), 0.0, 0.0, 0.0)
    grades = (("t4-0", "t4-4", "t4-8"), ("t4-4", "t4-8"), ("t4-8",))
    written = FleetPlan("packing", "v1", True, 60, (node,), ("a note",), grades)
    paths = storage.write_plan(folder, written)
    plan_json = folder / storage.PLAN_JSON
    assert paths[storage.PLAN_JSON] == str(plan_json)
    assert storage.read_plan(plan_json) == written
    # Written before the size grades: the two lists of the first two taints read as the first two grades.
    older = json.loads(plan_json.read_text())
    del older["standby_grades"]
    plan_json.write_text(json.dumps({**older, "standby": ["t4-0", "t4-8"], "standby_large": ["t4-8"]}))
    two = (("t4-0", "t4-8"), ("t4-8",))
    assert storage.read_plan(plan_json) == dataclasses.replace(written, standby_grades=two)
    # ... before the second taint: one grade; before planner_standby: none.
    plan_json.write_text(json.dumps({**older, "standby": ["t4-0", "t4-8"]}))
    assert storage.read_plan(plan_json).standby_grades == (("t4-0", "t4-8"),)
    plan_json.write_text(json.dumps(older))
    assert storage.read_plan(plan_json).standby_grades == ()


def test_a_plan_reads_back_with_its_autoscaler_marks_and_moves_and_an_older_plan_with_none(
    tmp_path: Path,
) -> None:
    folder = store.storage_path(tmp_path.as_uri()) / "plans" / "run"
    move = PodMove("team", "small-1", "whole-1", 0.4, ("mps-1", "mps-2"))
    written = FleetPlan("packing", "v1", True, 60, (), scale_down_disabled=("mig-0", "mps-1"), moves=(move,))
    storage.write_plan(folder, written)
    plan_json = folder / storage.PLAN_JSON
    assert storage.read_plan(plan_json) == written
    older = json.loads(plan_json.read_text())
    del older["scale_down_disabled"]  # written before planner_keep_shaped
    del older["moves"]  # and before planner_rehome
    plan_json.write_text(json.dumps(older))
    assert (storage.read_plan(plan_json).scale_down_disabled, storage.read_plan(plan_json).moves) == ((), ())


def test_a_plans_pins_read_back_and_the_newest_published_plan_hands_them_to_the_next(tmp_path: Path) -> None:
    root = store.storage_path(tmp_path.as_uri())
    assert storage.latest_pins(root) == ()  # no plan published yet
    seen = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    pin = Pin((("nvidia.com/gpu.product", ("Tesla-P100-PCIE-16GB",)),), seen)
    written = FleetPlan(
        "packing",
        "v1",
        True,
        60,
        (),
        pins=(pin,),
        scarce_pins=(pin,),
        pinned_nodes=("p100-1", "v100-1"),
        scarce_kinds=(
            ("nvidia.com/gpu.product", "Tesla-P100-PCIE-16GB"),
            ("nvidia.com/gpu.product", "Tesla-V100"),
        ),
    )
    storage.write_plan(storage.run_folder(root, "run-1"), written)
    assert storage.read_plan(storage.run_folder(root, "run-1") / storage.PLAN_JSON) == written
    storage.mark_latest(root, "run-1", seen)
    assert storage.latest_pins(root) == (pin,)
    # A plan written before planner_pinned_share reads back with none.
    plan_json = storage.run_folder(root, "run-1") / storage.PLAN_JSON
    older = json.loads(plan_json.read_text())
    for key in ("pins", "scarce_pins", "pinned_nodes", "scarce_kinds"):
        del older[key]
    plan_json.write_text(json.dumps(older))
    assert storage.latest_pins(root) == ()
    assert storage.read_plan(plan_json).scarce_kinds == ()


def test_the_next_plan_remembers_the_newest_plans_pins_and_none_when_that_plan_cannot_be_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from slicewise.planning.steps import remembered_pins
    from slicewise.settings import load_settings

    settings = load_settings(None, {"storage_root": tmp_path.as_uri()})
    root = store.storage_path(settings.storage_root)
    seen = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    pin = Pin((("pool", ("p100",)),), seen)
    storage.write_plan(
        storage.run_folder(root, "run-1"), FleetPlan("packing", "v1", True, 60, (), pins=(pin,))
    )
    storage.mark_latest(root, "run-1", seen)
    assert remembered_pins(settings) == (pin,)
    (storage.run_folder(root, "run-1") / storage.PLAN_JSON).write_text("{not json")
    assert remembered_pins(settings) == ()
    assert "the newest plan's pins could not be read; this plan remembers none" in caplog.text


def test_prune_runs_removes_the_plan_folders_made_before_the_cutoff_but_never_the_newest_plans(
    tmp_path: Path,
) -> None:
    root = store.storage_path(tmp_path.as_uri())
    assert storage.prune_runs(root, datetime(2026, 11, 29, tzinfo=UTC)) == []  # no plans yet
    runs = [
        "scheduled__2026-11-27T10:00:00+00:00",
        "manual__2026-11-28T09:45:00.123+00:00",
        "scheduled__2026-11-29T10:00:00+00:00",
        "my-run",  # no time in its name: not one of the planner's, kept
    ]
    for run in runs:
        storage.write_plan(storage.run_folder(root, run), FleetPlan("packing", "v1", True, 60, ()))
    # The newest plan (which the next plan reads its pins from) is the oldest here: the planner paused.
    storage.mark_latest(root, runs[0], datetime(2026, 11, 27, 10, tzinfo=UTC))

    removed = storage.prune_runs(root, datetime(2026, 11, 29, 10, tzinfo=UTC))

    assert removed == [storage.run_folder(root, runs[1]).name]
    assert sorted(p.name for p in (root / "plans").iterdir()) == sorted(
        [storage.LATEST, *(storage.run_folder(root, run).name for run in (runs[0], runs[2], runs[3]))]
    )
