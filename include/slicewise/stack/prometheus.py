"""A real Prometheus server for the embedded default and the tests: loopback only, own config and data dir."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import yaml

from slicewise.stack import processes

#: Backfilled history is older than Prometheus' default 15 d retention counts back from the newest sample;
#: keep it comfortably longer so a week of history is never dropped.
RETENTION = "400d"

#: The target labels of the simulated fleet's scrape. Backfilled history carries the same ones, so history and
#: live scrapes are one series per GPU rather than two (the exporter's port changes between starts).
FLEET_TARGET_LABELS = {"job": "slicewise-simulated-fleet", "instance": "simulated-fleet"}


def write_config(path: Path, scrape_targets: Sequence[str], scrape_interval_s: int = 15) -> None:
    config = {
        "global": {
            "scrape_interval": f"{scrape_interval_s}s",
            "evaluation_interval": f"{scrape_interval_s}s",
        },
        "scrape_configs": [
            {
                "job_name": FLEET_TARGET_LABELS["job"],
                # The simulator plays both dcgm-exporter and kube-state-metrics; keep its pod/namespace labels
                # as a kube-state-metrics scrape does.
                "honor_labels": True,
                "static_configs": [{"targets": list(scrape_targets)}],
                "relabel_configs": [
                    {"target_label": "instance", "replacement": FLEET_TARGET_LABELS["instance"]}
                ],
            }
        ]
        if scrape_targets
        else [],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def binary() -> str:
    found = shutil.which("prometheus")
    if not found:
        raise FileNotFoundError("prometheus not found: run `make system-deps` (Debian package `prometheus`)")
    return found


def start(
    home: Path,
    *,
    port: int | None = None,
    scrape_targets: Sequence[str] = (),
    name: str = "prometheus",
    scrape_interval_s: int = 15,
) -> processes.Service:
    """Start Prometheus with data in ``home/data`` (which may already hold backfilled blocks)."""
    port = port or processes.free_port()
    config = home / "prometheus.yml"
    write_config(config, scrape_targets, scrape_interval_s)
    url = f"http://{processes.LOOPBACK}:{port}"
    argv = [
        binary(),
        f"--config.file={config}",
        f"--storage.tsdb.path={home / 'data'}",
        f"--web.listen-address={processes.LOOPBACK}:{port}",
        f"--storage.tsdb.retention.time={RETENTION}",
        "--web.enable-lifecycle",
        "--log.level=warn",
    ]
    service = processes.start(name, argv, port=port, url=url, run_dir=home / "run")
    processes.wait_http(f"{url}/-/ready", service, timeout_s=60)
    return service
