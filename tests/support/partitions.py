"""Validated metric partitions written as the ingest DAG publishes them, from the simulator's own frames."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np

from slicewise import store
from slicewise.simulator.fleet import Fleet
from slicewise.simulator.frames import demand as simulated_demand
from slicewise.simulator.frames import gpu_samples as simulated_gpu_samples
from slicewise.store import DEMAND_FILE, GPU_FILE


def publish_hour(root: store.ObjectStoragePath, fleet: Fleet, start: datetime) -> None:
    """A validated partition of simulated data for ``[start, start + 1 h)``."""
    stamps = np.arange(int(start.timestamp()), int((start + timedelta(hours=1)).timestamp()), 60)
    paths = store.PartitionPaths(root, start)
    staging = paths.new_staging()
    meta = {"interval_start": start.isoformat(), "step_s": "60"}
    store.write_frame(simulated_gpu_samples(fleet, stamps), staging / GPU_FILE, {**meta, "kind": "gpu"})
    store.write_frame(simulated_demand(fleet, stamps), staging / DEMAND_FILE, {**meta, "kind": "demand"})
    store.publish(staging, paths.published, {"interval_start": start.isoformat()})
