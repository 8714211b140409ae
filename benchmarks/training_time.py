"""Benchmark: one incremental hourly forecaster update for 1,000 and 10,000 simulated GPUs.

    .venv/bin/python benchmarks/training_time.py [--gpus 1000 10000] [--hours 4]
        [--members 3 --member-window-steps 120 60 30] [--expert-mix 5]

Each size runs in a child process (its own peak memory, read from VmHWM): simulate `--hours` of the synthetic
fleet, build the panel, then time `hourly_update` end to end (train from scratch, evaluate against the
baselines, log and register in a local SQLite MLflow, gate). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

START_S = 1_763_971_200  # 2025-11-24 08:00 UTC, a Monday


def peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child(
    n_gpus: int, hours: int, workdir: str, members: int | None, spans: list[int] | None, mix: float | None
) -> None:
    import dataclasses

    import numpy as np

    from slicewise.forecasting.spec import load_specs
    from slicewise.forecasting.steps import hourly_update
    from slicewise.forecasting.windows import panel_from_frame
    from slicewise.simulator.fleet import Fleet
    from slicewise.simulator.frames import gpu_samples

    spec = load_specs()[0]
    architecture = spec.architecture
    if members is not None:
        architecture = dataclasses.replace(architecture, members=members)
    if spans is not None:
        architecture = dataclasses.replace(architecture, member_window_steps=tuple(spans))
    spec = dataclasses.replace(spec, architecture=architecture)
    if mix is not None:
        spec = dataclasses.replace(spec, expert_mix=True, expert_eta=mix)
    fleet = Fleet.synthetic(n_gpus, seed=11)
    began = time.perf_counter()
    frame = gpu_samples(fleet, np.arange(START_S, START_S + hours * 3600, spec.step_s))
    panel = panel_from_frame(frame, spec.signal, spec.step_s)
    del frame
    prepared = time.perf_counter() - began
    began = time.perf_counter()
    result = hourly_update(
        spec,
        panel,
        tracking_uri=f"sqlite:///{workdir}/mlflow.db",
        experiment="bench",
        tags={"benchmark": "training_time"},
    )
    print(
        json.dumps(
            {
                "series": len(panel.keys),
                "prepare_s": prepared,
                "update_s": time.perf_counter() - began,
                "peak_rss_mib": peak_rss_mib(),
                "promoted": result["promoted"],
                "reason": result["reason"],
            }
        )
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--gpus", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--hours", type=int, default=4)
    parser.add_argument("--members", type=int, default=None, help="ensemble members (default: the spec's)")
    parser.add_argument(
        "--member-window-steps",
        type=int,
        nargs="+",
        default=None,
        help="each member's span (default: the spec's)",
    )
    parser.add_argument(
        "--expert-mix",
        type=float,
        default=None,
        metavar="ETA",
        help="turn the spec's expert_mix on with this eta",
    )
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(
            int(args.child[0]),
            int(args.child[1]),
            args.child[2],
            args.members,
            args.member_window_steps,
            args.expert_mix,
        )
        return 0
    passed = []  # the spec overrides, handed on to each child
    if args.members is not None:
        passed += ["--members", str(args.members)]
    if args.member_window_steps is not None:
        passed += ["--member-window-steps", *map(str, args.member_window_steps)]
    if args.expert_mix is not None:
        passed += ["--expert-mix", str(args.expert_mix)]
    for n_gpus in args.gpus:
        with tempfile.TemporaryDirectory(prefix="slicewise-train-bench-") as tmp:
            # cwd: MLflow on a bare SQLite URI puts artifacts under ./mlruns, which must not land in the checkout.
            run = subprocess.run(
                [
                    sys.executable,
                    str(Path(__file__).resolve()),
                    *passed,
                    "--child",
                    str(n_gpus),
                    str(args.hours),
                    tmp,
                ],
                cwd=tmp,
                capture_output=True,
                text=True,
                check=False,
            )
        if run.returncode != 0:
            print(f"{n_gpus} GPUs: failed\n{run.stderr[-2000:]}")
            continue
        figures = json.loads(run.stdout.strip().splitlines()[-1])
        print(
            f"{n_gpus:>6} GPUs ({figures['series']:>6} series, {args.hours} h): hourly update "
            f"{figures['update_s']:6.1f} s, peak RSS {figures['peak_rss_mib']:,.0f} MiB "
            f"[simulating the history took {figures['prepare_s']:.0f} s]; gate: {figures['reason']}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
