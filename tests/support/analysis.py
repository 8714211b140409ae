"""The shipped post-wave analysis checks, adjusted for tests that run a rollout on the simulated fleet."""

from __future__ import annotations

from typing import Any

import yaml

from slicewise.settings import CONFIG_DIR


def measured_only(name: str) -> dict[str, Any]:
    """The shipped check ``name`` (include/config/analysis.yaml) as a dry run: measured and reported, never
    deciding the wave. Passed in ``analysis_extra_checks``, it replaces the shipped one.

    For ``utilisation-drop`` on the simulated fleet: its load after a change is a fresh draw, not the same pods'
    load, and a node nearly idle before the change can draw no running pod at all for the seconds a test
    measures (CI: sim-a100-80-1 at 4 % before, 0 after a change at 08:42 UTC, rolled back even with
    ``analysis_util_drop`` 0.99). The rule itself is tested in tests/unit.
    """
    checks = yaml.safe_load((CONFIG_DIR / "analysis.yaml").read_text())["checks"]
    (check,) = (c for c in checks if c["name"] == name)
    return {**check, "dry_run": True}
