"""Shaping the pages' data, without Airflow: hand-checked tables, dwell arithmetic, unknown report keys,
settings, cut-off sources and the lazy mount."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from slicewise.cluster.base import HOLD_ANNOTATION, LAST_CHANGE_ANNOTATION, GpuNode, Hold, Taint
from slicewise.ui import cost, sources, tables, views
from slicewise.ui.mount import LazyApp
from tests.plugins import fleet_data

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
SAVINGS = "Savings attributed to the control loop (estimate)"


def node(name: str, product: str = "NVIDIA-A100-SXM4-80GB", changed: str | None = None, **kw: Any) -> GpuNode:
    annotations = {LAST_CHANGE_ANNOTATION: changed} if changed is not None else {}
    fields: dict[str, Any] = {
        "gpu_count": 4,
        "mig_config": "all-balanced",
        "mig_config_state": "success",
        "device_plugin_config": "",
        "allocatable": {},
        "unschedulable": False,
    }
    return GpuNode(name=name, gpu_product=product, annotations=annotations, **{**fields, **kw})


# -- the fleet --------------------------------------------------------------------------------------------------


def test_dwell_counts_from_the_annotation_and_is_free_once_over() -> None:
    # Given a node changed 25 minutes ago and a one-hour dwell, 35 minutes remain.
    changed = NOW - timedelta(minutes=25)
    assert views.dwell_left(changed, 1.0, NOW) == timedelta(minutes=35)
    assert views.dwell_left(NOW - timedelta(hours=2), 1.0, NOW) == timedelta(0)
    assert views.dwell_left(None, 1.0, NOW) == timedelta(0)


def test_the_fleet_table_shows_layout_changes_and_dwell() -> None:
    nodes = [
        node("a", changed=(NOW - timedelta(minutes=25)).isoformat(), unschedulable=True),
        node("b", changed="2026-11-29T09:00:00", device_plugin_config="mps-4"),  # naive: read as UTC
        # An unreadable annotation counts as no change, as the planner reads it.
        node("c", changed="yesterday-ish", mig_config="", mig_config_state=""),
        node(
            "d",
            taints=(Taint("slicewise.io/standby", "PreferNoSchedule"), Taint("dedicated", "NoSchedule", "x")),
        ),
        node(
            "e",
            taints=(
                Taint("slicewise.io/standby", "PreferNoSchedule"),
                Taint("slicewise.io/standby-large", "PreferNoSchedule"),
                Taint("slicewise.io/standby-larger", "PreferNoSchedule"),
            ),
        ),
    ]
    ledger = {"a": NOW - timedelta(minutes=26), "b": None}
    table = views.fleet_table(nodes, ledger, 1.5, NOW)
    assert table.columns[-4:] == ("last change (annotation)", "last change (ledger)", "dwell", "Slicewise")
    assert table.rows[0] == (
        "a",
        "4 x NVIDIA-A100-SXM4-80GB",
        "all-balanced",
        "success",
        "(default)",
        "cordoned",
        "2026-11-29 11:35 UTC",
        "2026-11-29 11:34 UTC",
        "1 h 05 min left (until 2026-11-29 13:05 UTC)",
        "plans it",
    )
    assert table.rows[1][4:] == ("mps-4", "open", "2026-11-29 09:00 UTC", "-", "free", "plans it")
    # The planner's PreferNoSchedule taints: one on a node of the smallest size, three on the third size up.
    assert [row[5] for row in table.rows[3:]] == [
        "standby (opened when no node in use fits)",
        "standby, grade 3 of 4 (opened after the lower grades)",
    ]
    assert table.rows[2][2:4] == ("(none)", "-")
    assert table.rows[2][6:9] == ("-", "-", "free (never changed)")
    # The ledger could not be read: the column says so instead of "never".
    assert views.fleet_table(nodes, None, 1.5, NOW).rows[0][7] == "?"


def test_the_fleet_table_tells_slicewises_hold_from_anyone_elses_cordon() -> None:
    hold = Hold("all-3g.40gb", "default", NOW - timedelta(hours=3))
    held = GpuNode(
        name="held",
        gpu_product="NVIDIA-A100-SXM4-80GB",
        gpu_count=4,
        mig_config="all-1g.10gb",
        mig_config_state="success",
        device_plugin_config="",
        allocatable={},
        unschedulable=True,
        annotations={HOLD_ANNOTATION: hold.to_annotation()},
    )
    rows = views.fleet_table([held, node("theirs", unschedulable=True)], {}, 1.0, NOW).rows
    assert [row[5] for row in rows] == [
        "held by Slicewise since 2026-11-29 09:00 UTC, until its pods finish, for mig.config=all-3g.40gb, "
        "device-plugin.config=default",
        "cordoned",
    ]


def test_the_fleet_table_says_which_nodes_slicewise_keeps_its_hands_off() -> None:
    nodes = [
        node("dra", labels={"nvidia.com/dra-kubelet-plugin": "true"}),
        node("no-plugin", labels={"nvidia.com/gpu.deploy.device-plugin": "false"}),
        node("bare", product="", gpu_count=0),
        node("ours", labels={"nvidia.com/gpu.deploy.device-plugin": "true"}),
    ]
    column = [row[-1] for row in views.fleet_table(nodes, {}, 1.0, NOW).rows]
    assert column[0].startswith("hands off: its GPUs are allocated by the NVIDIA DRA driver")
    assert column[1].startswith("hands off: the GPU Operator's device plugin does not run here")
    assert column[2].startswith("hands off: no GPU Feature Discovery labels")
    assert column[3] == "plans it"


def test_gpu_models_drop_the_mig_and_sharing_suffixes() -> None:
    nodes = [
        node("a", "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"),
        node("b", "NVIDIA-A100-SXM4-80GB"),
        node("c", "NVIDIA-H100-80GB-HBM3-SHARED", gpu_count=8),
    ]
    assert views.model_counts(nodes).rows == (
        ("NVIDIA-A100-SXM4-80GB", "2", "8"),
        ("NVIDIA-H100-80GB-HBM3", "1", "8"),
    )


# -- the cost report --------------------------------------------------------------------------------------------


def pairs(table: tables.Table) -> dict[str, str]:
    """A two-column table as a dict of its cells' text."""
    return {str(row[0]): str(row[1]) for row in table.rows}


def test_the_cost_view_formats_facts_totals_namespaces_and_sections() -> None:
    view = cost.cost_view(fleet_data.SUMMARY, fleet_data.REPORT_DATE)
    facts = dict(view.facts)
    assert facts["window"] == "2026-11-28T00:00:00+00:00 to 2026-11-29T00:00:00+00:00"
    assert facts["hours"] == "23 of 24 validated; missing: 2026-11-28T13:00:00+00:00"
    assert facts["default price"] == "0.95 USD per GPU-hour (GPU models without a price)"
    assert "partial" not in facts
    assert view.totals.rows[9] == ("GPU cost", "456.00 USD")
    assert view.namespaces.columns == ("namespace", "gpuHours", "gpuCost", "gpuCostIdle", "gpuEfficiency")
    assert view.namespaces.rows[1] == ("team-nlp", "192.00", "182.40 USD", "108.25 USD", "40.6%")
    assert view.namespaces.numeric == frozenset({1, 2, 3, 4})
    sections = {s.title: s for s in view.sections}
    assert list(sections)[:3] == ["By team", "Idle time by namespace, with its evidence", SAVINGS]
    savings = sections[SAVINGS]
    assert [caption for caption, _ in savings.tables] == ["", "changes"]
    summary_rows = pairs(savings.tables[0][1])
    assert summary_rows["estimate"] == "yes" and summary_rows["cost"] == "11.88 USD"
    assert summary_rows["gpuHours"] == "12.50" and summary_rows["window_hours"] == "6"
    accuracy = {caption: table for caption, table in sections["Forecast accuracy"].tables}
    assert accuracy["by_predictor"].rows[1] == ("seasonal_naive", "120", "0.094", "21.0%")
    assert pairs(accuracy["champion"])["predictors"] == "champion v7"
    counts = sections["Changes and rollbacks"].tables[0][1]
    assert counts.rows == (("changes applied", "1"), ("rollbacks", "1"), ("failed rollouts", "0"))
    assert "Rollbacks" not in sections
    assert "files" not in sections and "generated_at" not in sections
    assert view.notes == (fleet_data.SUMMARY["notes"][0],)


def test_keys_the_page_does_not_know_are_still_shown() -> None:
    summary = {
        "date": "2026-11-28",
        "partial": True,
        "totals": {"gpuHours": 10, "gpuCostByModel": {"H100": 4.5}, "spotSavingsCost": 1.5},
        "namespaces": [{"namespace": "x", "gpuHours": 1.0, "gpuEfficiency": None}],
        "carbon": {"kgCO2": 12.25, "by_region": {"eu": {"kgCO2": 2.0}, "us": {"kgCO2": 10.25}}},
        "rollbacks": [],  # not a count: shown on its own
        "changes": 2,
        "notes": "one note",
    }
    view = cost.cost_view(summary, "2026-11-28")
    assert view.totals.rows == (
        ("GPU-hours", "10"),
        ("gpuCostByModel", '{"H100": 4.5}'),
        ("spotSavingsCost", "1.50"),  # no currency in this summary
    )
    assert dict(view.facts)["partial"].startswith("yes: the day so far")
    assert view.namespaces.rows == (("x", "1.00", "-"),)
    sections = {s.title: s for s in view.sections}
    assert sections["Rollbacks"].text == "none"
    assert sections["Changes applied"].text == "2"
    carbon = sections["carbon"].tables
    assert carbon[0][1].rows == (("kgCO2", "12.25"),)
    assert carbon[1][0] == "by_region" and carbon[1][1].rows == (("eu", "2"), ("us", "10.25"))
    assert view.notes == ("one note",)


def test_a_summary_without_totals_or_namespaces_gives_empty_tables() -> None:
    view = cost.cost_view({}, "2026-11-28")
    assert view.totals.rows == () and view.namespaces.rows == () and view.sections == ()
    assert view.facts == (("date", "2026-11-28"), ("currency", "-"))


@pytest.mark.parametrize(
    ("key", "value", "text"),
    [
        ("gpuCost", 1234.5, "1,234.50 EUR"),
        ("price_per_gpu_hour", 0.95, "0.95 EUR"),
        ("gpuEfficiency", 0.5, "50.0%"),
        ("under_provisioning_rate", None, "-"),
        ("usedGpuHours", 3.0, "3.00"),
        ("mae_p50", 0.0612345, "0.06123"),
        ("count", 12000, "12,000"),
        ("wasteBefore", 123456.7, "123,457"),
        ("estimate", False, "no"),
        ("predictors", ["champion v7", "champion v8"], "champion v7, champion v8"),
        ("candidates", [], "-"),
        ("method", "text", "text"),
    ],
)
def test_numbers_read_by_their_names(key: str, value: Any, text: str) -> None:
    assert tables.formatted(key, value, "EUR") == text


def test_value_tables_by_shape() -> None:
    shown, text = tables.value_tables([{"a": 1}, {"b": True}])
    assert text == "" and [(c, t.columns, t.rows) for c, t in shown] == [
        ("", ("a", "b"), (("1", "-"), ("-", "yes")))
    ]
    assert tables.value_tables(["x", 2]) == ((), "x, 2")
    assert tables.value_tables(3) == ((), "3")
    empties: list[Any] = [None, [], {}, ""]
    for empty in empties:
        assert tables.value_tables(empty) == ((), "none")


def test_a_row_must_fit_its_columns() -> None:
    with pytest.raises(ValueError, match="2 cells for 1 columns"):
        tables.Table(("a",), (("x", "y"),))


# -- plan and rollouts ------------------------------------------------------------------------------------------


def test_the_plan_view_puts_changes_first() -> None:
    view = views.plan_view(fleet_data.PLAN)
    assert [row[0] for row in view.table.rows] == ["sim-h100-0", "sim-a100-40-0"]
    assert view.table.row_classes == ("change", "keep")
    assert view.headline.startswith("policy packing, forecaster champion v7 (trusted)")


# -- sources ----------------------------------------------------------------------------------------------------


def test_settings_from_the_variable_override_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLICEWISE_PLANNER_DWELL_HOURS", "3")
    settings, notes = sources.ui_settings(lambda: '{"planner_dwell_hours": 0.5}')
    assert settings.planner_dwell_hours == 0.5 and notes == []
    settings, notes = sources.ui_settings(lambda: None)
    assert settings.planner_dwell_hours == 3.0


def test_an_unreadable_variable_falls_back_to_env_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLICEWISE_PLANNER_DWELL_HOURS", "3")

    def down() -> str | None:
        raise ConnectionError("metadata database unreachable")

    settings, notes = sources.ui_settings(down)
    assert settings.planner_dwell_hours == 3.0
    assert notes == [
        "Airflow Variable slicewise_settings could not be read (metadata database unreachable); ignoring it."
    ]
    _, notes = sources.ui_settings(lambda: "[1, 2]")
    assert notes == [
        "Airflow Variable slicewise_settings is invalid (it must be a JSON object); ignoring it."
    ]


def test_a_hanging_source_is_cut_off() -> None:
    release = threading.Event()
    started = time.perf_counter()
    with pytest.raises(sources.Unavailable, match=r"the cluster did not answer within 0\.2 s"):
        sources.within(0.2, "the cluster", release.wait)
    assert time.perf_counter() - started < 2
    release.set()


def test_a_failing_source_is_named() -> None:
    def boom() -> None:
        raise OSError("connection refused")

    with pytest.raises(sources.Unavailable, match="the ledger failed: OSError: connection refused"):
        sources.within(5, "the ledger", boom)


def test_passwords_in_the_storage_url_are_not_shown() -> None:
    from slicewise.settings import load_settings

    settings = load_settings({"storage_root": "s3://key:secret@bucket/slicewise"})
    assert sources.settings_facts(settings)["storage root"] == "s3://key:***@bucket/slicewise"
    conn_only = load_settings({"storage_root": "s3://aws_default@bucket/slicewise"})
    assert sources.settings_facts(conn_only)["storage root"] == "s3://aws_default@bucket/slicewise"


# -- the lazy mount ---------------------------------------------------------------------------------------------

BUILT: list[int] = []


def _factory() -> Any:
    BUILT.append(1)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "seen", "path": scope["path"]})

    return app


def test_the_lazy_app_is_built_once_on_the_first_request() -> None:
    lazy = LazyApp(f"{__name__}:_factory")
    BUILT.clear()
    assert BUILT == []  # constructing it builds nothing
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> Any:
        return {}

    asyncio.run(lazy({"path": "/a"}, receive, send))
    asyncio.run(lazy({"path": "/b"}, receive, send))
    assert BUILT == [1]
    assert sent == [{"type": "seen", "path": "/a"}, {"type": "seen", "path": "/b"}]


@pytest.mark.parametrize(
    ("model", "text"),
    [
        ({"scheduler": "spread"}, "none modelled"),
        ({"scale_down_unneeded_s": None}, "none modelled"),
        (
            {"scale_down_unneeded_s": 1800, "shared_node_group": False},
            "removes nodes empty for 1,800 s; without",
        ),
        (
            {
                "scale_down_unneeded_s": 600.0,
                "scale_down_utilization_threshold": 0.5,
                "shared_node_group": True,
            },
            "removes nodes empty and nodes under 50% GPU utilisation whose pods fit elsewhere for 600 s; with a node "
            "group shared by MPS",
        ),
        (
            {"scale_down_unneeded_s": 600.0, "shared_node_group": True, "shared_node_group_max_gpus": 2},
            "removes nodes empty for 600 s; with a node group shared by MPS for the machines of at most 2 GPUs",
        ),
        # A review from before the utilisation threshold and the shared group: empty nodes only, no group.
        (
            {"scale_down_unneeded_s": 600.0},
            "removes nodes empty for 600 s; without a node group shared by MPS",
        ),
    ],
)
def test_the_review_says_which_cluster_autoscaler_it_replayed(model: dict[str, Any], text: str) -> None:
    view = views.review_view({**fleet_data.REVIEW, "model": model})
    assert dict(view.facts)["cluster autoscaler"].startswith(text)


@pytest.mark.parametrize(
    ("model", "text"),
    [
        (
            {"evictable": "annotated"},
            "Slicewise may evict only the pods that carried slicewise.io/evictable=true",
        ),
        ({"evictable": "all"}, "Slicewise may evict every pod"),
        ({}, "Slicewise may evict every pod"),  # a review from before the Param replayed every pod so
    ],
)
def test_the_review_says_which_pods_its_replay_could_evict(model: dict[str, Any], text: str) -> None:
    view = views.review_view({**fleet_data.REVIEW, "model": model})
    assert dict(view.facts)["evictions replayed"] == text
