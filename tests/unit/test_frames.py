"""Shaping Prometheus range-query results into the tidy GPU and demand frames."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest

from slicewise import schema
from slicewise.metrics import frames

T0 = 1_764_410_400  # 2025-11-29T10:00:00Z


def series(labels: dict[str, str], values: list[float], start: int = T0, step: int = 60) -> dict[str, Any]:
    return {
        "metric": labels,
        "values": [[start + i * step, repr(v) if not math.isnan(v) else "NaN"] for i, v in enumerate(values)],
    }


def gpu(host: str, index: int, **extra: str) -> dict[str, str]:
    return {
        "gpu": str(index),
        "UUID": f"GPU-{host}-{index}",
        "device": f"nvidia{index}",
        "modelName": "NVIDIA H100 80GB HBM3",
        "Hostname": host,
        **extra,
    }


MIG = {"GPU_I_PROFILE": "3g.40gb", "GPU_I_ID": "2"}
POD = {"pod": "infer-1", "namespace": "team-a", "container": "server"}


def full_results() -> dict[str, list[dict[str, Any]]]:
    whole = gpu("node-a", 0, **POD)
    instance = gpu("node-a", 1, **MIG, **POD)
    results: dict[str, list[dict[str, Any]]] = {
        "gpu_util": [series(whole, [50.0, 60.0])],
        "engine_active": [series(whole, [0.5, 0.6]), series(instance, [0.2, 0.3])],
        "dram_active": [series(whole, [0.1, 0.1]), series(instance, [0.05, 0.05])],
        "fb_used_mib": [series(whole, [1000.0, 1100.0]), series(instance, [500.0, 500.0])],
        "fb_free_mib": [series(whole, [80000.0, 79900.0]), series(instance, [39000.0, 39000.0])],
        # device-level: no MIG labels, and on a MIG GPU no pod either
        "power_w": [
            series(gpu("node-a", 0, **POD), [300.0, 310.0]),
            series(gpu("node-a", 1), [200.0, 210.0]),
        ],
        "pcie_tx_bytes_per_s": [
            series(gpu("node-a", 0, **POD), [1e6, 2e6]),
            series(gpu("node-a", 1), [3e6, 4e6]),
        ],
        "pcie_rx_bytes_per_s": [
            series(gpu("node-a", 0, **POD), [5e6, 6e6]),
            series(gpu("node-a", 1), [7e6, 8e6]),
        ],
    }
    return results


def test_gpu_frame_has_the_schema_columns_and_dtypes() -> None:
    frame = frames.gpu_frame(full_results())
    assert list(frame.columns) == list(schema.GPU_COLUMNS)
    assert {c: str(t) for c, t in frame.dtypes.items()} == {
        c: str(pd.Series(dtype=t).dtype) for c, t in schema.GPU_DTYPES.items()
    }
    assert len(frame) == 4  # 2 series x 2 timestamps


def test_mig_instance_rows_have_no_gpu_util_but_carry_their_parent_gpus_power() -> None:
    frame = frames.gpu_frame(full_results())
    mig_rows = frame[frame["mig_profile"] == "3g.40gb"]
    assert mig_rows["gpu_util"].isna().all()
    assert mig_rows["power_w"].tolist() == [200.0, 210.0]
    assert mig_rows["gpu_instance_id"].unique().tolist() == ["2"]
    whole = frame[frame["mig_profile"] == ""]
    assert whole["gpu_util"].tolist() == [50.0, 60.0]
    assert whole["pcie_rx_bytes_per_s"].tolist() == [5e6, 6e6]


def test_timestamps_are_utc_and_exact() -> None:
    frame = frames.gpu_frame(full_results())
    assert frame[schema.TIMESTAMP].min() == pd.Timestamp(T0, unit="s", tz="UTC")
    assert frame[schema.TIMESTAMP].max() == pd.Timestamp(T0 + 60, unit="s", tz="UTC")


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({"hostname": "n1", "pod": "p", "namespace": "ns"}, ("n1", "p", "ns")),
        (
            {
                "Hostname": "n1",
                "pod": "dcgm-exporter-x",
                "exported_pod": "p",
                "namespace": "gpu-operator",
                "exported_namespace": "ns",
            },
            ("n1", "p", "ns"),
        ),
    ],
)
def test_both_label_dialects_are_normalised(labels: dict[str, str], expected: tuple[str, str, str]) -> None:
    shaped = frames.gpu_labels({"gpu": "0", **labels})
    assert (shaped["hostname"], shaped["pod"], shaped["namespace"]) == expected


def test_a_gpu_exported_twice_with_different_pods_becomes_duplicate_keys() -> None:
    results = full_results()
    results["engine_active"].append(series(gpu("node-a", 0, pod="other", namespace="team-b"), [0.9, 0.9]))
    frame = frames.gpu_frame(results)
    assert frame.duplicated([*schema.GPU_KEY, schema.TIMESTAMP]).sum() == 2


def test_the_same_series_scraped_by_two_jobs_is_not_merged_silently() -> None:
    results = full_results()
    results["engine_active"].append(series(gpu("node-a", 0, **POD), [0.5, 0.6]))
    frame = frames.gpu_frame(results)
    assert frame.duplicated([*schema.GPU_KEY, schema.TIMESTAMP]).sum() == 2


def test_nan_and_missing_samples_stay_visible() -> None:
    results = full_results()
    results["engine_active"][0] = series(gpu("node-a", 0, **POD), [float("nan"), 0.6])
    results["dram_active"][0] = series(gpu("node-a", 0, **POD), [0.1])  # second sample missing
    frame = frames.gpu_frame(results)
    whole = frame[frame["mig_profile"] == ""].reset_index(drop=True)
    assert math.isnan(whole.loc[0, "engine_active"])
    assert math.isnan(whole.loc[1, "dram_active"])


def test_empty_results_give_an_empty_frame_with_the_schema() -> None:
    frame = frames.gpu_frame({})
    assert frame.empty and list(frame.columns) == list(schema.GPU_COLUMNS)


def test_demand_frame_flags_unschedulable_pods() -> None:
    running = {
        "namespace": "team-a",
        "pod": "train-1",
        "container": "main",
        "node": "node-a",
        "resource": "nvidia_com_gpu",
        "unit": "integer",
    }
    pending = {
        "namespace": "team-a",
        "pod": "train-2",
        "container": "main",
        "resource": "nvidia_com_mig_1g_10gb",
        "unit": "integer",
    }
    frame = frames.demand_frame(
        [series(running, [1.0, 1.0]), series(pending, [2.0, 2.0])],
        [series({"namespace": "team-a", "pod": "train-2", "uid": "u"}, [1.0], start=T0 + 60)],
    )
    assert list(frame.columns) == list(schema.DEMAND_COLUMNS)
    flagged = frame[frame["unschedulable"]]
    assert flagged[["pod", "requested"]].values.tolist() == [["train-2", 2.0]]
    assert (frame[frame["pod"] == "train-2"]["node"] == "").all()


def test_demand_frame_carries_each_pods_declared_share_and_gpu_selectors() -> None:
    pod_a = {"namespace": "ml", "pod": "embed-0", "container": "main", "resource": "nvidia_com_gpu"}
    pod_b = {"namespace": "ml", "pod": "train-0", "container": "main", "resource": "nvidia_com_gpu"}
    pod_c = {"namespace": "ml", "pod": "odd-0", "container": "main", "resource": "nvidia_com_gpu"}
    shape_share = frames.pod_form_shape(schema.SHARE_ANNOTATION_LABEL)
    ids = {"namespace": "ml", "uid": "u"}
    shares = frames.compact(
        [
            # The annotation changed mid-window: the latest value wins.
            series({**ids, "pod": "embed-0", schema.SHARE_ANNOTATION_LABEL: "0.5"}, [1.0]),
            series({**ids, "pod": "embed-0", schema.SHARE_ANNOTATION_LABEL: "0.25"}, [1.0], start=T0 + 60),
            series({**ids, "pod": "odd-0", schema.SHARE_ANNOTATION_LABEL: "lots"}, [1.0]),  # not a share
        ],
        shape_share,
    )
    # kube_pod_nodeselectors: one series per pod, every selector label on it.
    selectors = [
        series({**ids, "pod": "train-0", schema.PRODUCT_SELECTOR_LABEL: "NVIDIA-H100-80GB-HBM3"}, [1.0]),
        series(
            {
                **ids,
                "pod": "embed-0",
                schema.SHARING_SELECTOR_LABEL: "mps",
                schema.REPLICAS_SELECTOR_LABEL: "4",
            },
            [1.0],
        ),
    ]
    by_form = {
        form: frames.compact(selectors, frames.pod_form_shape(label))
        for form, label in schema.SELECTOR_LABELS.items()
    }
    # kube_pod_annotations{annotation_slicewise_io_evictable="true"}: train-0 opted in; odd-0 says "yes", which
    # is not "true" (Slicewise's own check reads exactly "true").
    opted_in = frames.compact(
        [
            series({**ids, "pod": "train-0", schema.EVICTABLE_ANNOTATION_LABEL: "true"}, [1.0]),
            series({**ids, "pod": "odd-0", schema.EVICTABLE_ANNOTATION_LABEL: "yes"}, [1.0]),
        ],
        frames.pod_form_shape(schema.EVICTABLE_ANNOTATION_LABEL),
    )
    frame = frames.demand_frame(
        [series(pod_a, [1.0, 1.0]), series(pod_b, [1.0, 1.0]), series(pod_c, [1.0, 1.0])],
        [],
        shares,
        by_form,
        opted_in,
    )
    by_pod = frame.drop_duplicates("pod").set_index("pod")
    assert by_pod.loc["embed-0", "declared_share"] == 0.25
    assert np.isnan(by_pod.loc["train-0", "declared_share"]) and np.isnan(
        by_pod.loc["odd-0", "declared_share"]
    )
    assert by_pod["gpu_product"].to_dict() == {"embed-0": "", "train-0": "NVIDIA-H100-80GB-HBM3", "odd-0": ""}
    assert by_pod["gpu_sharing"].to_dict() == {"embed-0": "mps", "train-0": "", "odd-0": ""}
    assert by_pod["gpu_replicas"].to_dict() == {"embed-0": "4", "train-0": "", "odd-0": ""}
    assert by_pod["eviction_opt_in"].to_dict() == {"embed-0": False, "train-0": True, "odd-0": False}
    assert frame.dtypes.astype(str).to_dict() == schema.DEMAND_DTYPES


def handover_results(old_values: list[float], new_start_step: int, new_values: list[float]) -> dict[str, Any]:
    old = gpu("node-a", 0, pod="old", namespace="team-a", container="c")
    new = gpu("node-a", 0, pod="new", namespace="team-a", container="c")
    return {
        "engine_active": [series(old, old_values), series(new, new_values, start=T0 + 60 * new_start_step)]
    }


def test_a_pod_handover_inside_one_step_is_not_a_duplicate_and_the_new_pod_wins() -> None:
    # The window ending at step 2 saw the old pod's last sample and the new pod's first.
    frame = frames.gpu_frame(handover_results([0.1, 0.1, 0.1], 2, [0.9, 0.9, 0.9]), step_s=60)
    assert not frame.duplicated([*schema.GPU_KEY, schema.TIMESTAMP]).any()
    assert frame["pod"].tolist() == ["old", "old", "new", "new", "new"]


def test_a_handover_at_the_last_step_keeps_the_newcomer() -> None:
    frame = frames.gpu_frame(handover_results([0.1, 0.1, 0.1], 2, [0.9]), step_s=60)
    assert frame["pod"].tolist() == ["old", "old", "new"]


def test_two_pods_on_one_gpu_all_along_stay_duplicates_for_validation() -> None:
    frame = frames.gpu_frame(handover_results([0.1, 0.1, 0.1], 0, [0.9, 0.9, 0.9]), step_s=60)
    assert frame.duplicated([*schema.GPU_KEY, schema.TIMESTAMP]).sum() == 3
