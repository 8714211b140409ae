"""Published what-if reviews: which is the newest, and what it advises about planner_consolidation."""

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
