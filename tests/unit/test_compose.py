"""docker-compose.yaml checked statically (no Docker engine runs here): the Compose schema, files and build
contexts, pinned images, loopback-only ports, declared volumes, health checks, secrets only from .env, and one
Airflow version everywhere."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ONE_SHOT = {"airflow-init"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    # PyYAML resolves the anchors and `<<` merge keys the file uses; the schema validator does not.
    return dict(yaml.safe_load((REPO / "docker-compose.yaml").read_text()))


def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return dict(compose["services"])


def test_the_file_is_a_valid_compose_document(compose: dict[str, Any]) -> None:
    import compose_spec

    parsed = compose_spec.PyCompose.from_yaml(yaml.safe_dump(compose))
    parsed.validate()
    assert set(parsed.service_names()) == set(services(compose))


@pytest.mark.parametrize(
    "broken",
    [
        "services:\n  x:\n    image: a:1\n    restart: sometimes\n",
        "services:\n  x:\n    image: a:1\n    depends_on:\n      y:\n        condition: whenever\n",
        "services:\n  x:\n    imagex: a:1\n",
    ],
)
def test_the_validator_refuses_a_broken_document(broken: str) -> None:
    import compose_spec

    with pytest.raises(ValueError):
        compose_spec.PyCompose.from_yaml(broken).validate()


def test_every_build_context_dockerfile_and_mounted_file_exists(compose: dict[str, Any]) -> None:
    for name, service in services(compose).items():
        build = service.get("build")
        if build:
            context = REPO / build["context"]
            assert context.is_dir(), name
            assert (context / build.get("dockerfile", "Dockerfile")).is_file(), name
        for volume in service.get("volumes", []):
            source = str(volume).split(":")[0]
            if source.startswith("."):
                assert (REPO / source).exists(), (name, source)


def test_images_are_pinned_and_airflow_is_one_version(compose: dict[str, Any]) -> None:
    for name, service in services(compose).items():
        image = service.get("image", "")
        assert re.fullmatch(r"[\w./-]+:v?\d[\w.-]*", image), (
            f"{name}: image {image!r} must have a version tag"
        )
    pinned = re.search(r"^apache-airflow==(\S+)$", (REPO / "requirements.txt").read_text(), re.M)
    assert pinned is not None
    base = re.search(r"^FROM apache/airflow:(\S+?)-python", (REPO / "Dockerfile").read_text(), re.M)
    assert base is not None and base.group(1) == pinned.group(1)
    mlflow = re.search(r"^mlflow==(\S+)$", (REPO / "requirements.txt").read_text(), re.M)
    assert (
        mlflow is not None
        and f"mlflow[auth]=={mlflow.group(1)}" in (REPO / "deploy/mlflow/Dockerfile").read_text()
    )


def test_ports_are_published_on_loopback_only_and_volumes_are_declared(compose: dict[str, Any]) -> None:
    declared = set(compose["volumes"])
    used = set()
    for name, service in services(compose).items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name}: {port} must bind 127.0.0.1"
        for volume in service.get("volumes", []):
            source = str(volume).split(":")[0]
            if not source.startswith((".", "/")):
                assert source in declared, (name, source)
                used.add(source)
    assert used == declared, f"declared but unused volumes: {declared - used}"


def test_every_long_running_service_has_a_health_check_and_waits_on_its_dependencies(
    compose: dict[str, Any],
) -> None:
    all_services = services(compose)
    for name, service in all_services.items():
        if name not in ONE_SHOT:
            assert "healthcheck" in service, f"{name} has no health check"
        for dependency, condition in (service.get("depends_on") or {}).items():
            assert dependency in all_services, (name, dependency)
            assert condition["condition"] in ("service_healthy", "service_completed_successfully"), name


def test_the_stack_is_celery_with_every_airflow_component(compose: dict[str, Any]) -> None:
    all_services = services(compose)
    commands = {name: " ".join(map(str, s.get("command", []))) for name, s in all_services.items()}
    for component in ("api-server", "scheduler", "dag-processor", "triggerer", "celery worker"):
        assert any(component in c for c in commands.values()), component
    env = all_services["airflow-scheduler"]["environment"]
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert env["AIRFLOW__CORE__LOAD_EXAMPLES"] == "False"
    assert "redis" in env["AIRFLOW__CELERY__BROKER_URL"]
    assert all_services["fleet-simulator"]["profiles"] == ["demo"]
    lines = (REPO / "docker-compose.yaml").read_text().splitlines() + (
        REPO / "Dockerfile"
    ).read_text().splitlines()
    assert not [
        line for line in lines if "_PIP_ADDITIONAL_REQUIREMENTS" in line and not line.lstrip().startswith("#")
    ]


def test_secrets_come_from_env_and_every_variable_is_in_the_example(compose: dict[str, Any]) -> None:
    text = (REPO / "docker-compose.yaml").read_text()
    referenced = set(re.findall(r"(?<!\$)\$\{([A-Z0-9_]+)\}", text))  # $${X} is the container's own
    example = {
        line.split("=", 1)[0]
        for line in (REPO / ".env.example").read_text().splitlines()
        if re.match(r"^[A-Z]", line)
    }
    assert referenced <= example, f"missing in .env.example: {referenced - example}"
    assert not (REPO / ".env").exists() or ".env" in (REPO / ".gitignore").read_text().split()
    assert re.search(r"password\s*[:=]\s*['\"]?(?!\$\{)[A-Za-z0-9]", text, re.I) is None, "a literal secret"


def test_mlflow_accepts_the_host_name_airflow_uses_and_requires_a_login() -> None:
    entrypoint = (REPO / "deploy/mlflow/entrypoint.sh").read_text()
    assert "--allowed-hosts" in entrypoint and "mlflow:5000" in entrypoint
    assert "--app-name basic-auth" in entrypoint
