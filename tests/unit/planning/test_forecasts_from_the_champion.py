"""The rollout's ``forecast`` step with a champion that cannot read today's windows: baseline, and the reason."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from slicewise import store
from slicewise.forecasting import forecasts as front_door
from slicewise.forecasting import registry
from slicewise.forecasting.windows import FEATURES
from slicewise.planning import steps as run
from slicewise.planning import storage
from slicewise.settings import load_settings
from slicewise.simulator.fleet import Fleet
from tests.support.partitions import publish_hour

keras = pytest.importorskip("keras")
FIRST = datetime(2026, 11, 23, 6, tzinfo=UTC)


def test_a_champion_reading_fewer_features_is_not_used_and_the_plan_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = store.storage_path(tmp_path.as_uri())
    for hour in range(3):
        publish_hour(root, Fleet.default(), FIRST + timedelta(hours=hour))
    settings = load_settings(environ={})
    older = keras.Sequential(
        [keras.Input((120, len(FEATURES) - 1)), keras.layers.LSTM(2), keras.layers.Dense(2)]
    )
    monkeypatch.setattr(registry, "load_champion", lambda uri, name: registry.Champion("7", older))
    folder = root / "plans" / "run"
    folder.mkdir(parents=True)

    trusted = front_door.Trust("champion", True, "champion beat the baselines", "7")
    path = run.make_forecasts(settings, root, folder, trusted, "http://unused")

    forecasts = storage.read_forecasts(path)
    assert forecasts.predictor == front_door.FALLBACK_BASELINE
    assert not forecasts.trusted
    assert "v7" in forecasts.why_untrusted and "features" in forecasts.why_untrusted
    assert forecasts.series  # the baseline still forecast every series
