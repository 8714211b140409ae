"""Read DCGM and kube-state-metrics series from Prometheus into the tidy frames of :mod:`slicewise.schema`."""
