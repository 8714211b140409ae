"""The Great Expectations suite of a metrics partition: one valid frame, then one bad case per expectation.

Each test builds its frame here (no fixtures on disk) and asserts the verdict *and* that the failure line
names the right column or rule, so a check firing for the wrong reason fails the test.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from slicewise import schema, store
from slicewise.settings import Settings, load_settings
from slicewise.validation import (
    PartitionReadError,
    ValidationReport,
    checks,
    cli,
    combine,
    validate_demand_frame,
    validate_file,
    validate_gpu_frame,
    write_data_docs,
)

START = datetime(2025, 1, 1, 10, tzinfo=UTC)
END = datetime(2025, 1, 1, 11, tzinfo=UTC)
STEP_S = 60
A100 = "NVIDIA A100-SXM4-40GB"
#: (hostname, gpu, mig_profile, gpu_instance_id, framebuffer MiB of the device per gpu_models.yaml)
SERIES = [
    ("node-a", 0, "", "", 40960.0),
    ("node-a", 1, "", "", 40960.0),
    ("node-b", 0, "3g.20gb", "1", 20096.0),
    ("node-b", 0, "1g.5gb", "2", 4864.0),
]


@pytest.fixture(scope="module")
def settings() -> Settings:
    return load_settings(environ={})  # the shipped thresholds, whatever SLICEWISE_* the shell has


def gpu_frame() -> pd.DataFrame:
    """Four series (two whole A100s, two MIG instances), 60 samples at 60 s over [START, END)."""
    stamps = pd.date_range(START, periods=60, freq=f"{STEP_S}s")
    ramp = np.arange(60, dtype="float64")
    parts = []
    for host, gpu, profile, instance, memory in SERIES:
        parts.append(
            pd.DataFrame(
                {
                    "timestamp": stamps,
                    "hostname": host,
                    "gpu": gpu,
                    "uuid": f"GPU-{host}-{gpu}",
                    "model_name": A100,
                    "mig_profile": profile,
                    "gpu_instance_id": instance,
                    "namespace": "ml",
                    "pod": "trainer-0",
                    "container": "main",
                    # dcgm-exporter does not export GPU_UTIL for MIG instances.
                    "gpu_util": np.nan if profile else ramp,
                    "engine_active": ramp / 60,
                    "dram_active": ramp / 120,
                    "fb_used_mib": memory / 2,
                    "fb_free_mib": memory / 2 - 100,
                    "power_w": 250.0,
                    "pcie_tx_bytes_per_s": 1e9,
                    "pcie_rx_bytes_per_s": 2e9,
                }
            )
        )
    frame = pd.concat(parts, ignore_index=True)
    return frame[list(schema.GPU_COLUMNS)].astype(schema.GPU_DTYPES)


def demand_frame() -> pd.DataFrame:
    frame = pd.DataFrame(
        {
            "timestamp": pd.date_range(START, periods=3, freq="60s"),
            "namespace": "ml",
            "pod": ["trainer-0", "trainer-1", "pending-0"],
            "container": "main",
            "node": ["node-a", "node-b", ""],
            "resource": ["nvidia_com_gpu", "nvidia_com_mig_3g.20gb", "nvidia_com_gpu"],
            "requested": [1.0, 1.0, 2.0],
            "unschedulable": [False, False, True],
            "declared_share": [0.5, float("nan"), float("nan")],
            "gpu_product": ["", "", "NVIDIA-A100-SXM4-80GB"],
            "gpu_sharing": ["", "", "mps"],
            "gpu_replicas": ["", "", "4"],
            "eviction_opt_in": [True, False, False],
        }
    )
    return frame.astype(schema.DEMAND_DTYPES)


def keys(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[list(schema.GPU_KEY)].drop_duplicates()


def validate(
    frame: pd.DataFrame, settings: Settings, previous_keys: pd.DataFrame | None = None
) -> ValidationReport:
    return validate_gpu_frame(
        frame,
        interval_start=START,
        interval_end=END,
        step_s=STEP_S,
        settings=settings,
        previous_keys=previous_keys,
    )


def series_rows(frame: pd.DataFrame, host: str, gpu: int, instance: str = "") -> pd.Series:
    return (frame["hostname"] == host) & (frame["gpu"] == gpu) & (frame["gpu_instance_id"] == instance)


# --- the valid frame ------------------------------------------------------------------------------------------


def test_valid_gpu_frame_passes_with_counts(settings: Settings) -> None:
    # Given a complete hour of four series, MIG rows without gpu_util, and the same GPUs an hour before
    frame = gpu_frame()
    assert frame.loc[frame["mig_profile"] != "", "gpu_util"].isna().all()
    # When it is validated
    report = validate(frame, settings, previous_keys=keys(frame))
    # Then it passes, with every expectation evaluated and the data counted
    assert report.success, report.summary()
    assert report.failures == []
    stats = report.statistics
    assert stats["rows"] == 240 and stats["series"] == 4
    assert stats["evaluated_expectations"] == stats["successful_expectations"] > 40
    assert stats["unsuccessful_expectations"] == stats["skipped_expectations"] == 0
    assert "valid" in report.summary().splitlines()[0]


# --- one bad case per expectation --------------------------------------------------------------------------


def _set(
    column: str, value: Any, where: Callable[[pd.DataFrame], pd.Series]
) -> Callable[[pd.DataFrame], None]:
    def mutate(frame: pd.DataFrame) -> None:
        frame.loc[np.asarray(where(frame), dtype=bool), column] = value

    return mutate


def _first_row(frame: pd.DataFrame) -> pd.Series:
    return frame.index == frame.index[5]


def _whole_gpu_row(frame: pd.DataFrame) -> pd.Series:
    return series_rows(frame, "node-a", 1) & (
        frame["timestamp"] == pd.Timestamp(START) + pd.Timedelta(minutes=7)
    )


def _mig_small(frame: pd.DataFrame) -> pd.Series:
    return series_rows(frame, "node-b", 0, "2")


BAD_ROWS = [
    # (case, mutation, words the single failure line must contain)
    (
        "nan engine_active",
        _set("engine_active", np.nan, _first_row),
        ["engine_active missing", "node-a gpu 0"],
    ),
    ("nan dram_active", _set("dram_active", np.nan, _first_row), ["dram_active missing"]),
    (
        "engine_active > 1",
        _set("engine_active", 1.7, _first_row),
        ["engine_active outside 0-1", "1.7 on node-a"],
    ),
    ("gpu_util 140", _set("gpu_util", 140.0, _first_row), ["gpu_util outside 0-100", "140"]),
    (
        "whole-GPU nan util",
        _set("gpu_util", np.nan, _whole_gpu_row),
        ["gpu_util missing on whole-GPU", "10:07"],
    ),
    (
        "fb over MIG profile",
        _set("fb_used_mib", 6000.0, _mig_small),
        ["fb_used_mib above", "6,000 of 4,864 MiB"],
    ),
    ("negative free fb", _set("fb_free_mib", -1.0, _first_row), ["fb_free_mib below 0"]),
    ("infinite power", _set("power_w", np.inf, _first_row), ["power_w below 0 or infinite", "inf"]),
    ("negative pcie", _set("pcie_rx_bytes_per_s", -5.0, _first_row), ["pcie_rx_bytes_per_s below 0"]),
    ("gpu label lost", _set("gpu", -1, _first_row), ["gpu below 0"]),
    ("empty uuid", _set("uuid", "", _first_row), ["uuid empty"]),
    ("null hostname", _set("hostname", pd.NA, _first_row), ["hostname missing"]),
    ("null pod label", _set("pod", pd.NA, _first_row), ["pod missing", 'must be ""']),
    (
        "timestamp outside interval",
        _set("timestamp", pd.Timestamp(END), lambda f: f.index == f.index[59]),
        ["GPU timestamp outside [2025-01-01 10:00, 11:00) UTC", "node-a gpu 0 at 11:00"],
    ),
]


@pytest.mark.parametrize(("case", "mutate", "words"), BAD_ROWS, ids=[case for case, _, _ in BAD_ROWS])
def test_bad_row_fails_with_one_readable_line(
    settings: Settings, case: str, mutate: Callable[[pd.DataFrame], None], words: list[str]
) -> None:
    # Given the valid frame with one kind of damage
    frame = gpu_frame()
    mutate(frame)
    # When it is validated
    report = validate(frame, settings)
    # Then exactly that expectation fails, and its line says what and where
    assert not report.success
    assert len(report.failures) == 1, report.failures
    line = report.failures[0]
    for word in words:
        assert word in line, line
    assert "Traceback" not in line and "\n" not in line
    assert report.statistics["unsuccessful_expectations"] == 1


def test_mig_rows_without_gpu_util_are_valid_but_a_whole_gpu_without_it_is_not(settings: Settings) -> None:
    # Given a frame where every row lacks gpu_util
    frame = gpu_frame().assign(gpu_util=np.nan)
    # When it is validated
    report = validate(frame, settings)
    # Then only the whole-GPU rows count against it (2 GPUs x 60 samples), not the 120 MIG rows
    assert not report.success
    assert report.failures[0].startswith("gpu_util missing on whole-GPU rows: 120 of 120 rows")


def test_duplicate_samples_fail_the_compound_key(settings: Settings) -> None:
    # Given a sample exported twice (two scrape jobs)
    frame = gpu_frame()
    frame = pd.concat([frame, frame.iloc[[70]]], ignore_index=True)
    # When it is validated
    report = validate(frame, settings)
    # Then the duplicate line names the GPU; nothing else fails (distinct timestamps drive completeness)
    assert report.failures == [line for line in report.failures if line.startswith("duplicate GPU samples")]
    assert len(report.failures) == 1 and "2 of 241 rows" in report.failures[0]
    assert "node-a gpu 1 at 10:10:00" in report.failures[0]


def test_gaps_below_completeness_name_the_worst_series(settings: Settings) -> None:
    # Given one series missing every other sample and one missing a tenth of them
    frame = gpu_frame()
    odd_minutes = frame["timestamp"].dt.minute % 2 == 1
    tenth = frame["timestamp"].dt.minute % 10 == 3
    frame = frame[
        ~((series_rows(frame, "node-a", 1) & odd_minutes) | (series_rows(frame, "node-b", 0, "1") & tenth))
    ]
    # When it is validated
    report = validate(frame, settings)
    # Then the completeness line counts series, and names the worst (50%) before the next (90%)
    assert len(report.failures) == 1, report.failures
    line = report.failures[0]
    assert line.startswith(f"series below {settings.min_completeness:.0%} of expected samples: 2 of 4 series")
    assert "worst 50% on node-a gpu 1, 90% on node-b gpu 0 mig 1" in line


def test_a_series_that_stopped_reporting_is_stale(settings: Settings) -> None:
    # Given a series whose last six minutes are missing, with completeness relaxed to isolate staleness
    frame = gpu_frame()
    frame = frame[~(series_rows(frame, "node-b", 0, "2") & (frame["timestamp"].dt.minute >= 54))]
    relaxed = settings.with_overrides({"min_completeness": 0.8})
    # When it is validated
    report = validate(frame, relaxed)
    # Then the staleness line names it and how long it was silent (newest sample 10:53 -> 420 s)
    assert len(report.failures) == 1, report.failures
    assert "silent for more than 300 s" in report.failures[0]
    assert "420 s on node-b gpu 0 mig 2" in report.failures[0]


def test_vanished_gpus_beyond_the_allowed_share_fail(settings: Settings) -> None:
    # Given the previous hour had two more GPUs (node-c) than this one: 2 of 6 = 33% vanished
    frame = gpu_frame()
    extra = pd.DataFrame({"hostname": ["node-c", "node-c"], "gpu": [0, 1], "gpu_instance_id": ["", ""]})
    previous = pd.concat([keys(frame), extra], ignore_index=True)
    # When it is validated against the default 10%
    report = validate(frame, settings, previous_keys=previous)
    # Then the vanished line names both and the share; completeness does not double-report them
    assert len(report.failures) == 1, report.failures
    line = report.failures[0]
    assert "vanished: 2 of 6 previous series (33%, at most 10% allowed" in line
    assert "node-c gpu 0" in line and "node-c gpu 1" in line


def test_vanished_gpus_within_the_allowed_share_pass(settings: Settings) -> None:
    # Given one of five previous GPUs gone, and 50% allowed
    frame = gpu_frame()
    previous = pd.concat(
        [keys(frame), pd.DataFrame({"hostname": ["x"], "gpu": [0], "gpu_instance_id": [""]})]
    )
    # When it is validated
    report = validate(frame, settings.with_overrides({"max_vanished_share": 0.5}), previous_keys=previous)
    # Then it passes
    assert report.success, report.failures


def test_missing_column_fails_once_and_skips_the_checks_that_read_it(settings: Settings) -> None:
    # Given a frame without engine_active
    frame = gpu_frame().drop(columns=["engine_active"])
    # When it is validated
    report = validate(frame, settings)
    # Then one line names the missing column, and its two content checks are counted as not run
    assert report.failures == [
        "GPU frame columns differ from the contract: missing engine_active - "
        "every reader selects these columns by name"
    ]
    assert report.statistics["skipped_expectations"] == 2
    assert "2 checks not run" in report.summary()


@pytest.mark.parametrize(
    ("column", "make", "observed"),
    [
        ("gpu_util", lambda s: s.astype("string"), "str"),
        ("gpu", lambda s: s.astype("float64"), "float64"),
        ("timestamp", lambda s: s.dt.tz_localize(None), "datetime64"),
    ],
    ids=["float-as-text", "int-as-float", "naive-timestamp"],
)
def test_wrong_dtype_fails_the_schema(
    settings: Settings, column: str, make: Callable[[pd.Series], pd.Series], observed: str
) -> None:
    # Given a frame with one column of the wrong dtype
    frame = gpu_frame()
    frame[column] = make(frame[column])
    # When it is validated
    report = validate(frame, settings)
    # Then the dtype line names the column, what it is and what the contract says; reading checks are skipped
    assert len(report.failures) == 1, report.failures
    assert (
        f"GPU column {column} has the wrong dtype: is {observed}, expected {schema.GPU_DTYPES[column]}"
        in (report.failures[0])
    )
    assert report.statistics["skipped_expectations"] > 0


def test_empty_gpu_frame_fails(settings: Settings) -> None:
    # Given an hour where the query returned no samples (columns and dtypes intact)
    frame = gpu_frame().iloc[:0]
    # When it is validated
    report = validate(frame, settings)
    # Then it fails as empty, and only as empty
    assert report.failures == [
        "GPU frame is empty: 0 rows - no samples at all: the scrape or the query failed, the fleet was not idle"
    ]


def test_naive_interval_bounds_are_a_caller_error(settings: Settings) -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        validate_gpu_frame(
            gpu_frame(),
            interval_start=START.replace(tzinfo=None),
            interval_end=END,
            step_s=STEP_S,
            settings=settings,
        )


def test_capacity_is_the_profile_or_model_memory_else_used_plus_free() -> None:
    # Given a whole A100, a MIG 3g.20gb instance and a model gpu_models.yaml does not know
    frame = pd.DataFrame(
        {
            "model_name": [A100, A100, "NVIDIA Future GPU"],
            "mig_profile": ["", "3g.20gb", ""],
            "fb_used_mib": [1.0, 1.0, 300.0],
            "fb_free_mib": [1.0, 1.0, 700.0],
        }
    )
    # When capacities are derived
    capacity = checks.capacity_mib(frame, checks.device_memory())
    # Then they come from the catalogue, or from used + free for the unknown model
    assert capacity.tolist() == [40960.0, 20096.0, 1000.0]


# --- demand ---------------------------------------------------------------------------------------------------


def test_valid_demand_frame_passes_and_an_empty_one_too() -> None:
    for frame in (demand_frame(), demand_frame().iloc[:0]):
        report = validate_demand_frame(frame, interval_start=START, interval_end=END)
        assert report.success, report.failures


DEMAND_BAD = [
    ("negative requested", lambda f: f.assign(requested=[1.0, -1.0, 2.0]), "demand requested below 0"),
    ("null requested", lambda f: f.assign(requested=[1.0, np.nan, 2.0]), "demand requested missing"),
    ("duplicate", lambda f: pd.concat([f, f.iloc[[0]]], ignore_index=True), "duplicate demand rows"),
    (
        "outside interval",
        lambda f: f.assign(timestamp=f["timestamp"] - pd.Timedelta(hours=1)),
        "demand timestamp",
    ),
    ("unschedulable not bool", lambda f: f.assign(unschedulable=[0.0, 0.0, 1.0]), "column unschedulable"),
    ("empty pod", lambda f: f.assign(pod=pd.array(["", "a", "b"], dtype="string")), "demand pod empty"),
    (
        "declared share over 1",
        lambda f: f.assign(declared_share=[1.5, np.nan, np.nan]),
        "demand declared_share outside (0, 1]",
    ),
    (
        "infinite requested",
        lambda f: f.assign(requested=[1.0, 1.0, np.inf]),
        "demand requested above 16 nvidia",
    ),
    (
        "absurd GPU count",
        lambda f: f.assign(requested=[1e9, 1.0, 2.0]),
        "demand requested above 16 nvidia.com/gpu",
    ),
    (
        "absurd MIG count",
        lambda f: f.assign(requested=[1.0, 5000.0, 2.0]),
        "demand requested above 768 MIG instances or GPU replicas",
    ),
    ("declared share 0", lambda f: f.assign(declared_share=[0.0, np.nan, np.nan]), "declared_share outside"),
    (
        "null product",
        lambda f: f.assign(gpu_product=pd.array([None, "", ""], dtype="string")),
        "demand gpu_product missing",
    ),
    (
        "unknown sharing strategy",
        lambda f: f.assign(gpu_sharing=pd.array(["", "", "MPS please"], dtype="string")),
        "demand gpu_sharing not a GPU feature discovery sharing strategy",
    ),
    (
        "replicas not a count",
        lambda f: f.assign(gpu_replicas=pd.array(["", "0", ""], dtype="string")),
        "demand gpu_replicas not a replica count",
    ),
]


@pytest.mark.parametrize(("case", "mutate", "words"), DEMAND_BAD, ids=[case for case, _, _ in DEMAND_BAD])
def test_bad_demand_fails_with_one_readable_line(
    case: str, mutate: Callable[[pd.DataFrame], pd.DataFrame], words: str
) -> None:
    report = validate_demand_frame(mutate(demand_frame()), interval_start=START, interval_end=END)
    assert not report.success
    assert len(report.failures) == 1, report.failures
    assert words in report.failures[0]


# --- the report -----------------------------------------------------------------------------------------------


def test_combined_report_is_valid_only_if_all_parts_are(settings: Settings) -> None:
    # Given a valid GPU frame and demand with a negative request
    gpu = validate(gpu_frame(), settings)
    demand = validate_demand_frame(
        demand_frame().assign(requested=[1.0, -1.0, 2.0]), interval_start=START, interval_end=END
    )
    # When they are combined
    report = combine(gpu, demand)
    # Then it fails with the demand line, sums the counts and keeps every GX result
    assert gpu.success and not report.success
    assert report.failures == demand.failures
    for key, value in report.statistics.items():
        assert value == gpu.statistics[key] + demand.statistics[key]
    assert len(report.results) == len(gpu.results) + len(demand.results) == 5
    assert report.summary().splitlines()[0].startswith("GPU samples 2025-01-01 10:00-11:00 UTC + demand")
    assert report.summary().splitlines()[1] == f"  - {demand.failures[0]}"


def test_to_json_is_strict_json_with_the_gx_results(settings: Settings) -> None:
    # Given an invalid frame whose GX results hold NaN and infinity (observed values, the open upper bounds)
    frame = gpu_frame()
    frame.loc[3, "engine_active"] = np.nan
    report = validate(frame, settings)
    # When it is serialised
    data = json.loads(json.dumps(report.to_json(), allow_nan=False))
    # Then it carries the verdict, the lines, the counts, and each suite's GX result
    assert data["success"] is False and data["failures"] == report.failures
    assert data["statistics"] == report.statistics
    assert [result["suite_name"] for result in data["results"]] == ["gpu_schema", "gpu_samples", "gpu_series"]
    failed = [r for result in data["results"] for r in result["results"] if not r["success"]]
    assert [r["expectation_config"]["type"] for r in failed] == ["expect_column_values_to_not_be_null"]


def test_data_docs_are_built_as_html(settings: Settings, tmp_path: Path) -> None:
    # Given a failed GPU report and a demand report
    frame = gpu_frame()
    frame.loc[3, "engine_active"] = 2.0
    report = combine(
        validate(frame, settings),
        validate_demand_frame(demand_frame(), interval_start=START, interval_end=END),
    )
    # When Data Docs are written
    folder = write_data_docs(report, tmp_path / "data_docs")
    # Then GX built an index and one page per suite run, and the suite pages carry the "why" notes
    index = (folder / "index.html").read_text()
    pages = sorted(path.parent.parent.parent.name for path in (folder / "validations").rglob("*.html"))
    assert pages == ["demand_rows", "demand_schema", "gpu_samples", "gpu_schema", "gpu_series"]
    assert "gpu_samples" in index
    assert "busy-time ratio" in (folder / "expectations" / "gpu_samples.html").read_text()


# --- files and the CLI ----------------------------------------------------------------------------------------


def _write(tmp_path: Path, name: str, frame: pd.DataFrame, **metadata: str) -> str:
    url = tmp_path.as_uri() + "/" + name
    store.write_frame(frame, store.storage_path(url), metadata)
    return url


def _meta(kind: str) -> dict[str, str]:
    return {
        "kind": kind,
        "interval_start": START.isoformat(),
        "interval_end": END.isoformat(),
        "step_s": "60",
    }


def _cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="slicewise")
    cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["validate", *argv])
    code: int = args.func(args)
    return code


def test_validate_file_reads_kind_and_interval_from_metadata(tmp_path: Path, settings: Settings) -> None:
    url = _write(tmp_path, "demand.parquet", demand_frame(), **_meta("demand"))
    report = validate_file(url, settings)
    assert report.success and report.subject.startswith("demand 2025-01-01 10:00-11:00")


def test_validate_file_infers_kind_and_interval_without_metadata(tmp_path: Path, settings: Settings) -> None:
    url = _write(tmp_path, "gpu.parquet", gpu_frame())
    report = validate_file(url, settings)
    assert report.success, report.failures
    assert report.subject == "GPU samples 2025-01-01 10:00-11:00 UTC"


def test_demand_files_without_metadata_are_judged_not_called_unreadable(
    tmp_path: Path, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    # A row stamped three hours after the others: the file's hour is that of its median sample.
    late = demand_frame()
    late.loc[2, "timestamp"] = late.loc[2, "timestamp"] + pd.Timedelta(hours=3)
    report = validate_file(_write(tmp_path, "late.parquet", late), settings)
    assert not report.success and report.subject.startswith("demand 2025-01-01 10:00-11:00")
    assert len(report.failures) == 1
    assert report.failures[0].startswith("demand timestamp outside [2025-01-01 10:00, 11:00) UTC")
    # A demand file missing a required column is invalid (exit 1), naming the column.
    assert _cli(_write(tmp_path, "no-flag.parquet", demand_frame().drop(columns=["unschedulable"]))) == 1
    assert "missing unschedulable" in capsys.readouterr().out
    # An empty but readable file with no interval is invalid (exit 1), not unreadable (exit 2).
    assert _cli(_write(tmp_path, "empty.parquet", demand_frame().iloc[:0])) == 1
    captured = capsys.readouterr()
    assert "no rows and no interval" in captured.out and "INVALID" in captured.err


def test_validate_file_rejects_what_is_not_a_partition(tmp_path: Path, settings: Settings) -> None:
    (tmp_path / "notes.parquet").write_text("not parquet")
    other = _write(tmp_path, "other.parquet", pd.DataFrame({"a": [1]}))
    cases = {
        tmp_path.as_uri() + "/missing.parquet": "no such file",
        tmp_path.as_uri() + "/notes.parquet": "not a readable Parquet file",
        other: "neither a GPU nor a demand partition (columns: a)",
    }
    for url, message in cases.items():
        with pytest.raises(PartitionReadError, match=message.replace("(", r"\(").replace(")", r"\)")):
            validate_file(url, settings)


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Given a valid, an invalid and an unreadable partition
    good = _write(tmp_path, "good.parquet", gpu_frame(), **_meta("gpu"))
    broken = gpu_frame()
    broken.loc[0, "engine_active"] = 1.7
    broken.loc[1, "gpu_util"] = 140.0
    bad = _write(tmp_path, "bad.parquet", broken, **_meta("gpu"))
    (tmp_path / "junk.parquet").write_bytes(b"PAR1 junk")

    # When / then: valid -> 0 with one OK line
    assert _cli(str(tmp_path / "good.parquet")) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith("OK GPU samples") and "240 rows, 4 series" in out[0]

    # invalid -> 1 with one line per failed expectation (URL input, Data Docs requested)
    assert _cli(bad, "--data-docs", str(tmp_path / "docs")) == 1
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("gpu_util outside 0-100") and lines[1].startswith("engine_active outside 0-1")
    assert "INVALID" in captured.err and (tmp_path / "docs" / "index.html").exists()

    # unreadable -> 2 with one error line and no traceback
    for path in (tmp_path / "junk.parquet", tmp_path / "absent.parquet"):
        assert _cli(str(path)) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.startswith("error: ")
        assert len(captured.err.splitlines()) == 1 and "Traceback" not in captured.err
    assert good  # written through ObjectStoragePath like the ingest DAG does


def test_cli_previous_partition_adds_the_vanished_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a previous hour with two more GPUs than this one
    frame = gpu_frame()
    extra = frame[series_rows(frame, "node-a", 0)].assign(hostname="node-c")
    previous = _write(tmp_path, "previous.parquet", pd.concat([frame, extra], ignore_index=True))
    current = _write(tmp_path, "current.parquet", frame, **_meta("gpu"))
    # When the current one is validated with --previous (1 of 5 vanished = 20% > 10%)
    code = _cli(current, "--previous", previous)
    # Then it fails on the vanished check only
    out = capsys.readouterr().out.splitlines()
    assert code == 1 and len(out) == 1 and "node-c gpu 0" in out[0]
