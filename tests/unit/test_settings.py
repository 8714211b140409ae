"""Settings: defaults, then environment, then Variable and Params layers."""

from __future__ import annotations

from pathlib import Path

import pytest

from slicewise.settings import SettingsError, load_settings


def test_defaults_come_from_the_shipped_yaml_and_storage_defaults_to_the_home_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SLICEWISE_HOME", str(tmp_path))
    settings = load_settings(environ={})
    assert settings.step_s == 60
    assert settings.prometheus_conn_id == "prometheus_default"
    assert settings.storage_root == (tmp_path / "store").as_uri()


def test_environment_overrides_defaults_and_later_layers_override_the_environment() -> None:
    env = {"SLICEWISE_STEP_S": "30", "SLICEWISE_MIN_COMPLETENESS": "0.5"}
    settings = load_settings({"min_completeness": 0.8}, None, {"min_completeness": "0.9"}, environ=env)
    assert settings.step_s == 30
    assert settings.min_completeness == pytest.approx(0.9)


def test_unknown_setting_is_named_in_the_error() -> None:
    with pytest.raises(SettingsError, match=r"unknown setting.*stepp_s"):
        load_settings({"stepp_s": 10}, environ={})


def test_wrongly_typed_value_is_a_clear_error() -> None:
    with pytest.raises(SettingsError, match="step_s='often' is not a valid int"):
        load_settings({"step_s": "often"}, environ={})
    with pytest.raises(SettingsError, match="not a whole number"):
        load_settings({"step_s": 1.5}, environ={})
