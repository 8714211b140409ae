"""Which cluster backend a run talks to, chosen by the ``cluster_backend`` setting."""

from __future__ import annotations

from pathlib import Path

from slicewise.cluster.base import ClusterBackend
from slicewise.settings import Settings, slicewise_home

BACKENDS = ("simulated", "kubernetes")


def simulated_state_path(settings: Settings) -> Path:
    """The simulated cluster's state file: ``simulated_cluster_state``, else ``<SLICEWISE_HOME>/cluster/state.json``."""
    if settings.simulated_cluster_state:
        return Path(settings.simulated_cluster_state)
    return slicewise_home() / "cluster" / "state.json"


def open_backend(settings: Settings) -> ClusterBackend:
    """The backend ``settings.cluster_backend`` names; ValueError naming the valid choices for anything else.

    Backends are imported here, not at module level: the Kubernetes client is heavy, and the simulated one
    loads the simulator.
    """
    if settings.cluster_backend == "simulated":
        from slicewise.simulator.cluster import SimulatedCluster

        return SimulatedCluster.open(
            simulated_state_path(settings), reconfigure_s=settings.simulated_reconfigure_s
        )
    if settings.cluster_backend == "kubernetes":
        from slicewise.cluster.kubernetes import KubernetesCluster

        return KubernetesCluster.from_connection(settings.kubernetes_conn_id)
    raise ValueError(f"unknown cluster_backend {settings.cluster_backend!r}; valid: {', '.join(BACKENDS)}")
