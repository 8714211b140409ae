"""Published what-if reviews: which is the newest, and what it advises about planner_consolidation and the other
settings it compared."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from slicewise import store
from slicewise.whatif import reviews

UNTIL = datetime(2026, 11, 23, tzinfo=UTC)


def _policies(**waits: float) -> dict[str, Any]:
    return {
        "static": {"wait_mean_s": 900.0, "still_waiting": 0},
        **{f"packing/{mode}": {"wait_mean_s": wait, "still_waiting": 0} for mode, wait in waits.items()},
    }


def _publish(root: Any, since: datetime, until: datetime, summary: dict[str, Any]) -> Any:
    folder = reviews.folder_of(root, since, until)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(json.dumps(summary))
    (folder / store.MANIFEST).write_text("{}")
    return folder


def test_the_newest_review_is_the_latest_window_end_and_other_folders_are_not_reviews(tmp_path: Path) -> None:
    root = store.storage_path(tmp_path.as_uri())
    assert reviews.newest(root) is None
    _publish(root, UNTIL - timedelta(days=7), UNTIL, {"policies": {}})
    _publish(root, UNTIL - timedelta(days=2), UNTIL - timedelta(days=1), {"policies": {}})  # starts later
    (reviews.folder_of(root, UNTIL, UNTIL + timedelta(days=1))).mkdir(parents=True)  # never published
    (root / reviews.FOLDER / "notes").mkdir()
    broken = _publish(root, UNTIL, UNTIL + timedelta(hours=1), {"policies": {}})
    (broken / store.MANIFEST).write_text("{corrupt")
    newest = reviews.newest(root)
    assert newest is not None and (newest.since, newest.until) == (UNTIL - timedelta(days=7), UNTIL)
    assert len(reviews.published(root)) == 2


def test_a_fresh_review_advises_the_mode_that_waited_least_when_it_is_not_the_setting() -> None:
    summary = {"policies": _policies(off=95.0, **{"whole-gpus": 140.0, "nodes": 310.0})}
    review = reviews.Review("w", UNTIL - timedelta(days=7), UNTIL, summary, True)
    advice = reviews.consolidation_advice(review, "whole-gpus", UNTIL + timedelta(days=1))
    assert advice is not None
    assert (
        "planner_consolidation=off waited least" in advice and "140 s with whole-gpus, the setting" in advice
    )
    assert reviews.consolidation_advice(review, "off", UNTIL) is None  # the setting already waits least
    assert reviews.consolidation_advice(review, "whole-gpus", UNTIL + timedelta(days=15)) is None  # stale
    one_mode = reviews.Review("w", UNTIL - timedelta(days=7), UNTIL, {"policies": _policies(off=95.0)}, True)
    assert reviews.consolidation_advice(one_mode, "whole-gpus", UNTIL) is None  # nothing compared
    unserved = dict(summary["policies"], **{"packing/off": {"wait_mean_s": 95.0, "still_waiting": 3}})
    review = reviews.Review("w", UNTIL - timedelta(days=7), UNTIL, {"policies": unserved}, True)
    assert reviews.consolidation_advice(review, "whole-gpus", UNTIL) is None  # off left pods waiting


def _row(wait: float, node_h: float, paid_h: float, unserved: int = 0) -> dict[str, Any]:
    return {
        "wait_mean_s": wait,
        "node_gpu_hours": node_h,
        "service_gpu_hours": paid_h,
        "still_waiting": unserved,
    }


def test_the_plan_hears_of_another_setting_only_where_it_did_better_on_both_counts() -> None:
    planner = {
        "consolidation": "whole-gpus",
        "standby": True,
        "whole_gpu_demand": "median",
        "mps_release_below": 0.25,
    }
    summary: dict[str, Any] = {
        "model": {"scale_down_unneeded_s": 600.0, "planner": planner},
        "policies": {
            "static": _row(900.0, 5000.0, 5200.0),
            "packing/whole-gpus": _row(100.0, 4000.0, 4200.0),  # the setting's row
            "packing/nodes": _row(50.0, 3000.0, 3100.0),  # a consolidation mode: consolidation_advice's
            # Less wait and fewer paid hours (more busy ones): the one advised under the autoscaler.
            "packing, standby off": _row(90.0, 4100.0, 4150.0),
            "packing, whole GPUs for pending-now": _row(80.0, 3900.0, 4300.0),  # a trade: more paid hours
            "packing, MPS release below 0": _row(100.0, 4000.0, 4195.0),  # 0.1 % fewer paid hours: noise
            "packing, MPS release below 1": _row(99.0, 3990.0, 4100.0, unserved=1),  # left a pod unserved
        },
    }
    current = {
        "planner_standby": True,
        "planner_whole_gpu_demand": "median",
        "planner_mps_release_below": 0.25,
    }
    review = reviews.Review("w", UNTIL - timedelta(days=7), UNTIL, summary, True)
    [line] = reviews.setting_advice(review, current, UNTIL + timedelta(days=1))
    assert line == (
        "what-if review of 2026-11-16 00:00 .. 2026-11-23 00:00 UTC: planner_standby=false waited 90 s and used "
        "4,150 paid GPU-hours on this cluster's own history, against 100 s and 4,200 with true, the setting; see "
        "the What-if page before changing it"
    )
    assert reviews.setting_advice(review, current, UNTIL + timedelta(days=15)) == []  # stale
    # The setting changed since the review: its comparison was against another value.
    assert reviews.setting_advice(review, {**current, "planner_standby": False}, UNTIL) == []
    # Without an autoscaler the node-GPU-hours count: standby off used more of them, pending-now fewer.
    fixed = {**summary, "model": {"scale_down_unneeded_s": None, "planner": planner}}
    [line] = reviews.setting_advice(
        reviews.Review("w", UNTIL - timedelta(days=7), UNTIL, fixed, True), current, UNTIL
    )
    assert "planner_whole_gpu_demand=pending-now waited 80 s and used 3,900 node-GPU-hours" in line
    assert "against 100 s and 4,000 with median, the setting" in line
    old = {"policies": summary["policies"]}  # a summary without the model replayed advises nothing
    assert (
        reviews.setting_advice(
            reviews.Review("w", UNTIL - timedelta(days=7), UNTIL, old, True), current, UNTIL
        )
        == []
    )
    better = {**summary["policies"], "packing, MPS release below 0": _row(95.0, 4000.0, 4150.0)}
    review = reviews.Review("w", UNTIL - timedelta(days=7), UNTIL, {**summary, "policies": better}, True)
    assert any(
        "planner_mps_release_below=0 waited 95 s" in line and "with 0.25, the setting" in line
        for line in reviews.setting_advice(review, current, UNTIL)
    )
