"""The Keras 3 quantile LSTM: windows in, quantiles of the mean load per horizon out.

Quantiles cannot cross by construction: the head predicts the median and non-negative increments (softplus)
for each higher quantile, so P90 >= P50 holds for every input, trained or not. The custom pieces are
registered Keras objects, so a saved model loads again without ``safe_mode=False``. Imports TensorFlow: load
this module only inside tasks.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ start-up chatter, not errors

from typing import TYPE_CHECKING, Any

import keras
import numpy as np
from keras import layers, ops

from slicewise.forecasting.windows import FEATURES

if TYPE_CHECKING:
    from slicewise.forecasting.spec import ForecasterSpec


@keras.saving.register_keras_serializable(package="slicewise")
class MonotoneQuantiles(layers.Layer):
    """(batch, features) -> (batch, horizons, quantiles), non-decreasing along the quantile axis."""

    def __init__(self, horizons: int, quantiles: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.horizons, self.quantiles = horizons, quantiles
        self.median = layers.Dense(horizons, name="median")
        self.steps = layers.Dense(horizons * max(quantiles - 1, 1), activation="softplus", name="steps")

    def build(self, input_shape: Any) -> None:
        self.median.build(input_shape)
        self.steps.build(input_shape)

    def call(self, hidden: Any, anchor: Any = None) -> Any:
        median = ops.reshape(self.median(hidden), (-1, self.horizons, 1))
        if anchor is not None:  # residual: the head learns a correction to the anchor, not the level itself
            median = median + ops.reshape(anchor, (-1, 1, 1))
        if self.quantiles == 1:
            return median
        steps = ops.reshape(self.steps(hidden), (-1, self.horizons, self.quantiles - 1))
        return ops.concatenate([median, median + ops.cumsum(steps, axis=-1)], axis=-1)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "horizons": self.horizons, "quantiles": self.quantiles}


@keras.saving.register_keras_serializable(package="slicewise")
class LastStep(layers.Layer):
    """(batch, time, units) -> (batch, 1, units): the newest step, used as the attention query."""

    def call(self, sequence: Any) -> Any:
        return sequence[:, -1:, :]


@keras.saving.register_keras_serializable(package="slicewise")
class LastValueOf(layers.Layer):
    """(batch, time, features) -> (batch, 1): one feature at the newest step."""

    def __init__(self, feature: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.feature = feature

    def call(self, window: Any) -> Any:
        return window[:, -1, self.feature : self.feature + 1]

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "feature": self.feature}


@keras.saving.register_keras_serializable(package="slicewise")
class PinballLoss(keras.losses.Loss):
    """Mean pinball (quantile) loss over horizons and quantiles; ``y_pred`` is (batch, horizons, quantiles)."""

    def __init__(self, quantiles: tuple[float, ...] | list[float], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.levels = tuple(float(q) for q in quantiles)

    def call(self, y_true: Any, y_pred: Any) -> Any:
        levels = ops.convert_to_tensor(np.asarray(self.levels, dtype="float32"))
        error = ops.expand_dims(ops.cast(y_true, "float32"), -1) - y_pred
        return ops.mean(ops.maximum(levels * error, (levels - 1.0) * error), axis=(-2, -1))

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "quantiles": list(self.levels)}


def build_model(spec: ForecasterSpec) -> keras.Model:
    """A compiled model for ``spec``: input (window_steps, len(FEATURES)), output (horizons, quantiles)."""
    arch = spec.architecture
    inputs = keras.Input(shape=(spec.window_steps, len(FEATURES)), name="window")
    if arch.kind == "lstm_attention":
        sequence = layers.LSTM(arch.lstm_units, return_sequences=True, name="lstm")(inputs)
        # The newest step queries every step: lets the model look back at earlier peaks in its window.
        query = LastStep(name="last_step")(sequence)
        context = layers.Attention(name="attention")([query, sequence])
        hidden = layers.Flatten()(layers.Concatenate()([query, context]))
    else:
        hidden = layers.LSTM(arch.lstm_units, name="lstm")(inputs)
    hidden = layers.Dropout(arch.dropout)(hidden)
    # ELU, not ReLU: small heads with dead ReLU units collapse to one forecast for every input.
    hidden = layers.Dense(arch.dense_units, activation="elu", name="dense")(hidden)
    # Anchored on the last hour's mean load: the strongest simple forecast is where the model starts.
    anchor = LastValueOf(FEATURES.index("hour_mean"), name="anchor")(inputs)
    outputs = MonotoneQuantiles(len(spec.horizons_minutes), len(spec.quantiles), name="quantiles")(
        hidden, anchor
    )
    model = keras.Model(inputs, outputs, name=spec.name)
    model.compile(
        optimizer=keras.optimizers.Adam(spec.training.learning_rate), loss=PinballLoss(spec.quantiles)
    )
    return model


def predict(model: keras.Model, inputs: np.ndarray, batch_size: int = 4096) -> np.ndarray:
    """(n, horizons, quantiles) float64 predictions; empty input gives an empty result."""
    if len(inputs) == 0:
        return np.empty((0, *(int(d) for d in model.output_shape[1:])))
    return np.asarray(model.predict(inputs, batch_size=batch_size, verbose=0), dtype=np.float64)
