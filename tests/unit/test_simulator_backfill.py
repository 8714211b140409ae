"""The history backfill: OpenMetrics files that parse, round-trip the frames, become TSDB blocks, and carry
the injected faults."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from slicewise import schema
from slicewise.simulator import Faults, create_blocks, demand, gpu_samples, write_openmetrics
from slicewise.simulator.backfill import BLOCK_S, format_values
from slicewise.simulator.exposition import families_at
from slicewise.simulator.fleet import Fleet

#: 2024-01-08 13:00 UTC, a Monday at peak hours (pending pods exist)
START = 1_704_672_000 + 13 * 3600
STEP = 60

Samples = dict[str, list[tuple[dict[str, str], float, float]]]


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    return Fleet.default()


def _parse(paths: list[Path]) -> Samples:
    """name -> [(labels, value, timestamp seconds)] over all files (parsed by the strict OpenMetrics parser)."""
    out: Samples = defaultdict(list)
    for path in paths:
        for family in text_string_to_metric_families(path.read_text()):
            for sample in family.samples:
                stamp = float(sample.timestamp.sec + sample.timestamp.nsec / 1e9)
                out[sample.name].append((sample.labels, sample.value, stamp))
    return out


@pytest.fixture(scope="module")
def short_window(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], Samples]:
    paths = write_openmetrics(fleet, START, START + 20 * STEP, STEP, tmp_path_factory.mktemp("om"))
    return paths, _parse(paths)


def test_openmetrics_files_are_complete_and_parse(short_window: tuple[list[Path], Samples]) -> None:
    paths, samples = short_window
    assert len(paths) == 1
    text = paths[0].read_text()
    assert text.endswith("# EOF\n")
    for column, (metric, _) in schema.GPU_FIELDS.items():
        assert f"# TYPE {metric} gauge\n" in text and f"# HELP {metric} " in text, column
        assert samples[metric], metric
    assert samples[schema.KSM_REQUESTS] and samples[schema.KSM_UNSCHEDULABLE]


def test_openmetrics_values_round_trip_the_gpu_frame(
    fleet: Fleet, short_window: tuple[list[Path], Samples]
) -> None:
    # given the frame at the same timestamps
    _, samples = short_window
    stamps = np.arange(START, START + 20 * STEP, STEP)
    frame = gpu_samples(fleet, stamps)
    frame["ts"] = frame[schema.TIMESTAMP].astype("int64") // 10**9

    for column, (metric, level) in schema.GPU_FIELDS.items():
        # when the file's samples are keyed like the frame
        got = {}
        for labels, value, stamp in samples[metric]:
            key = (labels["Hostname"], int(labels["gpu"]), labels.get("GPU_I_ID", ""), int(stamp))
            assert key not in got, f"duplicate sample {metric} {key}"
            got[key] = value
        # then every frame value is in the file exactly (device fields once per physical GPU)
        rows = frame if column != "gpu_util" else frame[frame["mig_profile"] == ""]
        if level == "device":
            rows = rows.drop_duplicates(["hostname", "gpu", "ts"])
        want = {
            (h, g, "" if level == "device" else i, t): v
            for h, g, i, t, v in zip(
                rows["hostname"], rows["gpu"], rows["gpu_instance_id"], rows["ts"], rows[column], strict=True
            )
        }
        assert got == want, metric


def test_openmetrics_demand_equals_the_demand_frame(
    fleet: Fleet, short_window: tuple[list[Path], Samples]
) -> None:
    _, samples = short_window
    frame = demand(fleet, np.arange(START, START + 20 * STEP, STEP))
    want = sorted(
        (int(t.timestamp()), ns, pod, node, res)
        for t, ns, pod, node, res in zip(
            frame[schema.TIMESTAMP],
            frame["namespace"],
            frame["pod"],
            frame["node"],
            frame["resource"],
            strict=True,
        )
    )
    got = sorted(
        (int(stamp), lb["namespace"], lb["pod"], lb["node"], lb["resource"])
        for lb, _, stamp in samples[schema.KSM_REQUESTS]
    )
    assert got == want
    pending_pods = set(frame.loc[frame["unschedulable"], "pod"])
    pending = {
        (int(t.timestamp()), p)
        for t, p in zip(frame[schema.TIMESTAMP], frame["pod"], strict=True)
        if p in pending_pods
    }
    assert {(int(stamp), lb["pod"]) for lb, _, stamp in samples[schema.KSM_UNSCHEDULABLE]} == pending


def test_every_series_is_one_label_set_written_in_time_order(fleet: Fleet) -> None:
    # given a week of families (pods come and go, MIG device series outlive their instances' pods)
    stamps = np.arange(START, START + 7 * 86_400, 1800)
    for family in families_at(fleet, stamps):
        # then no label set is listed twice (promtool would see one series go back in time)
        assert len(set(family.label_sets)) == len(family.label_sets), family.name
        # and a label set never has two samples at one instant
        pairs = family.codes * (stamps.max() + 1) + family.timestamps
        assert len(np.unique(pairs)) == len(pairs), family.name


def test_files_are_cut_on_promtool_block_boundaries(fleet: Fleet, tmp_path: Path) -> None:
    # given a window straddling an 18 h block boundary
    boundary = (START // BLOCK_S + 1) * BLOCK_S
    paths = write_openmetrics(fleet, boundary - 5 * STEP, boundary + 5 * STEP, STEP, tmp_path)

    # then there is one file per block, and each file's samples stay inside its block
    assert len(paths) == 2
    for path in paths:
        stamps = [stamp for rows in _parse([path]).values() for _, _, stamp in rows]
        assert len({int(s) // BLOCK_S for s in stamps}) == 1


def test_history_carries_the_live_scrape_target_labels(fleet: Fleet, tmp_path: Path) -> None:
    # given the job and instance labels Prometheus will attach to live scrapes
    targets = {"job": "slicewise-simulated-fleet", "instance": "127.0.0.1:9400"}

    # when history is written with them
    samples = _parse(write_openmetrics(fleet, START, START + 2 * STEP, STEP, tmp_path, target_labels=targets))

    # then every sample carries them (so history and live data are one series), and they cannot shadow labels
    assert all(labels.items() >= targets.items() for rows in samples.values() for labels, _, _ in rows)
    with pytest.raises(ValueError, match="Hostname"):
        write_openmetrics(fleet, START, START + STEP, STEP, tmp_path, target_labels={"Hostname": "x"})


def test_bad_windows_are_refused(fleet: Fleet, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="step"):
        write_openmetrics(fleet, START, START + 600, 0, tmp_path)
    with pytest.raises(ValueError, match="end_s > start_s"):
        write_openmetrics(fleet, START, START, 60, tmp_path)


def test_value_text_is_exact() -> None:
    values = np.array([0.1234, 1e-7, 1 / 3, 2875.0, 1.5e12, 0.0, math.nan, math.inf, 140.0])
    texts = [t.decode() for t in format_values(values)]
    assert texts[3] == "2875" and texts[5] == "0" and texts[6] == "NaN" and texts[7] == "+Inf"
    for text, value in zip(texts, values, strict=True):
        assert float(text) == value or (math.isnan(value) and text == "NaN")


# -- promtool ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if not found:
        pytest.skip("promtool not found on PATH (Debian package `prometheus`; `make system-deps`)")
    return found


def test_promtool_turns_the_files_into_blocks_holding_every_sample(
    fleet: Fleet, tmp_path: Path, promtool: str
) -> None:
    # given 10 minutes of history
    paths = write_openmetrics(fleet, START, START + 10 * STEP, STEP, tmp_path / "om")
    written = sum(len(rows) for rows in _parse(paths).values())

    # when converted
    blocks = create_blocks(paths, tmp_path / "data", promtool=promtool)

    # then one block covers the window and holds exactly the written samples
    assert len(blocks) == 1
    meta = json.loads((blocks[0] / "meta.json").read_text())
    assert meta["minTime"] == START * 1000
    assert meta["maxTime"] == (START + 9 * STEP) * 1000 + 1
    assert meta["stats"]["numSamples"] == written
    (tmp_path / "data" / "wal").mkdir()  # promtool 2.42's dump opens the folder as a database: it needs a WAL
    dump = subprocess.run(
        [promtool, "tsdb", "dump", "--match", '{__name__="DCGM_FI_DEV_POWER_USAGE"}', str(tmp_path / "data")],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    lines = [line for line in dump.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == fleet.n_gpus * 10
    frame = gpu_samples(fleet, [START])
    first = frame.drop_duplicates(["hostname", "gpu"]).iloc[0]
    needle = f'Hostname="{first["hostname"]}"'
    values = [
        ln
        for ln in lines
        if needle in ln and f'gpu="{first["gpu"]}"' in ln and ln.endswith(f" {START * 1000}")
    ]
    assert len(values) == 1 and float(values[0].split()[-2]) == first["power_w"]


def test_a_failing_promtool_reports_its_output(tmp_path: Path, promtool: str) -> None:
    bad = tmp_path / "bad.om"
    bad.write_text("this is not openmetrics\n")
    with pytest.raises(RuntimeError, match=r"bad\.om"):
        create_blocks([bad], tmp_path / "data", promtool=promtool)


# -- faults -----------------------------------------------------------------------------------------------
FAULT_FROM, FAULT_TO = START + 5 * STEP, START + 10 * STEP


def _with_faults(fleet: Fleet, tmp_path: Path, **kinds: bool) -> tuple[Samples, str]:
    node = next(n.name for n in fleet.nodes if n.sharing == "none")
    faults = Faults(FAULT_FROM, FAULT_TO, nodes=(node,), **kinds)
    return _parse(write_openmetrics(fleet, START, START + 15 * STEP, STEP, tmp_path, faults=faults)), node


def _split(samples: Samples, metric: str, node: str) -> tuple[list[float], list[float]]:
    inside: list[float] = []
    outside: list[float] = []
    for labels, value, stamp in samples[metric]:
        if labels.get("Hostname") == node:
            (inside if FAULT_FROM <= stamp < FAULT_TO else outside).append(value)
    return inside, outside


def test_fault_nan_values(fleet: Fleet, tmp_path: Path) -> None:
    samples, node = _with_faults(fleet, tmp_path, nan=True)
    inside, outside = _split(samples, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", node)
    assert inside and all(math.isnan(v) for v in inside)
    assert outside and not any(math.isnan(v) for v in outside)
    util_in, _ = _split(samples, "DCGM_FI_DEV_GPU_UTIL", node)
    assert all(math.isnan(v) for v in util_in)
    others = [v for lb, v, _ in samples["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] if lb["Hostname"] != node]
    assert not any(math.isnan(v) for v in others)


def test_fault_out_of_range_values(fleet: Fleet, tmp_path: Path) -> None:
    samples, node = _with_faults(fleet, tmp_path, out_of_range=True)
    engine_in, engine_out = _split(samples, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", node)
    util_in, _ = _split(samples, "DCGM_FI_DEV_GPU_UTIL", node)
    assert set(engine_in) == {1.7} and max(engine_out) <= 1.0
    assert set(util_in) == {140.0}


def test_fault_gaps(fleet: Fleet, tmp_path: Path) -> None:
    samples, node = _with_faults(fleet, tmp_path, gaps=True)
    for metric, _ in schema.GPU_FIELDS.values():
        inside, outside = _split(samples, metric, node)
        assert not inside and outside, metric


def test_fault_duplicate_series_with_another_pod(fleet: Fleet, tmp_path: Path) -> None:
    samples, node = _with_faults(fleet, tmp_path, duplicate_pod=True)
    per_key: dict[tuple[str, float], set[str]] = defaultdict(set)
    for labels, _, stamp in samples["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]:
        if labels["Hostname"] == node:
            per_key[(labels["gpu"], stamp)].add(labels.get("pod", ""))
    doubled = {key for key, pods in per_key.items() if len(pods) == 2}
    assert doubled and all(FAULT_FROM <= stamp < FAULT_TO for _, stamp in doubled)
    assert all(any(p.endswith("-dup") for p in per_key[key]) for key in doubled)
    # one physical GPU still has one power reading per instant
    power = [(lb["gpu"], t) for lb, _, t in samples["DCGM_FI_DEV_POWER_USAGE"] if lb["Hostname"] == node]
    assert len(power) == len(set(power))


def test_fault_dropped_labels(fleet: Fleet, tmp_path: Path) -> None:
    samples, node = _with_faults(fleet, tmp_path, drop_labels=True)
    unlabelled = [t for lb, _, t in samples["DCGM_FI_DEV_FB_USED"] if "Hostname" not in lb]
    assert unlabelled and all(FAULT_FROM <= t < FAULT_TO for t in unlabelled)
    assert all("modelName" not in lb for lb, _, _ in samples["DCGM_FI_DEV_FB_USED"] if "Hostname" not in lb)
    inside, _ = _split(samples, "DCGM_FI_DEV_FB_USED", node)
    assert not inside
