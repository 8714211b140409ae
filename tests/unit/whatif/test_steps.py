"""The what-if review on validated partitions of the simulated fleet: what it reads, what it publishes, and the
inputs it refuses."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from slicewise import store
from slicewise.settings import load_settings
from slicewise.simulator.fleet import Fleet
from slicewise.whatif.reviews import folder_of as review_folder
from slicewise.whatif.steps import NoValidatedHistory, ReviewError, run_review, window_of
from tests.support.partitions import publish_hour

DAY = datetime(2026, 11, 24, tzinfo=UTC)


@pytest.fixture
def root(tmp_path: Path) -> store.ObjectStoragePath:
    root = store.storage_path((tmp_path / "store").as_uri())
    fleet = Fleet.default()
    for hour in (0, 1, 3):  # hour 2 missing (never published, or quarantined)
        publish_hour(root, fleet, DAY + timedelta(hours=hour))
    return root


def test_the_validated_hours_are_replayed_once_per_consolidation_mode_and_published(
    root: store.ObjectStoragePath,
) -> None:
    settings = load_settings(None, {"storage_root": str(root)})
    until = DAY + timedelta(hours=4)
    summary = run_review(settings, DAY, until, "spread", ("off", "whole-gpus", "nodes"))
    assert summary["hours"] == {"read": 3, "missing_or_quarantined": 1, "unreadable": 0}
    assert list(summary["policies"]) == [
        "static",
        "packing/off",
        "packing/whole-gpus",
        "packing/nodes",
        "packing, whole GPUs for pending-now",  # the other planner_whole_gpu_demand, in the setting's mode
        "packing, standby off",  # the setting (on by default) the other way round, in the setting's mode
        "ideal",
    ]
    assert summary["pods"] > 0 and summary["nodes"] == len(Fleet.default().nodes)
    [choice] = summary["consolidation_choice"]
    assert choice.startswith("packing: least wait with planner_consolidation=")
    [standby] = summary["standby_choice"]
    [whole] = summary["whole_gpu_demand_choice"]
    mine = summary["policies"]["packing/whole-gpus"]
    assert whole.startswith(f"packing with whole GPUs for median (the setting): {mine['wait_mean_s']:,.0f} s")
    assert standby.startswith(
        f"packing with standby on (the setting): {mine['wait_mean_s']:,.0f} s mean wait"
    )
    folder = review_folder(root, DAY, until)
    assert store.read_manifest(folder) is not None  # published, not a half-written folder
    written = json.loads((folder / "summary.json").read_text())
    assert written["hours"] == summary["hours"] and written["model"]["scheduler"] == "spread"
    assert "least wait with planner_consolidation=" in (folder / "report.html").read_text()
    # What the "What-if" page reads (tests/plugins/fleet_data.REVIEW is shaped the same).
    assert {
        "window",
        "hours",
        "trace",
        "model",
        "setup_choice",
        "consolidation_choice",
        "standby_choice",
    } <= set(written)
    page_fields = {"wait_mean_s", "wait_cut_vs_static", "node_gpu_hours", "node_gpu_hours_cut_vs_static"}
    assert page_fields | {"service_gpu_hours", "pods_evicted", "still_waiting"} <= set(
        written["policies"]["packing/nodes"]
    )
    assert {"scale_down_unneeded_s", "shared_node_group"} <= set(written["model"])


def test_one_mode_is_the_packing_row_and_an_unreadable_hour_is_counted_and_left_out(
    root: store.ObjectStoragePath,
) -> None:
    (store.PartitionPaths(root, DAY + timedelta(hours=1)).published / store.DEMAND_FILE).write_text(
        "not parquet"
    )
    settings = load_settings(None, {"storage_root": str(root), "planner_consolidation": "nodes"})
    summary = run_review(
        settings,
        DAY,
        DAY + timedelta(hours=4),
        "spread",
        ("off",),
        prefer_shared=False,
        compare_standby=False,
        compare_whole_gpu_demand=False,
    )
    assert summary["hours"] == {"read": 2, "missing_or_quarantined": 1, "unreadable": 1}
    assert list(summary["policies"]) == ["static", "packing", "ideal"]
    assert summary["standby_choice"] == summary["whole_gpu_demand_choice"] == []
    written = json.loads((review_folder(root, DAY, DAY + timedelta(hours=4)) / "summary.json").read_text())
    assert written["model"]["planner"]["consolidation"] == "off"  # what was asked, not the cluster's "nodes"
    assert written["model"]["prefer_shared"] is False  # the Param, as the scheduler model replayed it
    assert not list((root / "_staging").rglob("*.json"))  # nothing left half-written
    # Several modes without the cluster's own ("nodes"): no row of the setting to compare standby with.
    summary = run_review(settings, DAY, DAY + timedelta(hours=4), "spread", ("off", "whole-gpus"))
    assert list(summary["policies"]) == ["static", "packing/off", "packing/whole-gpus", "ideal"]
    assert summary["standby_choice"] == summary["whole_gpu_demand_choice"] == []


def test_under_an_autoscaler_the_review_replays_packing_per_other_mps_release_value(
    root: store.ObjectStoragePath,
) -> None:
    settings = load_settings(None, {"storage_root": str(root), "planner_mps_release_below": 1.0})
    until = DAY + timedelta(hours=4)
    quiet = {"compare_standby": False, "compare_whole_gpu_demand": False}
    summary = run_review(settings, DAY, until, "spread", ("whole-gpus",), scale_down_unneeded_s=600, **quiet)
    # The default values (0 and 1) less the setting's own; static-shared: the node group without the planner.
    assert list(summary["policies"]) == [
        "static",
        "static-shared",
        "packing",
        "packing, MPS release below 0",
        "ideal",
    ]
    [setup] = summary["setup_choice"]
    figures = summary["policies"]
    assert setup.startswith(
        f"the hourly decisions: packing waits {figures['packing']['wait_mean_s']:,.0f} s, "
    )
    assert f"against static-shared ({figures['static-shared']['wait_mean_s']:,.0f} s: " in setup
    [line] = summary["mps_release_choice"]
    assert line.startswith("packing with MPS release below 1 (the setting): ")
    assert "; MPS release below 0: " in line and "paid GPU-hours" in line
    # Without an autoscaler nothing reads the marks: no replay, no line.
    summary = run_review(settings, DAY, until, "spread", ("whole-gpus",), **quiet)
    assert list(summary["policies"]) == ["static", "packing", "ideal"] and summary["mps_release_choice"] == []
    assert summary["setup_choice"] == []  # no autoscaler, no node group: static-shared would be static
    kept = load_settings(None, {"storage_root": str(root), "planner_keep_shaped": False})
    summary = run_review(kept, DAY, until, "spread", ("whole-gpus",), scale_down_unneeded_s=600, **quiet)
    assert summary["mps_release_choice"] == []  # planner_keep_shaped off: no marks either
    with pytest.raises(ReviewError, match="MPS release values to compare must be in"):
        run_review(settings, DAY, until, "spread", ("whole-gpus",), compare_mps_release_below=(2.0,))


def test_the_window_ends_at_until_or_the_runs_hour_and_a_bad_until_fails() -> None:
    run_after = datetime(2026, 11, 30, 2, 30, 12, tzinfo=UTC)
    week = (datetime(2026, 11, 23, 2, tzinfo=UTC), datetime(2026, 11, 30, 2, tzinfo=UTC))
    assert window_of(None, 7, run_after) == week
    assert window_of("2026-11-24T12", 1, run_after) == (DAY - timedelta(hours=12), DAY + timedelta(hours=12))
    with pytest.raises(ReviewError, match="YYYY-MM-DDTHH"):
        window_of("2026-13-40T25", 7, run_after)
    with pytest.raises(ReviewError, match="after this run's hour"):
        window_of("2026-11-30T03", 7, run_after)


def test_a_window_without_validated_hours_is_not_yet_and_bad_inputs_fail(
    root: store.ObjectStoragePath,
) -> None:
    settings = load_settings(None, {"storage_root": str(root)})
    with pytest.raises(NoValidatedHistory, match="no validated metrics partition"):
        run_review(settings, DAY - timedelta(days=1), DAY, "spread", ("whole-gpus",))
    with pytest.raises(ReviewError, match="unknown scheduler model 'magic'"):
        run_review(settings, DAY, DAY + timedelta(hours=4), "magic", ("whole-gpus",))
    with pytest.raises(ReviewError, match="whole hours"):
        run_review(settings, DAY + timedelta(minutes=30), DAY + timedelta(hours=4), "spread", ("off",))


def test_keeping_each_pods_first_and_last_sample_of_an_hour_loses_nothing_the_trace_reads() -> None:
    from slicewise.catalog import load_catalog
    from slicewise.simulator.frames import demand, gpu_samples
    from slicewise.whatif.history import trace_from_frames
    from slicewise.whatif.steps import pod_ends

    fleet = Fleet.default()
    stamps = list(range(int(DAY.timestamp()), int(DAY.timestamp()) + 3600, 60))
    full, gpu = demand(fleet, stamps), gpu_samples(fleet, stamps[-5:])
    ends = pod_ends(full)
    assert len(ends) < len(full) / 10
    catalog = load_catalog()
    assert trace_from_frames(ends, gpu, DAY, 60, catalog) == trace_from_frames(full, gpu, DAY, 60, catalog)


def test_the_plan_notes_carry_the_newest_reviews_advice_and_a_broken_review_costs_nothing(
    root: store.ObjectStoragePath, caplog: pytest.LogCaptureFixture
) -> None:
    from slicewise.planning.steps import review_advice

    settings = load_settings(None, {"storage_root": str(root), "planner_consolidation": "nodes"})
    assert review_advice(settings, DAY) == []  # no review yet
    until = DAY + timedelta(hours=4)
    run_review(settings, DAY, until, "spread", ("off", "whole-gpus", "nodes"))
    # On these four simulated hours every mode and setting waits the same: the settings are as good as any.
    assert review_advice(settings, until) == []
    summary_file = review_folder(root, DAY, until) / "summary.json"
    summary = json.loads(summary_file.read_text())
    summary["policies"]["packing/off"]["wait_mean_s"] /= 2
    # Standby off (replayed in the setting's mode, nodes) now waits less than the setting's row at the same
    # node-GPU-hours: better on one count, no worse on the other.
    standby_off = summary["policies"]["packing, standby off"]
    standby_off["wait_mean_s"] = summary["policies"]["packing/nodes"]["wait_mean_s"] / 2
    summary_file.write_text(json.dumps(summary))
    consolidation, standby = review_advice(settings, until)
    assert "planner_consolidation=off waited least" in consolidation
    assert "planner_standby=false waited" in standby and "node-GPU-hours" in standby  # no autoscaler replayed
    summary_file.write_text("[1, 2]")
    assert review_advice(settings, until) == []
    assert "could not be read" in caplog.text


def test_an_autoscaler_for_every_node_is_replayed_when_the_cluster_runs_one(
    root: store.ObjectStoragePath,
) -> None:
    settings = load_settings(None, {"storage_root": str(root)})
    until = DAY + timedelta(hours=4)
    fixed = run_review(settings, DAY, until, "spread", ("whole-gpus",), compare_standby=False)
    scaled = run_review(
        settings,
        DAY,
        until,
        "spread",
        ("whole-gpus",),
        compare_standby=False,
        scale_down_unneeded_s=0.0,
        shared_node_group=False,
        scale_down_utilization_threshold=0.3,
        shared_node_group_max_gpus=2,
    )
    written = json.loads((review_folder(root, DAY, until) / "summary.json").read_text())
    model = written["model"]
    assert (model["scale_down_unneeded_s"], model["shared_node_group"]) == (0.0, False)
    assert model["shared_node_group_max_gpus"] == 2
    assert model["scale_down_utilization_threshold"] == 0.3
    # Nodes the simulated fleet leaves idle leave service at once: the cluster pays for fewer GPU-hours.
    assert (
        scaled["policies"]["static"]["service_gpu_hours"] < fixed["policies"]["static"]["service_gpu_hours"]
    )
    with pytest.raises(ReviewError, match="unneeded time must be >= 0"):
        run_review(settings, DAY, until, "spread", ("off",), scale_down_unneeded_s=-1.0)
    with pytest.raises(ReviewError, match=r"utilisation threshold must be in \[0, 1\]"):
        run_review(settings, DAY, until, "spread", ("off",), scale_down_utilization_threshold=2.0)


def test_the_review_replays_as_evictable_only_the_pods_that_opted_in_unless_told_all(
    root: store.ObjectStoragePath,
) -> None:
    # given the simulated fleet's hours, whose serving and notebook pods carry slicewise.io/evictable=true and
    # whose training jobs do not
    opted_in = set()
    for hour in (0, 1, 3):
        demand, _ = store.read_frame(
            store.PartitionPaths(root, DAY + timedelta(hours=hour)).published / store.DEMAND_FILE
        )
        opted_in |= set(demand.loc[demand["eviction_opt_in"], "pod"])
    settings = load_settings(None, {"storage_root": str(root)})
    until = DAY + timedelta(hours=4)
    quiet = {"compare_standby": False, "compare_whole_gpu_demand": False}

    # when the review runs as scheduled (evictable: annotated)
    summary = run_review(settings, DAY, until, "spread", ("whole-gpus",), **quiet)

    # then it counts the pods that opted in, replays only them as evictable, and says so on the page
    assert 0 < len(opted_in) < summary["pods"]
    assert (summary["evictable"], summary["pods_opted_in"]) == ("annotated", len(opted_in))
    folder = review_folder(root, DAY, until)
    written = json.loads((folder / "summary.json").read_text())
    assert written["model"]["evictable"] == "annotated"
    assert (
        f"{len(opted_in):,} of {summary['pods']:,} pods carried slicewise.io/evictable=true"
        in (written["trace"]["notes"])
    )
    assert "only the pods that carried slicewise.io/evictable=true" in (folder / "report.html").read_text()

    # and told "all", every pod may be evicted
    summary = run_review(settings, DAY, until, "spread", ("whole-gpus",), evictable="all", **quiet)
    assert summary["evictable"] == "all"
    assert "may evict every pod" in (folder / "report.html").read_text()
    with pytest.raises(ReviewError, match="evictable must be one of"):
        run_review(settings, DAY, until, "spread", ("whole-gpus",), evictable="best-effort", **quiet)
