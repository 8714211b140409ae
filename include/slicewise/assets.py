"""The Assets that couple Slicewise's DAGs, declared once (see ARCHITECTURE.md, "The DAGs")."""

from __future__ import annotations

from airflow.sdk import Asset

#: A validated hour of GPU and demand metrics; event extra: interval, rows, series, path.
METRICS = Asset(name="slicewise_metrics", uri="slicewise://metrics", group="slicewise")

#: The forecaster update of an hour; event extra per model: champion version, scores, which predictor to trust.
FORECASTER = Asset(name="slicewise_forecaster", uri="slicewise://forecaster", group="slicewise")

#: A partition plan (and, in apply mode, its rollout); event extra: mode, counts per action, plan path.
ROLLOUT = Asset(name="slicewise_rollout", uri="slicewise://rollout", group="slicewise")

#: A published cost report (daily, or the day so far after a rollout); event extra: date, partial, window,
#: headline totals (GPU-hours and money), the savings estimate, changes and rollbacks, and the report's paths.
COST_REPORT = Asset(name="slicewise_cost_report", uri="slicewise://cost_report", group="slicewise")

#: A published what-if review of the cluster's own validated history; event extra: window, hours read, the
#: consolidation choice, each policy's headline figures, and the report's paths.
WHATIF_REVIEW = Asset(name="slicewise_whatif_review", uri="slicewise://whatif_review", group="slicewise")
