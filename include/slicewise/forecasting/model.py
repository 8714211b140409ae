"""The Keras 3 quantile LSTM: windows in, quantiles of the mean load per horizon out.

The LSTM reads the window scale-free (load features divided by the window's peak); the head forms each quantile
as a learned mix of simple forecasts read off the window (last value, the last hour's mean, EWMA, P90 and peak),
times a learned factor, so forecasts scale with the load. Quantiles cannot cross by construction (a running
maximum along the quantile axis), so P90 >= P50 holds for every input, trained or not. The custom pieces are
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

from slicewise.forecasting.experts import MIX_EXPERTS as EXPERTS
from slicewise.forecasting.spec import EXTRA_ANCHORS
from slicewise.forecasting.windows import FEATURES

if TYPE_CHECKING:
    from slicewise.forecasting.spec import ForecasterSpec


@keras.saving.register_keras_serializable(package="slicewise")
class MonotoneQuantiles(layers.Layer):
    """(batch, features) -> (batch, horizons, quantiles), non-decreasing along the quantile axis.

    The head of earlier versions (median anchored on the hour's mean plus softplus increments); no longer built,
    kept registered, with :class:`LastValueOf`, so versions registered with it still load.
    """

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
class LastSteps(layers.Layer):
    """(batch, time, features) -> (batch, steps, features): the newest ``steps`` of the window."""

    def __init__(self, steps: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.steps = steps

    def call(self, window: Any) -> Any:
        return window[:, -self.steps :, :]

    def compute_output_shape(self, input_shape: Any) -> Any:
        return (input_shape[0], self.steps, input_shape[2])

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "steps": self.steps}


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


#: The simple forecasts :class:`WindowAnchors` reads off a window, in this order; the head mixes them.
ANCHORS = ("last_value", "hour_mean", "hour_ewma", "hour_p90", "hour_max")
#: Anchors a quantile at or below the median may not use: the peaks set the upper quantiles only.
UPPER_ONLY = ("hour_max", "window_max")
_LOAD, _OBSERVED = FEATURES.index("load"), FEATURES.index("observed")
_FLEET = FEATURES.index("fleet_load")
_HOUR_MEAN, _HOUR_P90 = FEATURES.index("hour_mean"), FEATURES.index("hour_p90")
#: Features in load units, divided by the window's peak in :class:`ScaleFree`.
_LOAD_VALUED = (_LOAD, _HOUR_MEAN, _HOUR_P90)


@keras.saving.register_keras_serializable(package="slicewise")
class WindowAnchors(layers.Layer):
    """(batch, time, features) -> (batch, len(ANCHORS)): the simple forecasts a window gives, as of its end.

    The newest observed load (0 if none), the last hour's mean and P90 (the window's own features: the
    ``mean_last_hour`` and ``p90_last_hour`` baselines), an EWMA of span one hour over the window's observed
    steps (``ewma_last_hour`` up to the weight older than the window) and the last hour's peak; then each of
    ``extra`` (:data:`EXTRA_ANCHORS`), in its order. Reads only the window, so no anchor looks past its end. A
    layer saved before ``extra`` existed loads with none.
    """

    def __init__(self, hour_steps: int, extra: tuple[str, ...] | list[str] = (), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.hour_steps = int(hour_steps)
        self.extra = _checked_extra(extra)

    def call(self, window: Any) -> Any:
        load, observed = window[..., _LOAD], window[..., _OBSERVED]
        steps = ops.shape(window)[1]
        age = ops.cast(ops.flip(ops.arange(steps), axis=0), "float32")  # 0 at the newest step
        newest = ops.argmax(observed * (ops.cast(steps, "float32") - age), axis=-1)
        last = ops.take_along_axis(load, ops.expand_dims(newest, -1), axis=-1)
        weights = observed * ops.power(1.0 - 2.0 / (self.hour_steps + 1.0), age)
        ewma = ops.sum(weights * load, axis=-1, keepdims=True) / (
            ops.sum(weights, axis=-1, keepdims=True) + 1e-9
        )
        in_hour = ops.cast(age < self.hour_steps, "float32")
        peak = ops.max(load * observed * in_hour, axis=-1, keepdims=True)
        newest_step = window[:, -1, :]
        mean, p90 = newest_step[:, _HOUR_MEAN : _HOUR_MEAN + 1], newest_step[:, _HOUR_P90 : _HOUR_P90 + 1]
        extra = {
            "fleet_load": lambda: newest_step[:, _FLEET : _FLEET + 1],
            "window_max": lambda: ops.max(load * observed, axis=-1, keepdims=True),
        }
        return ops.concatenate(
            [last, mean, ewma, p90, peak, *(extra[name]() for name in self.extra)], axis=-1
        )

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "hour_steps": self.hour_steps, "extra": list(self.extra)}


def _checked_extra(extra: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    unknown = sorted(set(extra) - set(EXTRA_ANCHORS))
    if unknown:
        raise ValueError(f"unknown anchors {unknown}; known: {', '.join(EXTRA_ANCHORS)}")
    return tuple(str(name) for name in extra)


@keras.saving.register_keras_serializable(package="slicewise")
class ScaleFree(layers.Layer):
    """The window with its load-valued features divided by the window's peak load (plus ``floor``).

    A GPU at 2 % load and one at 60 % with the same shape of history look alike to the LSTM, so what it learns
    on busy hours carries over to quiet ones; the head puts the level back through the anchors. (A log-level
    input was tried: it helped on Philly's job starts and cost much more on the GenAI trough.)
    """

    def __init__(self, floor: float = 1e-3, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.floor = float(floor)

    def call(self, window: Any) -> Any:
        peak = ops.max(window[..., _LOAD] * window[..., _OBSERVED], axis=-1, keepdims=True)
        scale = ops.expand_dims(peak + self.floor, -1)  # (batch, 1, 1)
        columns = [
            window[..., i : i + 1] / scale if i in _LOAD_VALUED else window[..., i : i + 1]
            for i in range(len(FEATURES))
        ]
        return ops.concatenate(columns, axis=-1)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "floor": self.floor}


@keras.saving.register_keras_serializable(package="slicewise")
class AnchoredQuantiles(layers.Layer):
    """(hidden, anchors) -> (batch, horizons, quantiles): each quantile a learned mix of anchors, rescaled.

    Per horizon and quantile: a softmax gate over the anchors times a factor in [e^-2, e^2], both functions
    of the (scale-free) hidden state, so the forecast scales with the load: no additive term learned on busy
    hours to misplace on quiet ones. At initialisation the median sits on the hour's EWMA and higher quantiles
    on its P90 (the strongest simple forecasts), and training learns when to lean elsewhere. The median may
    not use ``UPPER_ONLY`` anchors. A running maximum along the quantile axis keeps quantiles from crossing
    for every input, trained or not.
    """

    def __init__(
        self,
        horizons: int,
        levels: tuple[float, ...] | list[float],
        extra: tuple[str, ...] | list[str] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.horizons, self.levels = int(horizons), tuple(float(q) for q in levels)
        self.extra = _checked_extra(extra)
        self.names = ANCHORS + self.extra
        cells, n_anchors = self.horizons * len(self.levels), len(self.names)
        bias = np.zeros((self.horizons, len(self.levels), n_anchors), dtype="float32")
        self.mask = np.zeros((1, 1, len(self.levels), n_anchors), dtype="float32")
        for j, q in enumerate(self.levels):
            bias[:, j, self.names.index("hour_p90" if q > 0.5 else "hour_ewma")] = 3.0
            if q <= 0.5:
                self.mask[..., j, [i for i, name in enumerate(self.names) if name in UPPER_ONLY]] = -1e9
        small = keras.initializers.RandomNormal(stddev=0.01)
        self.gate = layers.Dense(
            cells * n_anchors,
            kernel_initializer=small,
            bias_initializer=keras.initializers.Constant(bias.reshape(-1)),
            name="gate",
        )
        self.factor = layers.Dense(cells, kernel_initializer=small, name="factor")

    def build(self, hidden_shape: Any, anchors_shape: Any = None) -> None:
        self.gate.build(hidden_shape)
        self.factor.build(hidden_shape)

    def call(self, hidden: Any, anchors: Any) -> Any:
        shape = (-1, self.horizons, len(self.levels))
        logits = ops.reshape(self.gate(hidden), (*shape, len(self.names))) + ops.convert_to_tensor(self.mask)
        mixed = ops.sum(
            ops.softmax(logits, axis=-1) * ops.reshape(anchors, (-1, 1, 1, len(self.names))), axis=-1
        )
        raw = mixed * ops.exp(2.0 * ops.tanh(ops.reshape(self.factor(hidden), shape)))
        out = [raw[..., 0]]
        for j in range(1, len(self.levels)):
            out.append(ops.maximum(out[-1], raw[..., j]))
        return ops.stack(out, axis=-1)

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "horizons": self.horizons,
            "levels": list(self.levels),
            "extra": list(self.extra),
        }


@keras.saving.register_keras_serializable(package="slicewise")
class Calibration(layers.Layer):
    """(batch, horizons, quantiles) -> the same, each (horizon, quantile) times ``exp(log_factor)``, quantiles
    kept from crossing. The factors are not trained: :func:`set_calibration` writes the ones
    :mod:`slicewise.forecasting.calibration` fitted, so they are saved and loaded with the model version."""

    def __init__(self, horizons: int, quantiles: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.horizons, self.quantiles = int(horizons), int(quantiles)

    def build(self, input_shape: Any) -> None:
        self.log_factors = self.add_weight(
            shape=(self.horizons, self.quantiles), initializer="zeros", trainable=False, name="log_factors"
        )

    def call(self, quantiles: Any) -> Any:
        scaled = quantiles * ops.exp(ops.expand_dims(self.log_factors, 0))
        out = [scaled[..., 0]]
        for j in range(1, self.quantiles):
            out.append(ops.maximum(out[-1], scaled[..., j]))
        return ops.stack(out, axis=-1)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "horizons": self.horizons, "quantiles": self.quantiles}


CALIBRATION = "calibration"


def with_calibration(model: keras.Model) -> keras.Model:
    """``model`` ending in a :class:`Calibration` layer (added at identity to a version registered without
    one), compiled as built models are."""
    if has_calibration(model):
        return model
    horizons, quantiles = (int(d) for d in model.output_shape[1:])
    return _ending_in(model, Calibration(horizons, quantiles, name=CALIBRATION)(model.output))


def _ending_in(model: keras.Model, outputs: Any) -> keras.Model:
    """``model`` with ``outputs`` (built on its output) as its new end, compiled as ``model`` was."""
    extended = keras.Model(model.inputs, outputs, name=model.name)
    optimizer = getattr(model, "optimizer", None) or "adam"
    loss = getattr(model, "loss", None)
    if loss is not None:  # a compiled model stays trainable as it was
        extended.compile(optimizer=optimizer, loss=loss)
    return extended


def has_calibration(model: keras.Model) -> bool:
    return any(isinstance(layer, Calibration) for layer in model.layers)


def set_calibration(model: keras.Model, log_factors: np.ndarray) -> None:
    """Write (horizons, quantiles) log-factors into the model's :class:`Calibration` layer (0 = identity)."""
    layer = next(layer for layer in model.layers if isinstance(layer, Calibration))
    layer.log_factors.assign(np.asarray(log_factors, dtype="float32"))


def calibration_of(model: keras.Model) -> np.ndarray:
    """The model's (horizons, quantiles) log-factors (zeros when it has no calibration layer)."""
    for layer in model.layers:
        if isinstance(layer, Calibration):
            return np.asarray(layer.log_factors.numpy(), dtype=np.float64)
    return np.zeros(tuple(int(d) for d in model.output_shape[1:]))


def identity_calibration(model: keras.Model) -> np.ndarray:
    """Zero log-factors of the shape of the model's calibration (horizons, quantiles)."""
    return np.zeros_like(calibration_of(model))


EXPERT_MIX = "experts"


@keras.saving.register_keras_serializable(package="slicewise")
class ExpertMix(layers.Layer):
    """[(batch, horizons, quantiles), (batch, anchors)] -> (batch, horizons, quantiles): per horizon and quantile,
    a weighted sum of the model's quantile and the window's simple forecasts (:data:`EXPERTS`), quantiles kept
    from crossing. The weights are not trained: :func:`set_expert_weights` writes the ones
    :func:`slicewise.forecasting.training.mix_experts` fitted, so they are saved and loaded with the model
    version; all on the model (identity) until then."""

    def __init__(self, horizons: int, quantiles: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.horizons, self.quantiles = int(horizons), int(quantiles)

    def build(self, input_shape: Any) -> None:
        self.mix = self.add_weight(
            shape=(self.horizons, self.quantiles, len(EXPERTS)),
            initializer=keras.initializers.Constant(0.0),
            trainable=False,
            name="weights",
        )
        self.mix.assign(identity_mix(self.horizons, self.quantiles))
        # The experts' mean losses so far and the (discounted) windows behind them, carried from update to
        # update (training.mix_experts): NaN and 0 until the first fit.
        self.loss_mean = self.add_weight(
            shape=(self.horizons, self.quantiles, len(EXPERTS)),
            initializer=keras.initializers.Constant(float("nan")),
            trainable=False,
            name="loss_mean",
        )
        self.loss_windows = self.add_weight(
            shape=(self.horizons, self.quantiles, len(EXPERTS)),
            initializer="zeros",
            trainable=False,
            name="loss_windows",
        )

    @staticmethod
    def experts(quantiles: Any, anchors: Any) -> Any:
        """(batch, horizons, quantiles, experts): the model's quantiles, then each simple forecast of the window
        (the anchors' first columns, and zero) for every horizon and quantile."""
        points = ops.concatenate([anchors[:, : len(EXPERTS) - 2], ops.zeros_like(anchors[:, :1])], axis=-1)
        spread = ops.ones_like(quantiles)[..., None] * points[:, None, None, :]
        return ops.concatenate([quantiles[..., None], spread], axis=-1)

    def call(self, inputs: Any) -> Any:
        mixed = ops.sum(self.experts(*inputs) * self.mix, axis=-1)
        out = [mixed[..., 0]]
        for j in range(1, self.quantiles):
            out.append(ops.maximum(out[-1], mixed[..., j]))
        return ops.stack(out, axis=-1)

    def compute_output_shape(self, input_shape: Any) -> Any:
        return tuple(input_shape[0])

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "horizons": self.horizons, "quantiles": self.quantiles}


def identity_mix(horizons: int, quantiles: int) -> np.ndarray:
    """(horizons, quantiles, experts) weights all on the model."""
    weights = np.zeros((horizons, quantiles, len(EXPERTS)), dtype="float32")
    weights[..., 0] = 1.0
    return weights


def with_expert_mix(model: keras.Model, spec: ForecasterSpec) -> keras.Model:
    """``model`` ending in an :class:`ExpertMix` (added at identity to a version registered without one),
    compiled as built models are."""
    if has_expert_mix(model):
        return model
    horizons, quantiles = (int(d) for d in model.output_shape[1:])
    anchors = WindowAnchors(_hour_steps(spec), name="expert_anchors")(model.inputs[0])
    return _ending_in(model, ExpertMix(horizons, quantiles, name=EXPERT_MIX)([model.output, anchors]))


def has_expert_mix(model: keras.Model) -> bool:
    return any(isinstance(layer, ExpertMix) for layer in model.layers)


def _expert_mix(model: keras.Model) -> ExpertMix:
    layer = next((layer for layer in model.layers if isinstance(layer, ExpertMix)), None)
    if layer is None:
        raise ValueError(f"{model.name} has no expert mix")
    return layer


def set_expert_weights(model: keras.Model, weights: np.ndarray) -> None:
    """Write (horizons, quantiles, experts) weights into the model's :class:`ExpertMix`."""
    _expert_mix(model).mix.assign(np.asarray(weights, dtype="float32"))


def expert_weights_of(model: keras.Model) -> np.ndarray | None:
    """The model's (horizons, quantiles, experts) weights, or None without an expert mix."""
    if not has_expert_mix(model):
        return None
    return np.asarray(_expert_mix(model).mix.numpy(), dtype=np.float64)


def expert_memory_of(model: keras.Model) -> tuple[np.ndarray, np.ndarray]:
    """The experts' carried mean losses and windows, each (horizons, quantiles, experts), of the model's
    :class:`ExpertMix`."""
    layer = _expert_mix(model)
    return (
        np.asarray(layer.loss_mean.numpy(), dtype=np.float64),
        np.asarray(layer.loss_windows.numpy(), dtype=np.float64),
    )


def set_expert_memory(model: keras.Model, mean: np.ndarray, windows: np.ndarray) -> None:
    """Write the experts' carried mean losses and windows into the model's :class:`ExpertMix`."""
    layer = _expert_mix(model)
    layer.loss_mean.assign(np.asarray(mean, dtype="float32"))
    layer.loss_windows.assign(np.asarray(windows, dtype="float32"))


def expert_forecasts(model: keras.Model, inputs: np.ndarray, batch_size: int = 4096) -> np.ndarray:
    """(n, horizons, quantiles, experts): what each expert of the model's :class:`ExpertMix` forecasts for
    ``inputs`` (:meth:`ExpertMix.experts`: the model's calibrated quantiles, then the window's simple forecasts)."""
    layer = _expert_mix(model)
    if len(inputs) == 0:
        return np.empty((0, layer.horizons, layer.quantiles, len(EXPERTS)))
    calibrated, anchors = keras.Model(model.inputs, layer.input).predict(
        inputs, batch_size=batch_size, verbose=0
    )
    return np.asarray(ops.convert_to_numpy(ExpertMix.experts(calibrated, anchors)), dtype=np.float64)


def _hour_steps(spec: ForecasterSpec) -> int:
    return min(spec.window_steps, max(1, 3600 // spec.step_s))


@keras.saving.register_keras_serializable(package="slicewise")
class MemberMedian(layers.Layer):
    """[(batch, horizons, quantiles)] x members -> their median per horizon and quantile. The median of
    non-crossing members does not cross: it is monotone in each member."""

    def call(self, members: Any) -> Any:
        return ops.median(ops.stack(members, axis=1), axis=1)

    def compute_output_shape(self, input_shape: Any) -> Any:
        return tuple(input_shape[0])


MEMBER = "member_{}"


def build_model(spec: ForecasterSpec) -> keras.Model:
    """A compiled model for ``spec``: input (window_steps, len(FEATURES)), output (horizons, quantiles), ending
    in the calibration. With ``architecture.members`` > 1, that many networks (nested models ``member_i``, each
    with its own initial weights, each reading the newest ``architecture.member_window_steps[i]`` steps when
    given) combined per quantile by the median: one registered model, one signature."""
    inputs = keras.Input(shape=(spec.window_steps, len(FEATURES)), name="window")
    if spec.architecture.members == 1:
        raw = _network(spec, inputs)
    else:
        members = []
        lookbacks = spec.architecture.member_window_steps or (spec.window_steps,) * spec.architecture.members
        for index, lookback in enumerate(lookbacks):
            member_input = keras.Input(shape=(spec.window_steps, len(FEATURES)), name=f"window_{index}")
            member = keras.Model(
                member_input, _network(spec, member_input, lookback), name=MEMBER.format(index)
            )
            members.append(member(inputs))
        raw = MemberMedian(name="median")(members)
    # Identity until an update calibrates it on its newest windows (slicewise.forecasting.calibration).
    outputs = Calibration(len(spec.horizons_minutes), len(spec.quantiles), name=CALIBRATION)(raw)
    if spec.expert_mix:  # identity until an update fits its weights (training.mix_experts)
        anchors = WindowAnchors(_hour_steps(spec), name="expert_anchors")(inputs)
        outputs = ExpertMix(len(spec.horizons_minutes), len(spec.quantiles), name=EXPERT_MIX)(
            [outputs, anchors]
        )
    model = keras.Model(inputs, outputs, name=spec.name)
    model.compile(
        optimizer=keras.optimizers.Adam(spec.training.learning_rate), loss=PinballLoss(spec.quantiles)
    )
    return model


def ensemble_members(model: keras.Model) -> list[keras.Model]:
    """The member networks of an ensemble (each trains on its own), or [] for a single network."""
    return [layer for layer in model.layers if isinstance(layer, keras.Model)]


def _network(spec: ForecasterSpec, inputs: Any, lookback: int | None = None) -> Any:
    """One network from the window to uncalibrated quantiles (batch, horizons, quantiles); the LSTM reads the
    newest ``lookback`` steps (default: all), the head's anchors the whole window."""
    arch = spec.architecture
    seen = (
        inputs
        if lookback is None or lookback >= spec.window_steps
        else LastSteps(lookback, name="lookback")(inputs)
    )
    scaled = ScaleFree(name="scale_free")(seen)
    if arch.kind == "lstm_attention":
        sequence = layers.LSTM(arch.lstm_units, return_sequences=True, name="lstm")(scaled)
        # The newest step queries every step: lets the model look back at earlier peaks in its window.
        query = LastStep(name="last_step")(sequence)
        context = layers.Attention(name="attention")([query, sequence])
        hidden = layers.Flatten()(layers.Concatenate()([query, context]))
    else:
        hidden = layers.LSTM(arch.lstm_units, name="lstm")(scaled)
    hidden = layers.Dropout(arch.dropout)(hidden)
    # ELU, not ReLU: small heads with dead ReLU units collapse to one forecast for every input.
    hidden = layers.Dense(arch.dense_units, activation="elu", name="dense")(hidden)
    extra = arch.extra_anchors
    anchors = WindowAnchors(_hour_steps(spec), extra, name="anchors")(inputs)
    return AnchoredQuantiles(len(spec.horizons_minutes), spec.quantiles, extra, name="quantiles")(
        hidden, anchors
    )


def extra_anchors_of(model: keras.Model) -> set[tuple[str, ...]]:
    """The extra anchors of every network in ``model`` (one set entry each distinct; empty for no network)."""
    found: set[tuple[str, ...]] = set()
    for layer in model.layers:
        if isinstance(layer, AnchoredQuantiles):
            found.add(layer.extra)
        elif isinstance(layer, keras.Model):
            found |= extra_anchors_of(layer)
    return found


def why_not_trained_on(model: keras.Model, spec: ForecasterSpec) -> str | None:
    """Why an update may not continue training ``model`` (a champion) under ``spec``, or None if it may: it
    reads other input features than today's (:func:`reads_current_features`), or its head mixes other anchors
    than the spec's (:func:`has_the_specs_head`)."""
    if not reads_current_features(model):
        return f"reads {model.input_shape[-1]} features per step, this code {len(FEATURES)}"
    if not has_the_specs_head(model, spec):
        found = " / ".join(", ".join(extra) or "none" for extra in sorted(extra_anchors_of(model)))
        return f"mixes the extra anchors {found}, the spec {', '.join(spec.architecture.extra_anchors) or 'none'}"
    return None


def has_the_specs_head(model: keras.Model, spec: ForecasterSpec) -> bool:
    """Whether every network in ``model`` mixes the anchors ``spec`` names: a version registered under other
    ``architecture.extra_anchors`` keeps its own head if trained on, so an update sets it aside instead. A model
    with no anchored head (the earlier head, still loadable) has none, as a spec without extra anchors."""
    return (extra_anchors_of(model) or {()}) == {spec.architecture.extra_anchors}


def reads_current_features(model: keras.Model) -> bool:
    """Whether ``model`` reads windows of today's :data:`FEATURES`.

    A version registered before a feature was added reads fewer per step: it can neither be scored on today's
    windows nor continue training on them, so it is set aside rather than fed inputs it was not built for.
    """
    return int(model.input_shape[-1]) == len(FEATURES)


def predict(model: keras.Model, inputs: np.ndarray, batch_size: int = 4096) -> np.ndarray:
    """(n, horizons, quantiles) float64 predictions; empty input gives an empty result."""
    if len(inputs) == 0:
        return np.empty((0, *(int(d) for d in model.output_shape[1:])))
    return np.asarray(model.predict(inputs, batch_size=batch_size, verbose=0), dtype=np.float64)
