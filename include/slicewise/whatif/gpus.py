"""Which catalogue GPU model each node of a trace is: the backtest's fleet, as the node list describes it.

A node list names its GPU models its own way. In order, the first rule that answers wins:

1. ``--gpu-model MODEL``: every GPU is that catalogue model (a what-if: "this workload on A100s");
2. ``--model-map NAME=MODEL``: the node list's ``NAME`` is catalogue ``MODEL``;
3. the name is a catalogue model, a GFD product label or a DCGM model name (``NVIDIA A100-SXM4-80GB``, what
   ``slicewise backtest --prometheus`` reads);
4. the Alibaba openb names, below (``V100M16`` is the 16 GB V100, ``V100M32`` the 32 GB one);
5. anything else (openb's anonymised ``G2``/``G3``, an empty cell) is **assumed to be a GPU without MIG** and
   modelled as ``UNNAMED`` (a T4: compute capability 7.5, so 48 MPS clients; no price of its own). Every
   model of 2023 but the A100/A30/H100 lacks MIG, so this is the likely reading; the report names each
   assumed model, and ``--model-map`` corrects it.

A model without MIG shares a GPU only by MPS / time-slicing; its nodes start and stay MIG-disabled.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from slicewise.catalog import Catalog, CatalogError, GpuModel

#: The Alibaba openb node list's model names (ATC'23 "Beware of Fragmentation", clusterdata cluster-trace-gpu-v2023).
OPENB_MODELS: Mapping[str, str] = {
    "P100": "P100-16GB",
    "T4": "T4-16GB",
    "V100M16": "V100-16GB",
    "V100M32": "V100-32GB",
    "A10": "A10-24GB",
}
UNNAMED = "T4-16GB"


@dataclass(frozen=True)
class FleetModels:
    """The node list's model names -> catalogue models, and the names that were assumed (rule 5)."""

    by_name: Mapping[str, GpuModel]
    assumed: tuple[str, ...]

    def of(self, name: str) -> GpuModel:
        return self.by_name[name]

    def notes(self) -> list[str]:
        mapped = ", ".join(f"{name or '(empty)'} -> {m.name}" for name, m in sorted(self.by_name.items()))
        out = [f"GPU models: {mapped}"]
        if self.assumed:
            names = ", ".join(n or "(empty)" for n in self.assumed)
            out.append(
                f"{names}: not a known model, assumed to be a GPU without MIG ({UNNAMED}); see --model-map"
            )
        return out


def parse_model_map(pairs: Iterable[str]) -> dict[str, str]:
    """``["G2=A100-80GB", ...]`` -> ``{"G2": "A100-80GB"}``; ValueError for a pair without ``=``."""
    out = {}
    for pair in pairs:
        name, sep, model = pair.partition("=")
        if not sep or not model.strip():
            raise ValueError(f"--model-map wants NAME=MODEL, got {pair!r}")
        out[name.strip()] = model.strip()
    return out


def resolve_models(
    names: Iterable[str],
    catalog: Catalog,
    override: str | None = None,
    mapping: Mapping[str, str] | None = None,
) -> FleetModels:
    """The catalogue model of every node-list model name; CatalogError for an override or map to no model."""
    mapping = dict(mapping or {})
    for wanted in ([override] if override else []) + list(mapping.values()):
        catalog.model(wanted)  # unknown -> CatalogError naming the known ones
    by_name: dict[str, GpuModel] = {}
    assumed: list[str] = []
    for name in sorted(set(names)):
        known = _known(name, catalog, override, mapping)
        if known is None:
            assumed.append(name)
        by_name[name] = known or catalog.model(UNNAMED)
    return FleetModels(by_name, tuple(assumed))


def _known(name: str, catalog: Catalog, override: str | None, mapping: Mapping[str, str]) -> GpuModel | None:
    if override:
        return catalog.model(override)
    if name in mapping:
        return catalog.model(mapping[name])
    try:
        return catalog.model(name)
    except CatalogError:
        pass
    for model in catalog.models.values():
        if name == model.dcgm_model_name:
            return model
    found = catalog.model_for_product(name) if name else None
    if found is not None:
        return found
    return catalog.model(OPENB_MODELS[name]) if name in OPENB_MODELS else None
