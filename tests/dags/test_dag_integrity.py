"""Every DAG imports, is documented and retried, parses fast, and does nothing expensive at parse time."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.isolated_import import isolated_import

REPO = Path(__file__).resolve().parents[2]
DAG_FILES = sorted((REPO / "dags").glob("*.py"))
HEAVY_MODULES = [
    "pandas",
    "numpy",
    "pyarrow",
    "tensorflow",
    "keras",
    "mlflow",
    "great_expectations",
    "kubernetes",
    "prometheus_api_client",
    "matplotlib",
]


@pytest.fixture(scope="module")
def dag_bag():  # type: ignore[no-untyped-def]
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(REPO / "dags"))


def test_there_are_dag_files() -> None:
    assert DAG_FILES, "no DAG files found"


def test_every_dag_file_imports_without_errors(dag_bag) -> None:  # type: ignore[no-untyped-def]
    assert dag_bag.import_errors == {}
    assert len(dag_bag.dags) >= len(DAG_FILES)


def test_every_dag_has_tags_owner_retries_and_docs(dag_bag) -> None:  # type: ignore[no-untyped-def]
    for dag_id, dag in dag_bag.dags.items():
        assert dag.tags, f"{dag_id} has no tags"
        assert dag.doc_md and len(dag.doc_md) > 100, f"{dag_id} has no doc_md"
        assert dag.default_args.get("owner") not in (None, "airflow"), f"{dag_id} has no owner"
        assert dag.default_args.get("retries", 0) >= 1, f"{dag_id} has no retries"
        assert dag.start_date is not None and dag.start_date.tzinfo is not None, f"{dag_id} start_date naive"


@pytest.mark.parametrize("dag_file", DAG_FILES, ids=[p.stem for p in DAG_FILES])
def test_dag_file_parses_fast_opens_nothing_and_imports_nothing_heavy(dag_file: Path) -> None:
    result = isolated_import("import airflow.sdk", "import runpy\nrunpy.run_path(sys.argv[1])", str(dag_file))
    assert result["touched"] == [], f"{dag_file.name} touched the network or Variables at parse time"
    heavy = [m for m in result["new_modules"] if m.split(".")[0] in HEAVY_MODULES]
    assert heavy == [], f"{dag_file.name} imports heavy modules at parse time: {heavy[:5]}"
    assert result["elapsed"] < 1.0, f"{dag_file.name} took {result['elapsed']:.2f}s to parse"
