"""The shipped post-wave analysis checks, adjusted for tests that run a rollout on the simulated fleet."""

from __future__ import annotations

from typing import Any

from slicewise.rollout.checks import dry_run_of


def measured_only(name: str) -> dict[str, Any]:
    """The shipped check ``name`` as a dry run (:func:`slicewise.rollout.checks.dry_run_of`).

    For ``utilisation-drop`` on the simulated fleet: its load after a change is a fresh draw, not the same pods'
    load, and a node nearly idle before the change can draw no running pod at all for the seconds a test
    measures (CI: sim-a100-80-1 at 4 % before, 0 after a change at 08:42 UTC, rolled back even with
    ``analysis_util_drop`` 0.99). The demo runs it so too (``slicewise.demo.DEMO_SETTINGS``); the rule itself is
    tested in tests/unit.
    """
    return dry_run_of(name)
