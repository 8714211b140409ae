"""The live exporter: the simulated fleet served as dcgm-exporter and kube-state-metrics would serve it.

A ``prometheus_client`` custom collector computes every series at the current second on each scrape (no
sample timestamps, like the real exporters; Prometheus stamps the scrape). Values are the same functions of
time as the backfill's, so history and live data join without a seam.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable, Iterator
from wsgiref.simple_server import WSGIServer

import numpy as np
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from slicewise.simulator.exposition import HOSTNAME_LABELS, families_at
from slicewise.simulator.fleet import Fleet


class FleetCollector(Collector):
    """Collects the fleet's dcgm-exporter and kube-state-metrics series at ``clock()`` (unix seconds)."""

    def __init__(
        self,
        fleet: Fleet,
        *,
        hostname_label: str = "Hostname",
        clock: Callable[[], float] = time.time,
    ) -> None:
        if hostname_label not in HOSTNAME_LABELS:
            raise ValueError(f"hostname_label must be one of {HOSTNAME_LABELS}, got {hostname_label!r}")
        self.fleet = fleet
        self.hostname_label = hostname_label
        self.clock = clock

    def describe(self) -> list[Metric]:
        # Nothing to describe up front: registering must not compute a scrape.
        return []

    def collect(self) -> Iterator[Metric]:
        now = np.array([int(self.clock())], dtype=np.int64)
        for family in families_at(self.fleet, now, hostname_label=self.hostname_label):
            metric = Metric(family.name, family.help, "gauge")
            labels = [dict(label_set) for label_set in family.label_sets]
            for code, value in zip(family.codes.tolist(), family.values.tolist(), strict=True):
                metric.add_sample(family.name, labels[code], value)
            yield metric


def make_registry(
    fleet: Fleet, *, hostname_label: str = "Hostname", clock: Callable[[], float] = time.time
) -> CollectorRegistry:
    """A registry holding only the fleet collector (no process or platform metrics of this Python)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FleetCollector(fleet, hostname_label=hostname_label, clock=clock))
    return registry


def _check_loopback(host: str) -> None:
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        raise ValueError(f"the simulator serves on a loopback address only (127.0.0.1, ::1), not {host!r}")


def serve(
    fleet: Fleet, host: str = "127.0.0.1", port: int = 0, *, hostname_label: str = "Hostname"
) -> tuple[WSGIServer, int]:
    """Serve ``/metrics`` on ``host:port`` (port 0 = any free port) in a daemon thread.

    Returns the server and the bound port; stop it with ``server.shutdown(); server.server_close()``.
    Only loopback addresses are accepted.
    """
    _check_loopback(host)
    server, _thread = start_http_server(
        port, addr=host, registry=make_registry(fleet, hostname_label=hostname_label)
    )
    return server, int(server.server_address[1])
