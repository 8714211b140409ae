"""The simulated GPU fleet: the embedded default's data source.

- :class:`Fleet` (``fleet``, ``layout``): nodes, GPUs, MIG layouts / MPS replicas / whole GPUs, workload slots;
- ``load``: the deterministic load model (a pure function of seed, slot and unix second);
- :func:`gpu_samples` / :func:`demand` (``frames``): the schema frames a Prometheus read must reproduce;
- ``exposition``: the dcgm-exporter and kube-state-metrics families both transports render;
- :func:`serve` (``exporter``): the live endpoint;
- :func:`write_openmetrics` / :func:`create_blocks` (``backfill``, which also has ``backfill.backfill``
  doing both, overlapped): the same series as OpenMetrics history, turned into TSDB blocks by promtool;
- :class:`Faults` (``faults``): bad data written into the backfill for tests;
- ``cli``: ``slicewise simulate backfill|serve``;
- :class:`SimulatedCluster` (``cluster``, ``cluster_state``, ``cluster_pods``, ``mig_manager``): the cluster
  backend of the embedded default, implementing :mod:`slicewise.cluster.base` on a state file, with the GPU
  Operator's MIG manager and device plugin emulated (``cluster.factory`` imports it lazily).

pandas is imported only when a frame is built. ``backfill`` is deliberately not re-exported here: the name
would shadow the submodule.
"""

from __future__ import annotations

from slicewise.simulator.backfill import create_blocks, write_openmetrics
from slicewise.simulator.exporter import serve
from slicewise.simulator.faults import Faults
from slicewise.simulator.fleet import Fleet
from slicewise.simulator.frames import demand, gpu_samples

__all__ = [
    "Faults",
    "Fleet",
    "create_blocks",
    "demand",
    "gpu_samples",
    "serve",
    "write_openmetrics",
]
