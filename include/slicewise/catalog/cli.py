"""``slicewise catalog render [--check]`` and ``slicewise catalog layouts MODEL [--maximal]``.

Exit codes: 0 done / up to date, 1 ``--check`` found stale files, 2 bad input (one ``error:`` line on stderr).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from slicewise.catalog.render import K8S_DIR


def register(subparsers: Any) -> None:
    """Add ``catalog`` (with ``render`` and ``layouts``) to the main CLI's sub-parsers."""
    catalog = subparsers.add_parser(
        "catalog", help="the MIG/MPS catalogue: generated k8s files, valid layouts"
    )
    commands = catalog.add_subparsers(dest="catalog_command", required=True)

    render = commands.add_parser(
        "render", help="write include/k8s/mig-parted-config.yaml and device-plugin-config.yaml"
    )
    render.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file is stale")
    render.add_argument("--k8s-dir", type=Path, default=K8S_DIR, help=f"output folder (default {K8S_DIR})")
    render.set_defaults(func=run_render)

    layouts = commands.add_parser("layouts", help="list the valid MIG layouts of one GPU of a model")
    layouts.add_argument("model", help="a model of include/config/gpu_models.yaml, e.g. A100-80GB")
    layouts.add_argument("--maximal", action="store_true", help="only layouts no instance can be added to")
    layouts.set_defaults(func=run_layouts)


def run_render(args: argparse.Namespace) -> int:
    """Write the generated files, or with ``--check`` report the stale ones; returns the exit code."""
    from slicewise.catalog import CatalogError, load_catalog
    from slicewise.catalog.render import stale_files, write_rendered

    try:
        catalog = load_catalog()
        if args.check:
            stale = stale_files(catalog, args.k8s_dir)
            for path in stale:
                print(f"stale: {path} (run `slicewise catalog render`)")
            if not stale:
                print("generated k8s files are up to date")
            return 1 if stale else 0
        for path in write_rendered(catalog, args.k8s_dir):
            print(f"wrote {path}")
    except (CatalogError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def run_layouts(args: argparse.Namespace) -> int:
    """Print one valid layout per line, with the config name that gives it, if any."""
    from slicewise.catalog import CatalogError, describe_layout, load_catalog, valid_layouts

    try:
        catalog = load_catalog()
        model = catalog.model(args.model)
    except CatalogError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    found = valid_layouts(model, maximal_only=args.maximal)
    # Largest layouts first: the ones a planner considers most.
    found.sort(key=lambda lay: (-sum(model.profiles[p].g * c for p, c in lay), describe_layout(lay)))
    width = max(len(describe_layout(lay)) for lay in found)
    for lay in found:
        name = catalog.config_named_for(model.name, lay) or ""
        print(f"{describe_layout(lay):<{width}}  {name}".rstrip())
    kind = "maximal layouts" if args.maximal else "valid layouts (MIG enabled)"
    print(f"{len(found)} {kind} of one {model.name}", file=sys.stderr)
    return 0
