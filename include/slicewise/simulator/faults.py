"""Fault injection for tests: bad data the ingest and validation must catch, written into the backfill.

Each fault applies to the dcgm series of the chosen nodes at timestamps in ``[start_s, end_s)``; several can be
combined. What a Prometheus read of the backfilled data then shows:

- ``nan``: ``engine_active``, ``dram_active`` and (whole / MPS GPUs) ``gpu_util`` are NaN;
- ``out_of_range``: ``engine_active`` is 1.7 and (whole / MPS GPUs) ``gpu_util`` is 140;
- ``gaps``: no sample at all for those series (every field, the device-level ones included);
- ``duplicate_pod``: a second series per GPU series with the pod label ``<pod or "ghost">-dup`` (namespace
  ``<namespace or "default">``, container ``<container or "main">``) and the same values, so the read frame
  holds duplicate (hostname, gpu, gpu_instance_id, timestamp) keys;
- ``drop_labels``: the ``modelName`` and ``Hostname``/``hostname`` labels are missing (model_name and hostname
  read as "").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from slicewise import schema
from slicewise.simulator.frames import Rows, concat, take
from slicewise.simulator.layout import KIND_MIG


@dataclass(frozen=True)
class Faults:
    """Which faults to write, when (``[start_s, end_s)`` unix seconds) and on which nodes (empty = all)."""

    start_s: int
    end_s: int
    nodes: tuple[str, ...] = ()
    nan: bool = False
    out_of_range: bool = False
    gaps: bool = False
    duplicate_pod: bool = False
    drop_labels: bool = False

    def affected(self, rows: Rows) -> np.ndarray:
        """Boolean mask of the rows inside the fault window and on the chosen nodes."""
        ts = rows[schema.TIMESTAMP]
        mask = (ts >= self.start_s) & (ts < self.end_s)
        if self.nodes:
            mask &= np.isin(rows["hostname"], list(self.nodes))
        return np.asarray(mask)

    def apply(self, rows: Rows) -> Rows:
        """A copy of the GPU rows table with the faults written in (input unchanged)."""
        hit = self.affected(rows)
        out = {name: col.copy() for name, col in rows.items()}
        if not hit.any():
            return out
        whole = hit & (out["kind"] != KIND_MIG)
        if self.nan:
            out["engine_active"][hit] = np.nan
            out["dram_active"][hit] = np.nan
            out["gpu_util"][whole] = np.nan
        if self.out_of_range:
            out["engine_active"][hit] = 1.7
            out["gpu_util"][whole] = 140.0
        if self.drop_labels:
            out["model_name"][hit] = ""
            out["hostname"][hit] = ""
        if self.duplicate_pod:
            dup = take(out, np.flatnonzero(hit))
            dup["pod"] = np.array([f"{p or 'ghost'}-dup" for p in dup["pod"].tolist()], dtype=object)
            dup["namespace"] = np.array([n or "default" for n in dup["namespace"].tolist()], dtype=object)
            dup["container"] = np.array([c or "main" for c in dup["container"].tolist()], dtype=object)
            # The copy carries no device-level samples: one physical GPU has one power reading.
            dup["device_row"] = np.zeros(len(dup["device_row"]), dtype=bool)
            out = concat(out, dup)
        if self.gaps:  # drops the hit rows and any duplicates of them
            n_dup = len(out["pod"]) - len(hit)
            dropped = np.concatenate([hit, np.ones(n_dup, dtype=bool)])
            out = take(out, np.flatnonzero(~dropped))
        return out
