"""History for the embedded Prometheus: the exporter's series, written as OpenMetrics and turned into blocks.

``write_openmetrics`` renders the same families as the live exporter (same names, labels and values) at every
step of ``[start, end)``; ``create_blocks`` runs ``promtool tsdb create-blocks-from openmetrics`` on them.

promtool reads its whole input file once per block range it cuts, so files are split on block boundaries:
with ``--max-block-duration=18h`` (``promtool`` rounds any request down to one of 2h, 6h, 18h, 54h, ...) each
file covers one 18 h block, aligned like promtool aligns blocks (multiples of 18 h since the epoch), and is read
once. Text building is vectorised: each distinct label set and value is formatted once and the lines are
assembled with one ``bytes.join`` per family.

The backfilled range should end where live scraping begins, and Prometheus' ``--storage.tsdb.retention.time``
must reach back past its start (retention counts back from the newest sample).
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import tempfile
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from slicewise.simulator.exposition import EXPORTED_LABELS, FamilySamples, families_at
from slicewise.simulator.faults import Faults
from slicewise.simulator.fleet import Fleet

BLOCK_S = 18 * 3600
MAX_BLOCK_DURATION = "18h"


class PromtoolError(RuntimeError):
    """promtool is missing or failed; the message carries the end of its output."""


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _label_text(name: str, labels: Iterable[tuple[str, str]]) -> str:
    inner = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels)
    return f"{name}{{{inner}}} " if inner else f"{name} "


def format_values(values: np.ndarray) -> np.ndarray:
    """Exact text of each float (bytes objects): shortest round-trip repr, integers without ".0", NaN/+Inf.

    Each distinct value is formatted once; values repeat a lot (ratios have 4 decimals, memory is whole MiB).
    """
    values = np.asarray(values, dtype=np.float64)
    uniques, inverse = np.unique(values, return_inverse=True)  # NaNs collapse into one entry
    texts = []
    for v in uniques.tolist():
        if math.isnan(v):
            texts.append(b"NaN")
        elif math.isinf(v):
            texts.append(b"+Inf" if v > 0 else b"-Inf")
        elif v.is_integer() and abs(v) < 1e15:
            texts.append(str(int(v)).encode())
        else:
            texts.append(repr(v).encode())
    table = np.empty(len(texts), dtype=object)
    table[:] = texts
    return np.asarray(table[inverse.reshape(-1)])


def render_family(family: FamilySamples, target_labels: Mapping[str, str] | None = None) -> bytes:
    """One family as OpenMetrics text: HELP, TYPE, then its samples grouped by label set, time ascending.

    ``target_labels`` (e.g. ``job``, ``instance``) are appended to every sample, as a scrape would attach them.
    """
    help_text = family.help.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    head = f"# HELP {family.name} {help_text}\n# TYPE {family.name} gauge\n".encode()
    if not len(family):
        return head
    extra = tuple((target_labels or {}).items())
    order = np.lexsort((family.timestamps, family.codes))
    prefixes = np.empty(len(family.label_sets), dtype=object)
    prefixes[:] = [_label_text(family.name, (*labels, *extra)).encode() for labels in family.label_sets]
    stamps, stamp_index = np.unique(family.timestamps[order], return_inverse=True)
    stamp_texts = np.empty(len(stamps), dtype=object)
    stamp_texts[:] = [f" {int(t)}\n".encode() for t in stamps.tolist()]
    # Three columns per line (prefix, value, " ts\n") joined in one pass: no per-sample Python code.
    grid = np.empty((len(order), 3), dtype=object)
    grid[:, 0] = prefixes[family.codes[order]]
    grid[:, 1] = format_values(family.values[order])
    grid[:, 2] = stamp_texts[stamp_index.reshape(-1)]
    return head + b"".join(grid.ravel().tolist())


def _check_target_labels(target_labels: Mapping[str, str] | None) -> None:
    clash = sorted(EXPORTED_LABELS & set(target_labels or {}))
    if clash:
        raise ValueError(f"target_labels may not redefine exported labels: {', '.join(clash)}")


def iter_openmetrics(
    fleet: Fleet,
    start_s: int,
    end_s: int,
    step_s: int,
    out_dir: Path,
    faults: Faults | None = None,
    *,
    hostname_label: str = "Hostname",
    target_labels: Mapping[str, str] | None = None,
    file_span_s: int = BLOCK_S,
) -> Iterator[Path]:
    """Like :func:`write_openmetrics`, yielding each file as soon as it is complete."""
    if step_s <= 0 or end_s <= start_s:
        raise ValueError(f"need step_s > 0 and end_s > start_s, got step {step_s}, [{start_s}, {end_s})")
    _check_target_labels(target_labels)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stamps = np.arange(int(start_s), int(end_s), int(step_s), dtype=np.int64)
    windows = stamps // file_span_s
    for window in np.unique(windows).tolist():
        chunk = stamps[windows == window]
        families = families_at(fleet, chunk, faults, hostname_label)
        body = b"".join(render_family(family, target_labels) for family in families)
        begin = datetime.fromtimestamp(int(chunk[0]), tz=UTC)
        path = out_dir / f"slicewise-{begin:%Y%m%dT%H%M%SZ}.om"
        tmp = path.with_suffix(".om.tmp")
        tmp.write_bytes(body + b"# EOF\n")
        tmp.replace(path)  # a crash never leaves a half-written file under the final name
        yield path


def write_openmetrics(
    fleet: Fleet,
    start_s: int,
    end_s: int,
    step_s: int,
    out_dir: Path,
    faults: Faults | None = None,
    *,
    hostname_label: str = "Hostname",
    target_labels: Mapping[str, str] | None = None,
    file_span_s: int = BLOCK_S,
) -> list[Path]:
    """Write the fleet's series at ``start_s, start_s + step_s, ... < end_s`` as OpenMetrics files.

    One file per ``file_span_s`` window (aligned to multiples of it since the epoch), each complete with
    ``# HELP``/``# TYPE`` for every family and a final ``# EOF``. Returns the files in time order.

    ``target_labels`` should be the ``job`` and ``instance`` labels Prometheus will attach when it scrapes the
    live exporter: without them the history and the live data are two different series.
    """
    return list(
        iter_openmetrics(
            fleet,
            start_s,
            end_s,
            step_s,
            out_dir,
            faults,
            hostname_label=hostname_label,
            target_labels=target_labels,
            file_span_s=file_span_s,
        )
    )


def promtool_binary(promtool: str | None = None) -> str:
    found = promtool or shutil.which("promtool")
    if not found:
        raise PromtoolError("promtool not found: run `make system-deps` (Debian package `prometheus`)")
    return found


def _convert(exe: str, path: Path, data_dir: Path, max_block_duration: str) -> None:
    argv = [exe, "tsdb", "create-blocks-from", "openmetrics", f"--max-block-duration={max_block_duration}"]
    done = subprocess.run(
        [*argv, "--quiet", str(path), str(data_dir)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip()[-2000:]
        raise PromtoolError(f"promtool failed on {path.name} (exit {done.returncode}): {tail}")


def create_blocks(
    openmetrics_files: Iterable[Path],
    prometheus_data_dir: Path,
    *,
    promtool: str | None = None,
    max_block_duration: str = MAX_BLOCK_DURATION,
    jobs: int | None = None,
    delete_converted: bool = False,
) -> list[Path]:
    """Turn OpenMetrics files into TSDB blocks under ``prometheus_data_dir``; returns the new block folders.

    Files are converted in parallel (``jobs``, default the CPU count) as the iterable yields them, so a
    generator of files overlaps writing and converting; each promtool run writes its own blocks under fresh
    ULID names. ``delete_converted`` removes each file once converted. Raises PromtoolError with promtool's
    output when a conversion fails.
    """
    exe = promtool_binary(promtool)
    data_dir = Path(prometheus_data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    before = {p.name for p in data_dir.iterdir()}

    def convert(path: Path) -> None:
        _convert(exe, path, data_dir, max_block_duration)
        if delete_converted:
            path.unlink()

    workers = max(1, jobs or os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        in_flight: deque[Future[None]] = deque()
        for path in openmetrics_files:
            if len(in_flight) >= 2 * workers:  # back-pressure: a fast writer never piles up files on disk
                in_flight.popleft().result()
            in_flight.append(pool.submit(convert, path))
        for future in in_flight:
            future.result()  # re-raises a failure
    return sorted(p for p in data_dir.iterdir() if p.name not in before and (p / "meta.json").exists())


@dataclass(frozen=True)
class BackfillReport:
    files: int
    blocks: list[Path]
    seconds: float


def backfill(
    fleet: Fleet,
    start_s: int,
    end_s: int,
    step_s: int,
    prometheus_data_dir: Path,
    *,
    faults: Faults | None = None,
    hostname_label: str = "Hostname",
    target_labels: Mapping[str, str] | None = None,
    promtool: str | None = None,
) -> BackfillReport:
    """Backfill ``[start_s, end_s)`` into ``prometheus_data_dir``: write and convert file by file, overlapped.

    Pass the live scrape's ``job`` and ``instance`` as ``target_labels`` so history and live data join.

    The OpenMetrics text goes to a temporary folder next to the data folder and each file is deleted once
    converted, so at most a few files (~100 MB each for the default fleet at 60 s) exist at a time.
    """
    exe = promtool_binary(promtool)  # fail before spending time on text
    data_dir = Path(prometheus_data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=".slicewise-openmetrics-", dir=data_dir.parent) as tmp:
        files: list[Path] = []

        def written() -> Iterator[Path]:
            for path in iter_openmetrics(
                fleet,
                start_s,
                end_s,
                step_s,
                Path(tmp),
                faults,
                hostname_label=hostname_label,
                target_labels=target_labels,
            ):
                files.append(path)
                yield path

        blocks = create_blocks(written(), data_dir, promtool=exe, delete_converted=True)
    return BackfillReport(len(files), blocks, time.monotonic() - began)
