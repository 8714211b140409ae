"""Turning the ingest's frames (kube-state-metrics requests, DCGM series) into a pod trace and a node list."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from slicewise.catalog import load_catalog
from slicewise.whatif.history import read_history, trace_from_frames
from slicewise.whatif.trace import TraceError

START = datetime(2026, 11, 1, tzinfo=UTC)


def _demand(rows: list[tuple[int, str, str, str, float]]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            (START + timedelta(minutes=m), "team", pod, container, "", resource, value, False)
            for m, pod, container, resource, value in rows
        ],
        columns=[
            "timestamp",
            "namespace",
            "pod",
            "container",
            "node",
            "resource",
            "requested",
            "unschedulable",
        ],
    )


GPU = pd.DataFrame(
    {
        "hostname": ["n1", "n1", "n1", "n2"],
        "gpu": [0, 0, 1, 0],  # n1: two GPUs (GPU 0 in two MIG instances); n2: one
        "model_name": ["NVIDIA A100-SXM4-80GB"] * 4,
    }
)


def test_pods_become_requests_with_their_first_and_last_sample() -> None:
    rows = [
        # Two containers of 1 GPU each from minute 0 to 2: one request of 2 whole GPUs for 3 minutes.
        *[(m, "train", c, "nvidia_com_gpu", 1.0) for m in range(3) for c in ("a", "b")],
        # One 3g slice from minute 1 to 1: 3/7 of a GPU for one step.
        (1, "infer", "a", "nvidia_com_mig_3g_40gb", 1.0),
        # A GPU and a slice at once: not one request the model knows, left out and counted.
        (0, "odd", "a", "nvidia_com_gpu", 1.0),
        (0, "odd", "b", "nvidia_com_mig_1g_10gb", 1.0),
    ]
    trace, nodes = trace_from_frames(_demand(rows), GPU, START, 60, load_catalog(), "A100-80GB")
    pods = {p.name: p for p in trace.pods}
    assert set(pods) == {"team/train", "team/infer"}
    assert (pods["team/train"].gpus, pods["team/train"].share) == (2, 1.0)
    assert (pods["team/train"].arrival_s, pods["team/train"].duration_s) == (0.0, 180.0)
    assert pods["team/infer"].share == pytest.approx(3 / 7)
    assert (pods["team/infer"].arrival_s, pods["team/infer"].duration_s) == (60.0, 60.0)
    assert trace.notes[0] == "1 pods without exactly one GPU resource left out"
    assert trace.notes[1].startswith("none of 2 pods carried slicewise.io/evictable=true")
    assert not any(p.opted_in for p in trace.pods)
    assert [(n.name, n.gpus) for n in nodes] == [("n1", 2), ("n2", 1)]


def test_a_declared_share_sizes_a_gpu_pod_and_a_product_selector_limits_its_models() -> None:
    rows = [(m, pod, "a", "nvidia_com_gpu", 1.0) for m in range(2) for pod in ("embed", "llm", "plain")]
    demand = _demand(rows)
    demand["declared_share"] = [0.25 if pod == "embed" else float("nan") for pod in demand["pod"]]
    demand["gpu_product"] = ["NVIDIA-A100-SXM4-80GB" if pod == "llm" else "" for pod in demand["pod"]]
    trace, _ = trace_from_frames(demand, GPU, START, 60, load_catalog(), "A100-80GB")
    pods = {p.name: (p.share, p.models) for p in trace.pods}
    assert pods == {
        "team/embed": (0.25, ()),
        "team/llm": (1.0, ("NVIDIA A100-SXM4-80GB",)),  # the DCGM name the node list carries
        "team/plain": (1.0, ()),
    }


def test_no_pods_or_no_nodes_is_a_clear_error() -> None:
    empty = _demand([])
    with pytest.raises(TraceError, match="no pod requested a GPU"):
        trace_from_frames(empty, GPU, START, 60, load_catalog(), "A100-80GB")
    with pytest.raises(TraceError, match="no DCGM series"):
        trace_from_frames(
            _demand([(0, "p", "a", "nvidia_com_gpu", 1.0)]),
            GPU.iloc[0:0],
            START,
            60,
            load_catalog(),
            "A100-80GB",
        )


def test_history_is_pulled_a_day_at_a_time_and_nodes_from_the_last_hour() -> None:
    asked: list[tuple[datetime, datetime]] = []

    def demand(start: datetime, end: datetime) -> pd.DataFrame:
        asked.append((start, end))
        return _demand([(0, "p", "a", "nvidia_com_gpu", 1.0)])

    gpu_window: list[tuple[datetime, datetime]] = []

    def gpu(start: datetime, end: datetime) -> pd.DataFrame:
        gpu_window.append((start, end))
        return GPU

    end = START + timedelta(days=2, hours=5)
    frame, _ = read_history(demand, gpu, START, end)
    assert [a for a, _ in asked] == [START, START + timedelta(days=1), START + timedelta(days=2)]
    assert asked[-1][1] == end and len(frame) == 3
    assert gpu_window == [(end - timedelta(hours=1), end)]
    with pytest.raises(TraceError, match="not after"):
        read_history(demand, gpu, end, START)


def test_a_pod_whose_annotation_opts_in_to_evictions_is_marked_and_hours_stored_before_the_column_are_not() -> (
    None
):
    # given an hour stored before the demand frame had eviction_opt_in (train) and a newer one where infer opted
    # in, and embed did not
    older = _demand([(m, "train", "a", "nvidia_com_gpu", 1.0) for m in range(2)])
    newer = _demand(
        [(m, pod, "a", "nvidia_com_gpu", 1.0) for m in range(60, 62) for pod in ("infer", "embed")]
    ).assign(declared_share=float("nan"), gpu_product="")
    newer["eviction_opt_in"] = newer["pod"] == "infer"
    demand = pd.concat([older, newer], ignore_index=True)

    # when the trace is read
    trace, _ = trace_from_frames(demand, GPU, START, 60, load_catalog(), "A100-80GB")

    # then only infer opted in, and the notes count it
    assert {p.name: p.opted_in for p in trace.pods} == {
        "team/train": False,
        "team/infer": True,
        "team/embed": False,
    }
    assert "1 of 3 pods carried slicewise.io/evictable=true" in trace.notes
