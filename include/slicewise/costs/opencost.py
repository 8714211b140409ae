"""Join the cost report's ``allocation.csv`` with an OpenCost ``/allocation`` response, for the costs beyond GPUs.

Query OpenCost over the report's window with ``aggregate=namespace,pod,container``, ``step=1h`` and
``includeIdle=true``: its allocation names are then the three joined by ``/`` and ``__idle__`` for capacity no
workload holds — the ``name`` column of ``allocation.csv`` — and each set covers one hour, the rows' ``start``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

#: OpenCost's cost fields carried over (what Slicewise does not compute: everything but the GPUs).
OPENCOST_FIELDS = ("cpuCost", "ramCost", "pvCost", "networkCost", "totalCost")
#: Slicewise's GPU fields summed per allocation name and hour.
GPU_FIELDS = ("gpuHours", "usedGpuHours", "idleGpuHours", "unmeasuredGpuHours", "gpuCost", "gpuCostIdle")


def join(rows: pd.DataFrame, response: Mapping[str, Any]) -> pd.DataFrame:
    """Slicewise's rows summed per (``name``, ``start``) — a pod may hold several MIG instances, ``__idle__``
    spans every node — with OpenCost's cost fields of the allocation of the same name and hour (NaN where
    OpenCost has none); OpenCost's own GPU figures come along as ``opencost_gpuHours`` / ``opencost_gpuCost``."""
    import pandas as pd

    ours = rows.groupby(["name", "start"], as_index=False)[list(GPU_FIELDS)].sum()
    theirs = pd.DataFrame(
        [
            {
                "name": name,
                "start": _hour(allocation),
                **{field: allocation.get(field) for field in OPENCOST_FIELDS},
                "opencost_gpuHours": allocation.get("gpuHours"),
                "opencost_gpuCost": allocation.get("gpuCost"),
            }
            for step in response.get("data") or []
            for name, allocation in (step or {}).items()
        ],
        columns=["name", "start", *OPENCOST_FIELDS, "opencost_gpuHours", "opencost_gpuCost"],
    )
    return ours.merge(theirs, on=["name", "start"], how="left")


def _hour(allocation: Mapping[str, Any]) -> str:
    """The allocation's window start in ``allocation.csv``'s spelling (``YYYY-MM-DDTHH:MM:SSZ``)."""
    raw = allocation.get("start") or (allocation.get("window") or {}).get("start", "")
    moment = datetime.fromisoformat(str(raw).replace("Z", "+00:00")).astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
