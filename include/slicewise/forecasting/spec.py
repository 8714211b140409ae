"""Model specs: one YAML file per registered forecasting model in ``models/``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from slicewise.errors import PermanentError

MODELS_DIR = Path(__file__).resolve().parents[3] / "models"


class SpecError(PermanentError, ValueError):
    """A model spec is missing a key or has an impossible value; the message names the file and key."""


@dataclass(frozen=True)
class Architecture:
    kind: str
    lstm_units: int
    dense_units: int
    dropout: float
    #: Networks in one registered model, each trained with its own seed, combined per quantile by the median.
    members: int = 1
    #: Steps of the window each member reads, newest last (one per member; empty: every member the whole window).
    #: Members that look back over different spans disagree more than members that differ only by seed.
    member_window_steps: tuple[int, ...] = ()
    #: Simple forecasts the head may mix besides those of the window's last hour (:data:`EXTRA_ANCHORS`, in this
    #: order); key ``extra_anchors``, default none.
    extra_anchors: tuple[str, ...] = ()


@dataclass(frozen=True)
class Training:
    learning_rate: float
    batch_size: int
    epochs_per_update: int
    time_budget_s: float
    window_stride: int
    replay_ratio: float
    max_windows: int


@dataclass(frozen=True)
class Promotion:
    metric: str
    horizon_minutes: int
    margin: float


@dataclass(frozen=True)
class ForecasterSpec:
    name: str
    signal: str
    step_s: int
    window_steps: int
    min_observed_steps: int
    horizons_minutes: tuple[int, ...]
    quantiles: tuple[float, ...]
    architecture: Architecture
    training: Training
    promotion: Promotion
    #: How far each update moves the quantile calibration towards the newest hour's fit (0 = never calibrate;
    #: slicewise.forecasting.calibration). Optional in the YAML (key ``calibration_gain``), default 0.
    calibration_gain: float = 0.0
    #: Hours of the newest windows, pooled, that the calibration is fitted on (key ``calibration_hours``, default
    #: 1: the hour after training only; more reaches back into hours the model trained on).
    calibration_hours: int = 1
    #: A fitted log-factor within +-this counts as no correction: the update moves towards identity instead
    #: (key ``calibration_dead_band``, default 0: every fit counts).
    calibration_dead_band: float = 0.0
    #: Combine the calibrated quantiles with the window's simple forecasts (last value, the last hour's mean,
    #: EWMA and P90, zero), weighted per horizon and quantile by Hedge on the calibration hour
    #: (slicewise.forecasting.experts; key ``expert_mix``, default off) with this ``eta`` (key ``expert_eta``).
    expert_mix: bool = False
    expert_eta: float = 5.0
    #: How much of the experts' losses an update carries from the updates before (key ``expert_memory``, in
    #: [0, 1]; default 0: the weights follow the newest hour alone; 1: every hour alike).
    expert_memory: float = 0.0

    def horizon_steps(self) -> tuple[int, ...]:
        return tuple(max(1, round(minutes * 60 / self.step_s)) for minutes in self.horizons_minutes)

    @property
    def upper_quantile(self) -> float:
        return max(self.quantiles)


ARCHITECTURES = ("lstm", "lstm_attention")
#: Anchors a spec may add to the head's (``architecture.extra_anchors``): the fleet's mean load at the window's
#: end, which a quiet GPU's own history cannot give, and the peak of the whole window, not only of its last hour.
EXTRA_ANCHORS = ("fleet_load", "window_max")


def parse_spec(raw: dict[str, Any], source: str = "<spec>") -> ForecasterSpec:
    try:
        spec = ForecasterSpec(
            name=str(raw["name"]),
            signal=str(raw["signal"]),
            step_s=int(raw["step_s"]),
            window_steps=int(raw["window_steps"]),
            min_observed_steps=int(raw["min_observed_steps"]),
            horizons_minutes=tuple(int(h) for h in raw["horizons_minutes"]),
            quantiles=tuple(sorted(float(q) for q in raw["quantiles"])),
            architecture=_architecture(raw["architecture"]),
            training=Training(**raw["training"]),
            promotion=Promotion(**raw["promotion"]),
            calibration_gain=float(raw.get("calibration_gain", 0.0)),
            calibration_hours=int(raw.get("calibration_hours", 1)),
            calibration_dead_band=float(raw.get("calibration_dead_band", 0.0)),
            expert_mix=_flag(raw.get("expert_mix", False)),
            expert_eta=float(raw.get("expert_eta", 5.0)),
            expert_memory=float(raw.get("expert_memory", 0.0)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise SpecError(f"{source}: invalid or missing key: {exc}") from exc
    problems = []
    if spec.architecture.kind not in ARCHITECTURES:
        problems.append(f"architecture.kind must be one of {ARCHITECTURES}")
    if 0.5 not in spec.quantiles or not all(0 < q < 1 for q in spec.quantiles):
        problems.append("quantiles must lie in (0, 1) and include 0.5")
    if not 0 < spec.min_observed_steps <= spec.window_steps:
        problems.append("min_observed_steps must be in 1..window_steps")
    if not 1 <= spec.architecture.members <= 9:
        problems.append("architecture.members must be 1..9")
    window_steps = spec.architecture.member_window_steps
    if window_steps and len(window_steps) != spec.architecture.members:
        problems.append("architecture.member_window_steps must name one number of steps per member")
    if not all(spec.min_observed_steps <= steps <= spec.window_steps for steps in window_steps):
        problems.append("architecture.member_window_steps must each be in min_observed_steps..window_steps")
    extra = spec.architecture.extra_anchors
    if not set(extra) <= set(EXTRA_ANCHORS) or len(set(extra)) != len(extra):
        problems.append(
            f"architecture.extra_anchors must name each of {', '.join(EXTRA_ANCHORS)} at most once"
        )
    if not 0.0 <= spec.calibration_gain <= 1.0:
        problems.append("calibration_gain must lie in [0, 1]")
    if not 1 <= spec.calibration_hours <= 48:
        problems.append("calibration_hours must be 1..48")
    if not 0.0 <= spec.calibration_dead_band < 0.5:
        problems.append("calibration_dead_band must lie in [0, 0.5)")
    if not 0.0 <= spec.expert_eta <= 100.0:
        problems.append("expert_eta must lie in [0, 100]")
    if not 0.0 <= spec.expert_memory <= 1.0:
        problems.append("expert_memory must lie in [0, 1]")
    if spec.promotion.horizon_minutes not in spec.horizons_minutes:
        problems.append("promotion.horizon_minutes must be one of horizons_minutes")
    if problems:
        raise SpecError(f"{source}: " + "; ".join(problems))
    return spec


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expert_mix must be true or false, got {value!r}")
    return value


def _architecture(raw: dict[str, Any]) -> Architecture:
    return Architecture(
        **{
            **raw,
            "member_window_steps": tuple(int(n) for n in raw.get("member_window_steps", ())),
            "extra_anchors": tuple(str(name) for name in raw.get("extra_anchors", ())),
        }
    )


def load_specs(models_dir: Path = MODELS_DIR) -> list[ForecasterSpec]:
    """Every ``*.yaml`` spec in ``models_dir``, sorted by name."""
    specs = [
        parse_spec(yaml.safe_load(path.read_text()), str(path)) for path in sorted(models_dir.glob("*.yaml"))
    ]
    return sorted(specs, key=lambda spec: spec.name)
