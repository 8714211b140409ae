"""The MIG/MPS catalogue (slicewise.catalog): layout validity, named configs, look-ups and resource maths.

Sources: NVIDIA's MIG User Guide, supported-mig-profiles.html; gpu-operator
``assets/state-mig-manager/0400_configmap.yaml``; mig-parted ``pkg/mig/builder/balanced.go``; k8s-device-plugin
``api/config/v1``.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
import yaml

from slicewise.catalog import (
    Catalog,
    CatalogError,
    GpuModel,
    Layout,
    MigProfile,
    composition_name,
    compute_share,
    describe_layout,
    gpus_capacity,
    is_maximal,
    is_valid_layout,
    layout,
    layout_capacity,
    layout_problems,
    load_catalog,
    parse_composition,
    place,
    resource_for_profile,
    valid_layouts,
)
from slicewise.cli import main
from slicewise.settings import CONFIG_DIR
from slicewise.simulator.fleet import load_config

MODELS = ["A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB", "A30-24GB"]
WITHOUT_MIG = ["T4-16GB", "V100-16GB", "V100-32GB", "P100-16GB", "A10-24GB"]
SEVEN_SLICE = ["A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB"]

# MIG User Guide, supported-mig-profiles.html: A100-40GB profile names -> the same geometry's names on the
# other 7-slice models.
RENAME = {
    "A100-40GB": {},
    "A100-80GB": {"1g.5gb": "1g.10gb", "1g.10gb": "1g.20gb", "2g.10gb": "2g.20gb", "3g.20gb": "3g.40gb",
                  "4g.20gb": "4g.40gb", "7g.40gb": "7g.80gb"},
    "H100-80GB": {"1g.5gb": "1g.10gb", "1g.10gb": "1g.20gb", "2g.10gb": "2g.20gb", "3g.20gb": "3g.40gb",
                  "4g.20gb": "4g.40gb", "7g.40gb": "7g.80gb"},
    "H200-141GB": {"1g.5gb": "1g.18gb", "1g.10gb": "1g.35gb", "2g.10gb": "2g.35gb", "3g.20gb": "3g.71gb",
                   "4g.20gb": "4g.71gb", "7g.40gb": "7g.141gb"},
}  # fmt: skip

# MIG User Guide, supported-mig-profiles.html: the maximal layouts in A100-40GB names, then the A30's.
MAXIMAL_A100_40GB = """
7x1g.5gb | 1x1g.10gb + 6x1g.5gb | 2x1g.10gb + 4x1g.5gb
3x1g.10gb + 2x1g.5gb | 4x1g.10gb | 1x2g.10gb + 5x1g.5gb
1x2g.10gb + 1x1g.10gb + 4x1g.5gb | 1x2g.10gb + 2x1g.10gb + 2x1g.5gb | 1x2g.10gb + 3x1g.10gb
2x2g.10gb + 3x1g.5gb | 2x2g.10gb + 1x1g.10gb + 2x1g.5gb | 2x2g.10gb + 2x1g.10gb
3x2g.10gb + 1x1g.5gb | 3x2g.10gb + 1x1g.10gb
1x3g.20gb + 4x1g.5gb | 1x3g.20gb + 1x1g.10gb + 2x1g.5gb | 1x3g.20gb + 2x1g.10gb
1x3g.20gb + 1x2g.10gb + 2x1g.5gb | 1x3g.20gb + 1x2g.10gb + 1x1g.10gb | 1x3g.20gb + 2x2g.10gb
2x3g.20gb | 1x4g.20gb + 1x3g.20gb
1x4g.20gb + 3x1g.5gb | 1x4g.20gb + 1x1g.10gb + 2x1g.5gb | 1x4g.20gb + 2x1g.10gb
1x4g.20gb + 1x2g.10gb + 1x1g.5gb | 1x4g.20gb + 1x2g.10gb + 1x1g.10gb
1x7g.40gb
"""
MAXIMAL_A30 = "4x1g.6gb | 1x2g.12gb + 2x1g.6gb | 2x2g.12gb | 1x4g.24gb"


def _parse_layouts(text: str, rename: dict[str, str] | None = None) -> set[Layout]:
    found = set()
    for item in text.replace("\n", "|").split("|"):
        if item.strip():
            terms = [t.strip().split("x", 1) for t in item.split("+ ")]
            found.add(layout({(rename or {}).get(p, p): int(n) for n, p in terms}))
    return found


def _no_media(layouts: list[Layout]) -> set[Layout]:
    return {lay for lay in layouts if not any(p.endswith("+me") for p, _ in lay)}


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


def _copy_config(tmp_path: Path) -> Path:
    for name in ("gpu_models.yaml", "mig_configs.yaml", "device_plugin_configs.yaml"):
        shutil.copy(CONFIG_DIR / name, tmp_path / name)
    return tmp_path


def _edit_yaml(path: Path, change: dict[str, object]) -> None:
    data = yaml.safe_load(path.read_text())
    data.update(change)
    path.write_text(yaml.safe_dump(data))


# --- models ---------------------------------------------------------------------------------------------------


def test_given_the_shipped_config_when_loaded_then_five_mig_models_and_five_without_are_there(
    catalog: Catalog,
) -> None:
    assert list(catalog.models) == MODELS + WITHOUT_MIG
    assert [m.name for m in catalog.models.values() if m.mig] == MODELS
    assert load_catalog() is load_catalog()  # cached for the default folder


def test_given_an_unknown_model_name_when_looked_up_then_the_error_names_the_known_ones(
    catalog: Catalog,
) -> None:
    with pytest.raises(CatalogError, match="A100-40GB, A100-80GB"):
        catalog.model("V100")


@pytest.mark.parametrize(
    ("model", "g", "expected"),
    [
        ("A100-40GB", 1, "1g.5gb"),  # not 1g.10gb (2 memory slices), not 1g.5gb+me
        ("A100-80GB", 1, "1g.10gb"),
        ("H200-141GB", 3, "3g.71gb"),
        ("A30-24GB", 2, "2g.12gb"),  # not 2g.12gb+me
        ("A30-24GB", 3, None),
        ("H100-80GB", 5, None),
    ],
)
def test_given_a_compute_size_when_asking_the_base_profile_then_fewest_memory_and_no_media(
    catalog: Catalog, model: str, g: int, expected: str | None
) -> None:
    profile = catalog.model(model).base_profile(g)
    assert (profile.name if profile else None) == expected


def test_given_compute_capabilities_when_asking_mps_limits_then_48_from_7_5_else_16(catalog: Catalog) -> None:
    assert {m.name: m.compute_capability for m in catalog.models.values()} == {
        "A100-40GB": "8.0",
        "A100-80GB": "8.0",
        "H100-80GB": "9.0",
        "H200-141GB": "9.0",
        "A30-24GB": "8.0",
        "T4-16GB": "7.5",
        "V100-16GB": "7.0",
        "V100-32GB": "7.0",
        "P100-16GB": "6.0",
        "A10-24GB": "8.6",
    }
    assert {m.name for m in catalog.models.values() if m.mps_max_replicas == 16} == {
        "V100-16GB",
        "V100-32GB",
        "P100-16GB",
    }
    volta = dataclasses.replace(catalog.model("A100-40GB"), compute_capability="7.0")
    assert volta.mps_max_replicas == 16
    assert dataclasses.replace(volta, compute_capability="7.5").mps_max_replicas == 48


def test_given_the_profiles_when_read_then_media_flags_and_placements_follow_the_facts(
    catalog: Catalog,
) -> None:
    a100 = catalog.model("A100-40GB").profiles
    assert a100["1g.5gb+me"].media and not a100["1g.5gb"].media
    assert {p: a100[p].placements for p in a100} == {
        "1g.5gb": (0, 1, 2, 3, 4, 5, 6),
        "1g.5gb+me": (0, 1, 2, 3, 4, 5, 6),
        "1g.10gb": (0, 2, 4, 6),
        "2g.10gb": (0, 2, 4),
        "3g.20gb": (0, 4),
        "4g.20gb": (0,),
        "7g.40gb": (0,),
    }
    a30 = catalog.model("A30-24GB").profiles
    assert {p: a30[p].placements for p in a30} == {
        "1g.6gb": (0, 1, 2, 3),
        "1g.6gb+me": (0, 1, 2, 3),
        "2g.12gb": (0, 2),
        "2g.12gb+me": (0, 2),
        "4g.24gb": (0,),
    }


def test_given_pci_ids_when_read_then_they_are_the_default_configs_filters(catalog: Catalog) -> None:
    eighty = ("0x233010DE", "0x233110DE", "0x232210DE", "0x20B210DE", "0x20B510DE", "0x20F310DE", "0x20F510DE",
              "0x232410DE")  # fmt: skip
    assert {m.name: m.pci_device_ids for m in catalog.models.values()} == {
        "A100-40GB": ("0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F610DE"),
        "A100-80GB": eighty,
        "H100-80GB": eighty,
        "H200-141GB": ("0x233510DE",),
        "A30-24GB": ("0x20B710DE",),
        **{name: () for name in WITHOUT_MIG},  # mig-parted never selects them
    }


# --- layout validity ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", MODELS)
def test_given_each_profile_alone_at_its_max_when_validated_then_valid_and_one_more_is_not(
    catalog: Catalog, model: str
) -> None:
    gpu = catalog.model(model)
    for profile in gpu.profiles.values():
        assert layout_problems(gpu, ((profile.name, profile.max),)) == [], profile.name
        problems = layout_problems(gpu, ((profile.name, profile.max + 1),))
        assert any(f"at most {profile.max} per GPU" in p for p in problems), profile.name


@pytest.mark.parametrize("model", SEVEN_SLICE)
def test_given_a_7_slice_gpu_when_4g_meets_3g_then_valid_but_not_with_a_double_memory_1g_between(
    catalog: Catalog, model: str
) -> None:
    gpu = catalog.model(model)
    names = {k: RENAME[model].get(k, k) for k in ("4g.20gb", "3g.20gb", "1g.10gb")}
    assert is_valid_layout(gpu, layout({names["4g.20gb"]: 1, names["3g.20gb"]: 1}))
    crowded = layout({names["4g.20gb"]: 1, names["1g.10gb"]: 1, names["3g.20gb"]: 1})
    assert not is_valid_layout(gpu, crowded)
    assert place(gpu, dict(crowded)) is None  # no placement, whatever the sums say


@pytest.mark.parametrize("model", SEVEN_SLICE)
def test_given_three_2g_and_a_double_memory_1g_when_placed_then_2g_at_0_2_4_and_the_1g_at_6(
    catalog: Catalog, model: str
) -> None:
    gpu = catalog.model(model)
    two_g, one_g_double = RENAME[model].get("2g.10gb", "2g.10gb"), RENAME[model].get("1g.10gb", "1g.10gb")
    counts = {two_g: 3, one_g_double: 1}
    assert is_valid_layout(gpu, layout(counts))
    assert place(gpu, counts) == {two_g: (0, 2, 4), one_g_double: (6,)}


def _tight_model(placements: dict[str, tuple[int, ...]]) -> GpuModel:
    """A made-up 7/8 GPU whose profiles have only the given placements (sizes as on an A100-40GB)."""
    sizes = {"4g.20gb": (4, 4), "3g.20gb": (3, 4), "2g.10gb": (2, 2), "1g.10gb": (1, 2)}
    profiles = {p: MigProfile(p, sizes[p][0], sizes[p][1], 1, 2, starts) for p, starts in placements.items()}
    return GpuModel("tight", "", "", (), ("0x000010DE",), 1, 1.0, 7, 8, "8.0", profiles)


def test_given_placements_tighter_than_the_sums_when_validated_then_the_search_rejects_it() -> None:
    gpu = _tight_model({"4g.20gb": (0,), "3g.20gb": (0,)})
    problems = layout_problems(gpu, layout({"4g.20gb": 1, "3g.20gb": 1}))
    assert len(problems) == 1 and "cannot be placed without overlap" in problems[0]


def test_given_a_first_fit_dead_end_when_placed_then_the_search_backtracks() -> None:
    # 2g fits at 0 or 2; 1g(2 mem) only at 0. First fit would put the 2g at 0 and fail.
    gpu = _tight_model({"2g.10gb": (0, 2), "1g.10gb": (0,)})
    assert place(gpu, {"2g.10gb": 1, "1g.10gb": 1}) == {"1g.10gb": (0,), "2g.10gb": (2,)}
    assert place(gpu, {"2g.10gb": 2, "1g.10gb": 1}) is None


@pytest.mark.parametrize("model", MODELS)
def test_given_two_media_instances_when_validated_then_invalid(catalog: Catalog, model: str) -> None:
    gpu = catalog.model(model)
    media = [p for p in gpu.profiles.values() if p.media]
    problems = layout_problems(gpu, ((media[0].name, 2),))
    assert any("media-extension" in p for p in problems) or any("at most 1 per GPU" in p for p in problems)
    if len(media) > 1:  # A30: 1g.6gb+me and 2g.12gb+me, each within its own max, still two +me
        problems = layout_problems(gpu, layout({media[0].name: 1, media[1].name: 1}))
        assert problems == ["2 media-extension (+me) instances: at most one per GPU"]


@pytest.mark.parametrize("model", MODELS)
def test_given_an_unknown_profile_when_validated_then_invalid_naming_it(catalog: Catalog, model: str) -> None:
    problems = layout_problems(catalog.model(model), (("5g.99gb", 1),))
    assert len(problems) == 1 and "'5g.99gb'" in problems[0]


@pytest.mark.parametrize("model", MODELS)
def test_given_more_compute_than_the_gpu_has_when_validated_then_invalid(
    catalog: Catalog, model: str
) -> None:
    gpu = catalog.model(model)
    biggest = max(gpu.profiles.values(), key=lambda p: p.g)
    smallest = gpu.base_profile(1)
    assert smallest is not None
    problems = layout_problems(gpu, layout({biggest.name: 1, smallest.name: 1}))
    assert f"{gpu.compute_slices + 1} compute slices: a {model} has {gpu.compute_slices}" in problems


def test_given_a_negative_count_when_validated_then_invalid(catalog: Catalog) -> None:
    assert layout_problems(catalog.model("A30-24GB"), (("1g.6gb", -1),)) == [
        "-1 x 1g.6gb: a count must be at least 1"
    ]


def test_given_a_mapping_when_made_canonical_then_sorted_without_zeros() -> None:
    assert layout({"3g.40gb": 1, "1g.10gb": 2, "2g.20gb": 0}) == (("1g.10gb", 2), ("3g.40gb", 1))
    assert layout({}) == ()


def test_given_the_a30_when_validated_then_its_4_by_4_geometry_holds(catalog: Catalog) -> None:
    a30 = catalog.model("A30-24GB")
    assert (a30.compute_slices, a30.memory_slices) == (4, 4)
    for ok in ({"1g.6gb": 4}, {"2g.12gb": 1, "1g.6gb": 2}, {"2g.12gb": 2}, {"4g.24gb": 1},
               {"2g.12gb+me": 1, "2g.12gb": 1}, {"1g.6gb+me": 1, "1g.6gb": 3}):  # fmt: skip
        assert is_valid_layout(a30, layout(ok)), ok
    for bad in ({"4g.24gb": 1, "1g.6gb": 1}, {"2g.12gb": 2, "1g.6gb": 1}, {"1g.6gb": 5}):
        assert not is_valid_layout(a30, layout(bad)), bad


# --- enumeration ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("model", "total"), [*((m, 128) for m in SEVEN_SLICE), ("A30-24GB", 20)])
def test_given_a_model_when_enumerating_then_the_valid_multiset_counts_match_the_facts(
    catalog: Catalog, model: str, total: int
) -> None:
    """Counted: distinct multisets of the model's profiles (+me ones included) that pass ``layout_problems``.

    ``valid_layouts`` includes the empty layout ``()`` (MIG on, no instances); without it the counts are the
    facts' 127 on 7-slice GPUs and 19 on the A30 (§2.4). Without any +me profile: 78 and 10.
    """
    found = valid_layouts(catalog.model(model))
    assert len(found) == total and () in found
    assert len([lay for lay in found if lay]) == total - 1
    assert len(_no_media(found)) == (78 if model in SEVEN_SLICE else 10)
    assert found == sorted(set(found))
    assert all(is_valid_layout(catalog.model(model), lay) for lay in found)


@pytest.mark.parametrize("model", SEVEN_SLICE)
def test_given_a_7_slice_gpu_when_listing_maximal_layouts_then_the_facts_list_is_reproduced(
    catalog: Catalog, model: str
) -> None:
    """§2.4 lists maximal layouts without +me profiles (28); with them, 44 (a +me swapped in for a 1g)."""
    maximal = valid_layouts(catalog.model(model), maximal_only=True)
    assert _no_media(maximal) == _parse_layouts(MAXIMAL_A100_40GB, RENAME[model])
    assert len(_no_media(maximal)) == 28 and len(maximal) == 44


def test_given_the_a30_when_listing_maximal_layouts_then_the_facts_list_is_reproduced(
    catalog: Catalog,
) -> None:
    maximal = valid_layouts(catalog.model("A30-24GB"), maximal_only=True)
    assert _no_media(maximal) == _parse_layouts(MAXIMAL_A30)
    assert len(maximal) == 8


def test_given_a_layout_when_described_then_largest_instances_first() -> None:
    assert describe_layout((("1g.10gb", 2), ("3g.40gb", 1))) == "1x3g.40gb + 2x1g.10gb"
    assert describe_layout(None) == "MIG disabled"
    assert describe_layout(()) == "MIG enabled, no instances"


# --- products -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("label", "model"),
    [
        ("NVIDIA-A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "A100-40GB"),
        (
            "A100-SXM4-40GB-MIG-1g.5gb-SHARED",
            "A100-40GB",
        ),  # GFD's product label on an older version, no NVIDIA- prefix
        ("NVIDIA-A100-PCIE-40GB", "A100-40GB"),
        ("NVIDIA-A100-SXM4-80GB-MIG-INVALID", "A100-80GB"),
        ("NVIDIA-A100-80GB-PCIe", "A100-80GB"),
        ("NVIDIA-A100-PCIE-80GB", "A100-80GB"),
        ("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", "H100-80GB"),
        ("NVIDIA-H100-PCIe-SHARED", "H100-80GB"),
        ("nvidia-h200", "H200-141GB"),
        ("NVIDIA-H200-MIG-3g.71gb", "H200-141GB"),
        ("NVIDIA-A30", "A30-24GB"),
        ("NVIDIA-A30-MIG-1g.6gb+me", "A30-24GB"),
        ("NVIDIA-H200-NVL", None),  # another product, another filter
        ("Tesla-T4", "T4-16GB"),  # no MIG, known all the same
        ("Tesla-V100-PCIE-32GB", "V100-32GB"),
        ("Tesla-K80", None),
        ("", None),
    ],
)
def test_given_a_gfd_product_label_when_mapped_then_suffixes_are_ignored(
    catalog: Catalog, label: str, model: str | None
) -> None:
    found = catalog.model_for_product(label)
    assert (found.name if found else None) == model


def test_given_each_model_when_listing_aliases_then_the_canonical_product_comes_first(
    catalog: Catalog,
) -> None:
    for model in catalog.models.values():
        assert model.product_aliases[0] == model.gpu_product
        assert len(set(model.product_aliases)) == len(model.product_aliases)


# --- named MIG configs ----------------------------------------------------------------------------------------


def test_given_nvidias_default_names_when_derived_then_they_match_the_default_config(
    catalog: Catalog,
) -> None:
    expected = {  # gpu-operator assets/state-mig-manager/0400_configmap.yaml
        ("all-balanced", "A100-40GB"): {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1},
        ("all-balanced", "A100-80GB"): {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
        ("all-balanced", "H100-80GB"): {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
        ("all-balanced", "H200-141GB"): {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1},
        ("all-balanced", "A30-24GB"): {"1g.6gb": 2, "2g.12gb": 1},
        ("all-1g.5gb", "A100-40GB"): {"1g.5gb": 7},
        ("all-1g.10gb", "A100-40GB"): {"1g.10gb": 4},
        ("all-1g.10gb", "A100-80GB"): {"1g.10gb": 7},
        ("all-1g.10gb", "H100-80GB"): {"1g.10gb": 7},
        ("all-1g.10gb.me", "H100-80GB"): {"1g.10gb+me": 1},
        ("all-1g.20gb", "A100-80GB"): {"1g.20gb": 4},
        ("all-1g.35gb", "H200-141GB"): {"1g.35gb": 4},
        ("all-2g.35gb", "H200-141GB"): {"2g.35gb": 3},
        ("all-3g.40gb", "A100-80GB"): {"3g.40gb": 2},
        ("all-4g.71gb", "H200-141GB"): {"4g.71gb": 1},
        ("all-7g.141gb", "H200-141GB"): {"7g.141gb": 1},
        ("all-1g.6gb", "A30-24GB"): {"1g.6gb": 4},
        ("all-1g.6gb.me", "A30-24GB"): {"1g.6gb+me": 1},
        ("all-2g.12gb", "A30-24GB"): {"2g.12gb": 2},
        ("all-2g.12gb.me", "A30-24GB"): {"2g.12gb+me": 1},
        ("all-4g.24gb", "A30-24GB"): {"4g.24gb": 1},
    }
    for (name, model), counts in expected.items():
        assert catalog.layout_of(name, model) == layout(counts), (name, model)
    for model in MODELS:
        assert catalog.layout_of("all-disabled", model) is None
        assert catalog.layout_of("all-enabled", model) == ()
    for model in WITHOUT_MIG:  # whole GPUs are all they have
        assert catalog.configs_for(model) == {"all-disabled": None}
    assert set(catalog.mig_configs["all-1g.10gb.me"].layouts) == {"A100-80GB", "H100-80GB"}


def test_given_every_profile_of_every_model_when_naming_then_an_all_name_gives_it_alone(
    catalog: Catalog,
) -> None:
    for model in catalog.models.values():
        for profile in model.profiles.values():
            name = "all-" + profile.name.replace("+", ".")
            assert catalog.layout_of(name, model.name) == (
                (profile.name, 1 if profile.media else profile.max),
            )


def test_given_the_catalogue_order_when_listing_then_defaults_come_before_slicewise_names(
    catalog: Catalog,
) -> None:
    names = list(catalog.mig_configs)
    assert names[:3] == ["all-disabled", "all-enabled", "all-balanced"]
    first_sw = next(i for i, n in enumerate(names) if n.startswith("sw-"))
    assert all(n.startswith("all-") for n in names[:first_sw])
    assert all(n.startswith("sw-") for n in names[first_sw:])


@pytest.mark.parametrize("model", MODELS)
def test_given_every_config_of_a_model_when_named_back_then_the_round_trip_holds(
    catalog: Catalog, model: str
) -> None:
    configs = catalog.configs_for(model)
    assert configs["all-disabled"] is None and configs["all-enabled"] == ()
    for name, lay in configs.items():
        assert catalog.layout_of(name, model) == lay
        named = catalog.config_named_for(model, lay)
        assert named is not None and catalog.layout_of(named, model) == lay
        if lay is not None:
            assert is_valid_layout(catalog.model(model), lay), name
    # Nothing applies to a model without an entry for it.
    assert all(model in catalog.mig_configs[n].layouts for n in configs)


def test_given_layouts_when_asking_their_names_then_default_names_win_and_unnamed_is_none(
    catalog: Catalog,
) -> None:
    assert catalog.config_named_for("A100-80GB", None) == "all-disabled"
    assert catalog.config_named_for("A100-80GB", ()) == "all-enabled"
    assert (
        catalog.config_named_for("A100-80GB", (("3g.40gb", 1), ("1g.10gb", 2), ("2g.20gb", 1)))
        == "all-balanced"
    )
    assert catalog.config_named_for("H200-141GB", (("4g.71gb", 1), ("3g.71gb", 1))) == "sw-4g-3g"
    assert catalog.config_named_for("A30-24GB", (("1g.6gb", 2), ("2g.12gb", 1))) == "all-balanced"
    assert catalog.config_named_for("A100-40GB", (("1g.5gb", 1),)) is None


def test_given_unknown_names_when_asking_a_layout_then_catalog_errors(catalog: Catalog) -> None:
    with pytest.raises(CatalogError, match="unknown MIG config"):
        catalog.layout_of("all-9g.1tb", "A100-40GB")
    with pytest.raises(CatalogError, match="no entry for A30-24GB"):
        catalog.layout_of("all-1g.5gb", "A30-24GB")
    with pytest.raises(CatalogError, match="no entry for A30-24GB"):
        catalog.layout_of("sw-4g-3g", "A30-24GB")
    with pytest.raises(CatalogError, match="unknown GPU model"):
        catalog.layout_of("all-disabled", "V100")


@pytest.mark.parametrize("model", MODELS)
def test_given_every_maximal_base_composition_when_named_then_the_catalogue_has_a_name(
    catalog: Catalog, model: str
) -> None:
    gpu = catalog.model(model)
    base = {p.name for g in range(1, gpu.compute_slices + 1) if (p := gpu.base_profile(g))}
    base_layouts = [lay for lay in valid_layouts(gpu) if lay and all(p in base for p, _ in lay)]

    def extendable(lay: Layout) -> bool:
        return any(is_valid_layout(gpu, layout([*lay, (p, 1)])) for p in base)

    maximal = [lay for lay in base_layouts if not extendable(lay)]
    assert len(maximal) == (12 if model in SEVEN_SLICE else 4)
    assert all(catalog.config_named_for(model, lay) for lay in maximal), [
        describe_layout(lay) for lay in maximal if not catalog.config_named_for(model, lay)
    ]


def test_given_slicewise_names_when_parsed_then_they_round_trip_and_must_be_canonical() -> None:
    assert parse_composition("sw-3g-2gx2") == {3: 1, 2: 2}
    assert parse_composition("sw-2gx2-1gx3") == {2: 2, 1: 3}
    assert composition_name({1: 5, 2: 1}) == "sw-2g-1gx5"
    for bad in ("sw-2g-3g", "sw-3gx1", "sw-2g-2g", "sw-0g", "all-3g", "sw-", "sw-3g-"):
        with pytest.raises(CatalogError):
            parse_composition(bad)


def test_given_every_slicewise_name_when_loaded_then_its_layouts_are_its_base_composition(
    catalog: Catalog,
) -> None:
    for name, config in catalog.mig_configs.items():
        if not name.startswith("sw-"):
            continue
        assert not config.is_default_name
        if config.split is not None:  # sw-4of8-3g-2g-1gx2: the composition after the split's prefix
            mig_gpus, node_gpus = config.split
            name = "sw-" + name.removeprefix(f"sw-{mig_gpus}of{node_gpus}-")
        composition = parse_composition(name)
        for model, lay in config.layouts.items():
            gpu = catalog.model(model)
            assert lay is not None and is_valid_layout(gpu, lay)
            assert {gpu.profiles[p].g: c for p, c in lay} == composition
            assert all(gpu.base_profile(gpu.profiles[p].g) == gpu.profiles[p] for p, _ in lay)


def test_given_a_composition_that_a_default_name_gives_when_loaded_then_it_is_rejected(
    tmp_path: Path,
) -> None:
    config = _copy_config(tmp_path)
    _edit_yaml(config / "mig_configs.yaml", {"compositions": {"sw-3gx2": "two medium tenants"}})
    with pytest.raises(
        CatalogError,
        match=r"only repeats default names \(all-3g\.20gb on A100-40GB, all-3g\.40gb on A100-80GB",
    ):
        load_catalog(config)


def test_given_a_composition_no_model_can_hold_when_loaded_then_it_is_rejected(tmp_path: Path) -> None:
    config = _copy_config(tmp_path)
    _edit_yaml(config / "mig_configs.yaml", {"compositions": {"sw-4gx2": ""}})
    with pytest.raises(CatalogError, match="valid on no model"):
        load_catalog(config)


def test_given_a_model_without_placements_when_loaded_then_it_is_rejected(tmp_path: Path) -> None:
    config = _copy_config(tmp_path)
    data = yaml.safe_load((config / "gpu_models.yaml").read_text())
    data["models"]["A30-24GB"]["profiles"]["4g.24gb"]["placements"] = [1]  # 1..4 overruns the 4 slots
    (config / "gpu_models.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(CatalogError, match=r"4g\.24gb placements"):
        load_catalog(config)


# --- device-plugin configs ------------------------------------------------------------------------------------


def test_given_device_plugin_names_when_asking_replicas_then_default_is_one(catalog: Catalog) -> None:
    assert catalog.mps_replicas("") == 1
    assert catalog.mps_replicas("default") == 1
    assert catalog.mps_replicas("mps-4") == 4
    assert catalog.mps_replicas("mps-48") == 48
    with pytest.raises(CatalogError, match="unknown device-plugin config"):
        catalog.mps_replicas("mps-5")
    with pytest.raises(CatalogError):
        catalog.mps_replicas("time-slicing-4")


def test_given_replica_counts_when_naming_then_the_names_round_trip(catalog: Catalog) -> None:
    assert catalog.device_plugin_config_for(1) == "default"
    assert catalog.device_plugin_config_for(4) == "mps-4"
    for name, config in catalog.device_plugin_configs.items():
        assert catalog.device_plugin_config_for(config.mps_replicas) == name
        assert catalog.mps_replicas(name) == config.mps_replicas
        assert config.mig_strategy == ("mixed" if name == "default" else "none")
    assert [c.mps_replicas for c in catalog.device_plugin_configs.values()] == [
        1,
        2,
        3,
        4,
        6,
        8,
        12,
        16,
        24,
        32,
        48,
    ]
    with pytest.raises(CatalogError, match="offered"):
        catalog.device_plugin_config_for(5)


@pytest.mark.parametrize("replicas", [[1], [49], [4, 4]])
def test_given_bad_mps_replica_lists_when_loaded_then_rejected(tmp_path: Path, replicas: list[int]) -> None:
    config = _copy_config(tmp_path)
    _edit_yaml(config / "device_plugin_configs.yaml", {"mps_replicas": replicas})
    with pytest.raises(CatalogError):
        load_catalog(config)


def test_given_the_simulator_fleet_when_checked_then_its_config_names_mean_its_layouts(
    catalog: Catalog,
) -> None:
    raw = load_config()
    for node in [*raw["nodes"], *raw["synthetic_templates"]]:
        mig = node.get("mig_devices")
        expected = layout(mig) if mig else None
        assert catalog.layout_of(node["mig_config"], node["model"]) == expected, node
        assert catalog.mps_replicas(node["device_plugin_config"]) == (node.get("mps_replicas") or 1), node


# --- resources ------------------------------------------------------------------------------------------------


def test_given_profiles_when_naming_resources_then_plus_becomes_dot() -> None:
    assert resource_for_profile("1g.10gb") == "nvidia.com/mig-1g.10gb"
    assert resource_for_profile("1g.10gb+me") == "nvidia.com/mig-1g.10gb.me"


def test_given_a_mig_layout_when_computing_capacity_then_counts_times_gpus(catalog: Catalog) -> None:
    a100 = catalog.model("A100-80GB")
    balanced = catalog.layout_of("all-balanced", "A100-80GB")
    assert layout_capacity(a100, balanced, gpus=8) == {
        "nvidia.com/mig-1g.10gb": 16,
        "nvidia.com/mig-2g.20gb": 8,
        "nvidia.com/mig-3g.40gb": 8,
    }
    assert layout_capacity(a100, (("1g.10gb+me", 1), ("1g.10gb", 6)), gpus=2) == {
        "nvidia.com/mig-1g.10gb+me".replace("+", "."): 2,
        "nvidia.com/mig-1g.10gb": 12,
    }
    assert layout_capacity(a100, (), gpus=8) == {}


def test_given_mig_disabled_when_computing_capacity_then_whole_gpus_times_replicas(catalog: Catalog) -> None:
    h100 = catalog.model("H100-80GB")
    assert layout_capacity(h100, None, gpus=8) == {"nvidia.com/gpu": 8}
    assert layout_capacity(h100, None, gpus=8, mps_replicas=4) == {"nvidia.com/gpu": 32}
    assert layout_capacity(h100, None, gpus=0, mps_replicas=48) == {"nvidia.com/gpu": 0}


def test_given_impossible_capacity_requests_when_computed_then_catalog_errors(catalog: Catalog) -> None:
    h100 = catalog.model("H100-80GB")
    with pytest.raises(CatalogError, match="MPS"):
        layout_capacity(h100, (("3g.40gb", 2),), gpus=1, mps_replicas=2)
    with pytest.raises(CatalogError, match="at most 2 per GPU"):
        layout_capacity(h100, (("3g.40gb", 3),), gpus=1)
    with pytest.raises(CatalogError, match=r"1\.\.48"):
        layout_capacity(h100, None, gpus=1, mps_replicas=49)
    with pytest.raises(CatalogError):
        layout_capacity(h100, None, gpus=-1)


def test_given_resources_when_asking_their_compute_share_then_g_over_slices_or_one_over_replicas(
    catalog: Catalog,
) -> None:
    a100, a30 = catalog.model("A100-80GB"), catalog.model("A30-24GB")
    assert compute_share(a100, "nvidia.com/mig-3g.40gb") == pytest.approx(3 / 7)
    assert compute_share(a100, "nvidia.com/mig-1g.20gb") == pytest.approx(1 / 7)
    assert compute_share(a100, "nvidia.com/mig-1g.10gb.me") == pytest.approx(1 / 7)
    assert compute_share(a100, "nvidia_com_mig_7g_80gb") == pytest.approx(1.0)  # kube-state-metrics spelling
    assert compute_share(a30, "nvidia.com/mig-2g.12gb") == pytest.approx(0.5)
    assert compute_share(a30, "nvidia.com/gpu") == 1.0
    assert compute_share(a30, "nvidia.com/gpu", mps_replicas=4) == pytest.approx(0.25)
    with pytest.raises(CatalogError, match="advertises no resource"):
        compute_share(a30, "nvidia.com/mig-1g.5gb")
    with pytest.raises(CatalogError, match="MPS"):
        compute_share(a100, "nvidia.com/mig-3g.40gb", mps_replicas=2)


def test_given_a_full_layout_when_summing_shares_then_it_adds_up_to_its_compute(catalog: Catalog) -> None:
    for model in (m for m in catalog.models.values() if m.mig):
        for lay in valid_layouts(model, maximal_only=True):
            capacity = layout_capacity(model, lay, gpus=1)
            total = sum(n * compute_share(model, resource) for resource, n in capacity.items())
            assert total == pytest.approx(sum(model.profiles[p].g * c for p, c in lay) / model.compute_slices)


# --- CLI ------------------------------------------------------------------------------------------------------


def test_given_the_cli_when_listing_layouts_then_one_line_each_with_names(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["catalog", "layouts", "A30-24GB"]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert len(lines) == 20 and "20 valid layouts" in err
    assert any(line.startswith("1x2g.12gb + 2x1g.6gb") and line.endswith("all-balanced") for line in lines)
    assert main(["catalog", "layouts", "A100-40GB", "--maximal"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 44


def test_given_an_unknown_model_when_listing_layouts_then_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["catalog", "layouts", "V100"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown GPU model 'V100'") and err.count("\n") == 1


def test_given_a_model_without_mig_when_it_carries_mig_fields_then_it_is_rejected(tmp_path: Path) -> None:
    config = tmp_path / "config"
    shutil.copytree(CONFIG_DIR, config)
    data = yaml.safe_load((config / "gpu_models.yaml").read_text())
    data["models"]["T4-16GB"]["compute_slices"] = 7
    (config / "gpu_models.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(CatalogError, match="T4-16GB: a model with mig: false has no MIG geometry"):
        load_catalog(config)


def test_given_a_model_without_mig_when_planned_for_then_it_offers_whole_gpus_and_mps(
    catalog: Catalog,
) -> None:
    t4 = catalog.model("T4-16GB")
    assert not t4.mig and t4.profiles == {} and t4.mps_max_replicas == 48
    assert layout_capacity(t4, None, gpus=2, mps_replicas=4) == {"nvidia.com/gpu": 8}
    with pytest.raises(CatalogError, match="no entry for T4-16GB"):
        catalog.layout_of("all-balanced", "T4-16GB")


# --- per-GPU split configs ------------------------------------------------------------------------------------


def test_given_a_split_config_then_its_gpus_are_half_mig_half_whole_and_it_fits_one_node_size(
    catalog: Catalog,
) -> None:
    balanced = catalog.layout_of("all-balanced", "H100-80GB")
    assert balanced == (("1g.10gb", 2), ("2g.20gb", 1), ("3g.40gb", 1))
    layouts = catalog.gpu_layouts("sw-4of8-3g-2g-1gx2", "H100-80GB", 8)
    assert layouts == (balanced,) * 4 + (None,) * 4
    assert catalog.gpu_layouts("all-balanced", "H100-80GB", 3) == (balanced,) * 3
    with pytest.raises(CatalogError, match="nodes of 8 GPUs, not 4"):
        catalog.gpu_layouts("sw-4of8-3g-2g-1gx2", "H100-80GB", 4)
    # 4 whole GPUs plus the balanced instances of 4 GPUs, on one node (mixed strategy)
    assert gpus_capacity(catalog.model("H100-80GB"), layouts) == {
        "nvidia.com/gpu": 4,
        "nvidia.com/mig-1g.10gb": 8,
        "nvidia.com/mig-2g.20gb": 4,
        "nvidia.com/mig-3g.40gb": 4,
    }


def test_given_the_split_configs_then_they_are_halves_of_maximal_compositions_kept_apart_from_the_rest(
    catalog: Catalog,
) -> None:
    splits = catalog.splits_for("H100-80GB", 8)
    assert "sw-4of8-1gx7" in splits and "sw-4of8-3g-2g-1gx2" in splits
    for name, (lay, split) in splits.items():
        assert name.startswith("sw-4of8-") and split == (4, 8)
        assert is_maximal(catalog.model("H100-80GB"), lay) and sum(n for _, n in lay) >= 2
    assert catalog.splits_for("H100-80GB", 6) == {}
    assert not any(name.startswith("sw-4of8-") for name in catalog.configs_for("H100-80GB"))
    seven = (("1g.10gb", 7),)
    assert catalog.config_named_for("H100-80GB", seven) == "all-1g.10gb"
    assert catalog.config_named_for("H100-80GB", seven, (4, 8)) == "sw-4of8-1gx7"
    assert catalog.config_named_for("H100-80GB", seven, (3, 8)) is None
