"""The live exporter: dcgm-exporter and kube-state-metrics series, equal to the frames at the same instant."""

from __future__ import annotations

import copy
import urllib.request
from collections import defaultdict

import numpy as np
import pandas as pd
import pytest
from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from slicewise import schema
from slicewise.metrics import frames
from slicewise.simulator import demand, gpu_samples
from slicewise.simulator.exporter import make_registry, serve
from slicewise.simulator.fleet import Fleet, load_config

#: Monday 2024-01-08 14:00:30 UTC: peak hours, so pods are pending too
INSTANT = 1_704_672_000 + 14 * 3600 + 30
DCGM_NAMES = {metric: column for column, (metric, _) in schema.GPU_FIELDS.items()}
POD_LABELS = ("namespace", "pod", "container")
DEVICE_COLUMNS = {column for column, (_, level) in schema.GPU_FIELDS.items() if level == "device"}


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    return Fleet.default()


def _scrape(fleet: Fleet, instant: float = INSTANT, hostname_label: str = "Hostname") -> dict[str, Metric]:
    registry = make_registry(fleet, hostname_label=hostname_label, clock=lambda: instant)
    text = generate_latest(registry).decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


@pytest.fixture(scope="module")
def scraped(fleet: Fleet) -> dict[str, Metric]:
    return _scrape(fleet)


def test_exporter_serves_exactly_the_schema_metric_names(scraped: dict[str, Metric]) -> None:
    expected = set(DCGM_NAMES) | {
        schema.KSM_REQUESTS,
        schema.KSM_UNSCHEDULABLE,
        schema.KSM_POD_ANNOTATIONS,
        schema.KSM_POD_NODESELECTORS,
        schema.KSM_NODE_CAPACITY,
        schema.KSM_NODE_ALLOCATABLE,
    }
    assert set(scraped) == expected
    assert all(family.type == "gauge" and family.documentation for family in scraped.values())


def test_dcgm_labels_follow_the_exporter(fleet: Fleet, scraped: dict[str, Metric]) -> None:
    base = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"}
    pod = {"pod", "namespace", "container"}
    for metric, column in DCGM_NAMES.items():
        for sample in scraped[metric].samples:
            labels = set(sample.labels)
            assert base <= labels, (metric, sample.labels)
            assert sample.labels["device"] == f"nvidia{sample.labels['gpu']}"
            # MIG labels only on instance-level series of MIG instances, pod labels all or none
            has_mig = {"GPU_I_PROFILE", "GPU_I_ID"} & labels
            assert has_mig in (set(), {"GPU_I_PROFILE", "GPU_I_ID"})
            if column in DEVICE_COLUMNS or column == "gpu_util":
                assert not has_mig, (metric, sample.labels)
            assert pod & labels in (set(), pod)
            assert labels - base - pod - {"GPU_I_PROFILE", "GPU_I_ID"} == set()
    # one GPU_UTIL per whole/MPS GPU, one device reading per physical GPU
    whole = sum(node.gpus for node in fleet.nodes if node.sharing != "mig")
    assert len(scraped["DCGM_FI_DEV_GPU_UTIL"].samples) == whole
    assert len(scraped["DCGM_FI_DEV_POWER_USAGE"].samples) == fleet.n_gpus
    assert len(scraped["DCGM_FI_PROF_GR_ENGINE_ACTIVE"].samples) == fleet.layout.n_series


def _frame_from_scrape(scraped: dict[str, Metric]) -> pd.DataFrame:
    """Rebuild the schema's GPU frame from scraped families (instance fields keyed by full labels)."""
    rows: dict[tuple[str, ...], dict[str, object]] = defaultdict(dict)
    device: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for metric, column in DCGM_NAMES.items():
        for sample in scraped[metric].samples:
            labels = sample.labels
            if column in DEVICE_COLUMNS:
                device[(labels["Hostname"], labels["gpu"])][column] = sample.value
                continue
            key = tuple(
                labels.get(name, "")
                for name in ("Hostname", "gpu", "UUID", "modelName", "GPU_I_PROFILE", "GPU_I_ID", *POD_LABELS)
            )
            rows[key][column] = sample.value
    records = []
    for key, values in rows.items():
        record: dict[str, object] = dict(zip(schema.GPU_LABELS, key, strict=True))
        record.update(values)
        record.update(device[(key[0], key[1])])
        records.append(record)
    frame = pd.DataFrame.from_records(records)
    frame["gpu"] = frame["gpu"].astype("int64")
    return frame


def test_exporter_values_equal_gpu_samples_at_the_same_instant(
    fleet: Fleet, scraped: dict[str, Metric]
) -> None:
    # given the frame the fleet promises at the instant, and the scrape rebuilt into that shape
    expected = gpu_samples(fleet, [INSTANT]).drop(columns=[schema.TIMESTAMP])
    got = _frame_from_scrape(scraped)

    # then they hold the same series with the same values (GPU_UTIL absent = NaN on MIG instances)
    key = list(schema.GPU_KEY)
    expected = expected.sort_values(key, ignore_index=True)
    got = got.reindex(columns=expected.columns).sort_values(key, ignore_index=True)
    labels = list(schema.GPU_LABELS)
    assert got[labels].astype(str).equals(expected[labels].astype(str))
    for column in schema.GPU_FIELDS:
        np.testing.assert_array_equal(got[column].to_numpy(float), expected[column].to_numpy(float), column)


def test_ksm_series_equal_the_demand_frame(fleet: Fleet, scraped: dict[str, Metric]) -> None:
    # given the demand frame at the instant
    expected = demand(fleet, [INSTANT])
    assert expected["unschedulable"].any(), "the instant is at peak hours: some pods must be pending"

    # then each request is one kube_pod_container_resource_requests sample with ksm's labels
    requests = scraped[schema.KSM_REQUESTS].samples
    assert all(s.labels["unit"] == "integer" and s.labels["uid"] for s in requests)
    got = sorted(
        (s.labels["namespace"], s.labels["pod"], s.labels["node"], s.labels["resource"], s.value)
        for s in requests
    )
    want = sorted(
        (r.namespace, r.pod, r.node, r.resource, r.requested) for r in expected.itertuples(index=False)
    )
    assert got == want
    # and only pending pods carry kube_pod_status_unschedulable, at 1
    unschedulable = {
        (s.labels["namespace"], s.labels["pod"]): s.value for s in scraped[schema.KSM_UNSCHEDULABLE].samples
    }
    pending = expected[expected["unschedulable"]]
    assert unschedulable == dict.fromkeys(zip(pending["namespace"], pending["pod"], strict=True), 1.0)


def test_declared_shares_and_gpu_selectors_round_trip_as_kube_state_metrics_exports_them() -> None:
    # given a fleet whose embedders declare a quarter of a GPU and select MPS with 4 replicas, and whose LLM
    # servers select A100-80GBs
    config = copy.deepcopy(load_config())
    config["workloads"]["search-embed"]["gpu_share"] = 0.25
    config["workloads"]["search-embed"]["gpu_sharing"] = "mps"
    config["workloads"]["search-embed"]["gpu_replicas"] = "4"
    config["workloads"]["llm-serve"]["gpu_product"] = "NVIDIA-A100-SXM4-80GB"
    fleet = Fleet.from_config(config)
    expected = demand(fleet, [INSTANT])
    scraped = _scrape(fleet)

    # then each of their pods carries the label kube-state-metrics gives the annotation / the nodeSelector, the
    # selectors on one series per pod
    def pods_with(family: str, label: str) -> dict[str, str]:
        return {s.labels["pod"]: s.labels[label] for s in scraped[family].samples if label in s.labels}

    shares = pods_with(schema.KSM_POD_ANNOTATIONS, schema.SHARE_ANNOTATION_LABEL)
    products = pods_with(schema.KSM_POD_NODESELECTORS, schema.PRODUCT_SELECTOR_LABEL)
    sharing = pods_with(schema.KSM_POD_NODESELECTORS, schema.SHARING_SELECTOR_LABEL)
    replicas = pods_with(schema.KSM_POD_NODESELECTORS, schema.REPLICAS_SELECTOR_LABEL)
    embed = set(expected.loc[expected["pod"].str.startswith("search-embed"), "pod"])
    llm = set(expected.loc[expected["pod"].str.startswith("llm-serve"), "pod"])
    assert embed and llm
    assert shares == dict.fromkeys(embed, "0.25")
    assert products == dict.fromkeys(llm, "NVIDIA-A100-SXM4-80GB")
    assert sharing == dict.fromkeys(embed, "mps") and replicas == dict.fromkeys(embed, "4")
    selector_pods = [s.labels["pod"] for s in scraped[schema.KSM_POD_NODESELECTORS].samples]
    assert len(selector_pods) == len(set(selector_pods))  # one series per pod
    # the pods of workloads the config marks evictable carry slicewise.io/evictable=true, beside their share
    opted_in = pods_with(schema.KSM_POD_ANNOTATIONS, schema.EVICTABLE_ANNOTATION_LABEL)
    evictable = {name for name, raw in config["workloads"].items() if raw.get("evictable")}
    assert evictable and set(config["workloads"]) - evictable
    assert opted_in == {
        pod: "true" for pod in expected["pod"] if any(pod.startswith(f"{name}-") for name in evictable)
    }
    assert set(embed) <= set(opted_in) and set(shares) <= set(opted_in)
    annotated_pods = [s.labels["pod"] for s in scraped[schema.KSM_POD_ANNOTATIONS].samples]
    assert len(annotated_pods) == len(set(annotated_pods))  # both annotations on one series per pod

    # and the ingest's frame builder reads them back into the demand frame's form columns
    def as_series(family: str) -> list[dict[str, object]]:
        return [{"metric": s.labels, "values": [[INSTANT, str(s.value)]]} for s in scraped[family].samples]

    selectors = as_series(schema.KSM_POD_NODESELECTORS)
    frame = frames.demand_frame(
        as_series(schema.KSM_REQUESTS),
        as_series(schema.KSM_UNSCHEDULABLE),
        frames.compact(
            as_series(schema.KSM_POD_ANNOTATIONS), frames.pod_form_shape(schema.SHARE_ANNOTATION_LABEL)
        ),
        {
            form: frames.compact(selectors, frames.pod_form_shape(label))
            for form, label in schema.SELECTOR_LABELS.items()
        },
        frames.compact(
            as_series(schema.KSM_POD_ANNOTATIONS), frames.pod_form_shape(schema.EVICTABLE_ANNOTATION_LABEL)
        ),
    )
    key = ["namespace", "pod", "container", "resource"]
    columns = [*schema.DEMAND_FORMS, "eviction_opt_in"]
    got = frame.set_index(key).sort_index()[columns]
    want = expected.set_index(key).sort_index()[columns]
    pd.testing.assert_frame_equal(got, want)


def test_node_capacity_and_allocatable_list_the_gpu_resources(
    fleet: Fleet, scraped: dict[str, Metric]
) -> None:
    for name in (schema.KSM_NODE_CAPACITY, schema.KSM_NODE_ALLOCATABLE):
        got = {(s.labels["node"], s.labels["resource"]): s.value for s in scraped[name].samples}
        assert got == {key: float(v) for key, v in fleet.node_capacity().items()}


def test_hostname_label_can_be_the_newer_lower_case(fleet: Fleet) -> None:
    scraped = _scrape(fleet, hostname_label="hostname")
    samples = scraped["DCGM_FI_DEV_FB_USED"].samples
    assert all("hostname" in s.labels and "Hostname" not in s.labels for s in samples)
    with pytest.raises(ValueError, match="hostname_label"):
        make_registry(fleet, hostname_label="node")


def test_two_scrapes_of_one_instant_are_identical_and_later_ones_move(fleet: Fleet) -> None:
    first = generate_latest(make_registry(fleet, clock=lambda: INSTANT))
    again = generate_latest(make_registry(fleet, clock=lambda: INSTANT + 0.9))  # same second
    later = generate_latest(make_registry(fleet, clock=lambda: INSTANT + 600))
    assert first == again
    assert first != later


def test_serve_binds_loopback_and_shuts_down(fleet: Fleet) -> None:
    # given a server on a free loopback port
    server, port = serve(fleet, "127.0.0.1", 0)
    try:
        # when scraped over HTTP
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
            body = response.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    # then it serves the dcgm series
    families = {f.name for f in text_string_to_metric_families(body)}
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in families
    assert server.server_address[0] == "127.0.0.1" and port > 0


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3"])
def test_serve_refuses_non_loopback_addresses(fleet: Fleet, host: str) -> None:
    with pytest.raises(ValueError, match="loopback"):
        serve(fleet, host, 0)
