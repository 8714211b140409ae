"""Great Expectations validation of a metrics partition: verdict, readable failure lines, Data Docs.

Importing this package is cheap (no Great Expectations, no pandas): DAG files may import it at parse time;
GX is imported on the first validation.

    report = validate_gpu_frame(frame, interval_start=..., interval_end=..., step_s=60, settings=settings)
    report.success, report.failures, report.statistics, report.summary(), report.to_json()
    write_data_docs(report, folder=Path("data_docs"))
"""

from __future__ import annotations

import logging

from slicewise.validation.docs import write_data_docs
from slicewise.validation.files import PartitionReadError, validate_file
from slicewise.validation.frames import validate_demand_frame, validate_gpu_frame
from slicewise.validation.report import ValidationReport, combine

# GX logs hundreds of INFO lines about its own internals (API docs registration, config loading) on import
# and on every run, which drown task logs and the CLI's output once Airflow sets the root logger to INFO.
# Quiet them unless someone configured the "great_expectations" logger on purpose.
_gx_logger = logging.getLogger("great_expectations")
if _gx_logger.level == logging.NOTSET:
    _gx_logger.setLevel(logging.WARNING)

__all__ = [
    "PartitionReadError",
    "ValidationReport",
    "combine",
    "validate_demand_frame",
    "validate_file",
    "validate_gpu_frame",
    "write_data_docs",
]
