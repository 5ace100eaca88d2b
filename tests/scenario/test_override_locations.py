"""Where an override's problem is said to be: the ``--set`` (or the ``--vary`` value) that
wrote it, also when the override created a section the file does not have, and the field
an override sets reported ahead of the others (its value is what the user just typed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.errors import ConfigError
from sim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
ONE_NODE = ROOT / "workloads" / "seed_chunked_prefill.yaml"  # no cluster section


def _error(overrides: dict, **kw) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_scenario(ONE_NODE, overrides, **kw)
    return info.value


def test_a_section_an_override_created_is_located_at_that_override() -> None:
    assert "cluster" not in ONE_NODE.read_text()
    err = _error({"cluster.router.kind": "least_load"})
    assert str(err) == "--set cluster.router.kind: cluster.nodes: required field is missing"


def test_of_two_overrides_the_one_sharing_most_of_the_path_is_named() -> None:
    err = _error({"seed": 3, "cluster.router.kind": "least_load"})
    assert str(err).startswith("--set cluster.router.kind: cluster.nodes: ")


def test_the_field_an_override_sets_is_reported_first() -> None:
    err = _error({"cluster.router.kind": "least_loaded"})
    assert str(err).startswith("--set cluster.router.kind: cluster.router.kind: unknown kind 'least_loaded'; valid: least_load, ")
    assert str(err).endswith("(and 1 more problem)")
    assert [p.field for p in err.problems] == ["cluster.router.kind", "cluster.nodes"]


def test_a_labelled_override_is_named_by_its_label() -> None:
    err = _error({"hardware.tp": "abc"}, labels={"hardware.tp": "--vary hardware.tp=abc"})
    assert str(err).startswith("--vary hardware.tp=abc: hardware.tp: Input should be a valid integer")
    bad_path = _error({"hardware.tp.x": 1}, labels={"hardware.tp.x": "--vary hardware.tp.x=1"})
    assert str(bad_path) == "--vary hardware.tp.x=1: cannot set hardware.tp.x: hardware.tp is not a section"


def test_kvsim_compare_names_the_vary_value(run_cli, tmp_path) -> None:
    code, out, err = run_cli(["compare", str(ONE_NODE), "--out", str(tmp_path / "c"), "--vary", "hardware.tp=abc,1"])
    assert code == 2
    assert err.strip().startswith("kvsim: error: --vary hardware.tp=abc: hardware.tp: Input should be a valid integer")
    assert not (tmp_path / "c").exists()


def test_an_override_of_another_path_is_not_named() -> None:
    with pytest.raises(ConfigError) as info:
        load_scenario({"workload": {"kind": "requests"}}, {"seed": 3})
    assert {p.location for p in info.value.problems} == {"<scenario>"}
