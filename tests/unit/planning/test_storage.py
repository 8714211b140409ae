"""What a planning run writes between its tasks reads back as it was written."""

from __future__ import annotations

from pathlib import Path

from slicewise import store
from slicewise.forecasting.forecasts import DemandForecast, Forecasts, SeriesForecast
from slicewise.planning import storage


def test_forecasts_read_back_with_the_pending_pods_model_and_label_pins(tmp_path: Path) -> None:
    folder = store.storage_path(tmp_path.as_uri()) / "plans" / "run"
    folder.mkdir(parents=True)
    written = Forecasts(
        series=(SeriesForecast("n1", 0, "", "", 0.25, 0.5, 0.1),),
        demand=(
            DemandForecast("nvidia.com/gpu", 1.0, 2.0, share=0.5, models=("A100-80GB",)),
            DemandForecast(
                "slicewise.io/whole-gpus", 1.0, 1.0, 1.0, 2, node_selector=(("pool", ("a", "b")),)
            ),
        ),
        predictor="p90_last_hour",
        trusted=True,
    )
    assert storage.read_forecasts(storage.write_forecasts(folder, written)) == written
