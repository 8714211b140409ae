"""The live exporter: the simulated fleet served as dcgm-exporter and kube-state-metrics would serve it.

A ``prometheus_client`` custom collector computes every series at the current second on each scrape (no
sample timestamps, like the real exporters; Prometheus stamps the scrape). Values are the same functions of
time as the backfill's, so history and live data join without a seam.

Given the simulated cluster's state file (:mod:`slicewise.simulator.cluster`), the exporter serves the MIG
layouts and MPS replicas the MIG-manager emulation has applied instead of the configured ones: a node's
series change when its reconfiguration completes. Cordons and evictions do not show in the series: the load
model is a function of time and layout only.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from wsgiref.simple_server import WSGIServer

import numpy as np
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from slicewise.simulator.exposition import HOSTNAME_LABELS, families_at
from slicewise.simulator.fleet import Fleet, FleetConfigError

log = logging.getLogger(__name__)


class FleetCollector(Collector):
    """Collects the fleet's dcgm-exporter and kube-state-metrics series at ``clock()`` (unix seconds).

    With ``state_path`` (the simulated cluster's state file), each scrape uses the layouts applied there; a
    missing file means the configured fleet.
    """

    def __init__(
        self,
        fleet: Fleet,
        *,
        hostname_label: str = "Hostname",
        clock: Callable[[], float] = time.time,
        state_path: Path | None = None,
    ) -> None:
        if hostname_label not in HOSTNAME_LABELS:
            raise ValueError(f"hostname_label must be one of {HOSTNAME_LABELS}, got {hostname_label!r}")
        self.fleet = fleet
        self.hostname_label = hostname_label
        self.clock = clock
        self.state_path = state_path
        self._applied = _AppliedFleet(fleet, state_path, clock) if state_path is not None else None

    def describe(self) -> list[Metric]:
        # Nothing to describe up front: registering must not compute a scrape.
        return []

    def fleet_at(self, now: float) -> Fleet:
        """The fleet a scrape at ``now`` renders: the configured one, or with the applied layouts."""
        return self.fleet if self._applied is None else self._applied.at(now)

    def collect(self) -> Iterator[Metric]:
        instant = self.clock()
        now = np.array([int(instant)], dtype=np.int64)
        fleet = self.fleet_at(instant)
        for family in families_at(fleet, now, hostname_label=self.hostname_label):
            metric = Metric(family.name, family.help, "gauge")
            labels = [dict(label_set) for label_set in family.label_sets]
            for code, value in zip(family.codes.tolist(), family.values.tolist(), strict=True):
                metric.add_sample(family.name, labels[code], value)
            yield metric


class _AppliedFleet:
    """The fleet with the layouts of the cluster state file, rebuilt only when the file changes.

    A scrape stats the file; only a changed file (inode, mtime, size) is read again (under the shared lock).
    A reconfiguration that has come due since the last write is advanced here (exclusive lock, written back),
    so the series switch layout on time even when no other process touches the state.
    """

    def __init__(self, fleet: Fleet, state_path: Path, clock: Callable[[], float]) -> None:
        self.base = fleet
        self.state_path = state_path
        self.clock = clock
        self._lock = threading.Lock()  # prometheus_client may collect from several threads at once
        self._key: tuple[int, int, int] | None = None
        self._fleet = fleet
        self._due: float | None = None

    def at(self, now: float) -> Fleet:
        from slicewise.cluster.base import ClusterError
        from slicewise.simulator.cluster import SimulatedCluster, file_key

        with self._lock:
            try:
                if self._due is not None and now >= self._due:
                    SimulatedCluster.open(self.state_path, fleet=self.base, clock=self.clock).refresh()
                if file_key(self.state_path) != self._key:
                    self._reload()
            except (ClusterError, FleetConfigError, OSError) as exc:
                # A scrape must not fail on a bad state file: serve the last good layouts and say why.
                log.warning("simulated cluster state %s not used: %s", self.state_path, exc)
            return self._fleet

    def _reload(self) -> None:
        from slicewise.simulator.cluster import StateFile, applied_layouts, next_due

        state, key = StateFile(self.state_path).read()
        self._key = key
        if state is None:
            self._fleet, self._due = self.base, None
            return
        ours = {node.name for node in self.base.nodes}
        layouts = {name: value for name, value in applied_layouts(state).items() if name in ours}
        self._fleet = self.base.with_applied(layouts)
        self._due = next_due(state)


def make_registry(
    fleet: Fleet,
    *,
    hostname_label: str = "Hostname",
    clock: Callable[[], float] = time.time,
    state_path: Path | None = None,
) -> CollectorRegistry:
    """A registry holding only the fleet collector (no process or platform metrics of this Python)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        FleetCollector(fleet, hostname_label=hostname_label, clock=clock, state_path=state_path)
    )
    return registry


def _check_loopback(host: str) -> None:
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        raise ValueError(f"the simulator serves on a loopback address only (127.0.0.1, ::1), not {host!r}")


def serve(
    fleet: Fleet,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    hostname_label: str = "Hostname",
    state_path: Path | None = None,
    container: bool = False,
) -> tuple[WSGIServer, int]:
    """Serve ``/metrics`` on ``host:port`` (port 0 = any free port) in a daemon thread.

    Returns the server and the bound port; stop it with ``server.shutdown(); server.server_close()``.
    Only loopback addresses are accepted, unless ``container``: inside a container of the compose stack the
    exporter must listen on the container's network for Prometheus to reach it (no host port is published).
    ``state_path``: serve the layouts applied in the simulated cluster.
    """
    if not container:
        _check_loopback(host)
    server, _thread = start_http_server(
        port, addr=host, registry=make_registry(fleet, hostname_label=hostname_label, state_path=state_path)
    )
    return server, int(server.server_address[1])
