"""Waves: one canary node, then growing cumulative shares; batches bound the nodes in flight."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slicewise.rollout.waves import MAX_WAVES, WavePlanError, batches, parse_shares, plan_waves


def test_ten_nodes_go_canary_then_by_the_default_shares() -> None:
    nodes = [f"n{i}" for i in range(10)]
    waves = plan_waves(nodes, parse_shares("0.1,0.25,0.5,1.0"))
    # canary n0; 10 % of 10 = 1 node already done -> no wave; 25 % -> 3 in all; 50 % -> 5; 100 % -> 10.
    assert waves == [["n0"], ["n1", "n2"], ["n3", "n4"], ["n5", "n6", "n7", "n8", "n9"]]


def test_one_node_is_only_a_canary() -> None:
    assert plan_waves(["n0"], (0.5, 1.0)) == [["n0"]]
    assert plan_waves([], (1.0,)) == []


@pytest.mark.parametrize(
    "text", ["", "0.5", "0.5,0.25,1.0", "0,1", "1.5", "a,b", "0.1,0.2,0.3,0.4,0.5,0.6,1.0"]
)
def test_malformed_shares_are_refused(text: str) -> None:
    with pytest.raises(WavePlanError):
        parse_shares(text)


@given(
    n=st.integers(min_value=1, max_value=300),
    shares=st.lists(st.floats(min_value=0.01, max_value=0.99), max_size=MAX_WAVES - 2, unique=True),
    budget=st.integers(min_value=1, max_value=20),
)
def test_waves_cover_every_node_once_in_order_and_batches_respect_the_budget(
    n: int, shares: list[float], budget: int
) -> None:
    nodes = [f"n{i}" for i in range(n)]
    waves = plan_waves(nodes, (*sorted(shares), 1.0))
    assert [node for wave in waves for node in wave] == nodes
    assert waves[0] == ["n0"]
    assert all(wave for wave in waves)
    assert len(waves) <= MAX_WAVES
    for wave in waves:
        chunks = batches(wave, budget)
        assert all(1 <= len(chunk) <= budget for chunk in chunks)
        assert [node for chunk in chunks for node in chunk] == wave
