"""The scenario model narrowed to a document's workload kind and pause policy
(``scenario_model_for``).

It must accept exactly what the full model accepts, with the same values, and leave every
error to the full model (whose wording lists every valid kind); the table of workload
kinds (``WORKLOAD_MODELS``) must name each kind's model, in the full union's order, and
the table of pause policies (``POLICY_MODULES``) each policy's module, in the registry's.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from sim.errors import ConfigError
from sim.policy import policy_class
from sim.policy.base import POLICY_MODULES
from sim.policy.registry import policy_options_models
from sim.scenario import load_scenario, scenario_model
from sim.scenario.load import LoadedScenario, validation_problems
from sim.scenario.schema import _scenario_model, scenario_model_for
from sim.workload.kind_models import WORKLOAD_MODELS, workload_models
from sim.yamlio import load_yaml

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = [
    *sorted((ROOT / "workloads").glob("*.yaml")),
    *sorted((ROOT / "benchmarks").glob("*.yaml")),
    *sorted((ROOT / "tests" / "golden" / "scenarios").glob("*.yaml")),
]
SHIPPED = [p for p in SHIPPED if not p.name.endswith("_sweep.yaml")]

BASE: dict[str, Any] = {
    "model": "chapter-70b",
    "hardware": {"accelerator": "e20-accelerator"},
    "workload": {
        "kind": "chat",
        "num_requests": 3,
        "arrival": {"kind": "poisson", "rate_per_s": 1.0},
        "lengths": {"kind": "parametric", "prompt_tokens": 100, "output_tokens": 10},
    },
}


def _members(annotation: Any) -> tuple[Any, ...]:
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return get_args(annotation) if get_origin(annotation) is Union else (annotation,)


def test_the_table_names_each_kind_s_model_in_the_full_union_s_order():
    full = _members(scenario_model().model_fields["workload"].annotation)
    assert [m.model_fields["kind"].annotation for m in full] == [
        Literal[k] for k in WORKLOAD_MODELS  # type: ignore[valid-type]
    ]
    assert workload_models() == tuple(m for m in full if m.__name__ != "MixWorkload")
    with pytest.raises(ValueError, match="mix_config"):  # mix_config builds the union
        _module_of_mix()


def _module_of_mix():
    from sim.workload.kind_models import _module

    return _module("mix_config")


@pytest.mark.parametrize("kind", list(WORKLOAD_MODELS))
def test_a_document_naming_one_kind_gets_a_model_holding_that_kind_alone(kind):
    model, narrowed = scenario_model_for({**BASE, "workload": {"kind": kind}})
    if kind == "mix":  # its components may be of any kind
        assert (model, narrowed) == (scenario_model(), False)
        return
    assert narrowed
    assert _members(model.model_fields["workload"].annotation) == workload_models([kind])
    assert list(model.model_fields) == list(scenario_model().model_fields)  # same order
    assert scenario_model_for({**BASE, "workload": {"kind": kind, "x": 1}})[0] is model


@pytest.mark.parametrize(
    "workload", [None, "chat", {}, {"kind": None}, {"kind": "nope"}, {"kind": ["chat"]}]
)
def test_a_document_naming_no_known_kind_gets_the_full_model(workload):
    data = {**BASE, "workload": workload}
    assert scenario_model_for(data) == (scenario_model(), False)
    assert scenario_model_for(["not", "a", "mapping"]) == (scenario_model(), False)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_shipped_scenario_validates_alike_both_ways(path):
    data, _ = load_yaml(path)
    model, narrowed = scenario_model_for(data)
    full = scenario_model().model_validate(data)
    got = model.model_validate(data)
    assert narrowed == (data["workload"]["kind"] != "mix")
    assert got.model_dump() == full.model_dump()
    assert got.model_dump_json() == full.model_dump_json()
    assert load_scenario(path).scenario.model_dump() == full.model_dump()


def _problems(data: dict) -> list[str]:
    """What ``load_scenario`` reports, and what the full model's errors alone give."""
    try:
        load_scenario(copy.deepcopy(data))
    except ConfigError as exc:
        got = [str(p) for p in exc.problems]
    else:
        got = []
    try:
        scenario_model().model_validate(data)
    except ValidationError as exc:
        loaded = LoadedScenario(None, "<scenario>", ROOT)
        want = [str(p) for p in validation_problems(exc, data, loaded)]
    else:
        want = []
    return [got, want]


def test_an_error_in_a_narrowed_kind_is_worded_by_the_full_model():
    bad = copy.deepcopy(BASE)
    bad["workload"]["num_requests"] = 0
    bad["workload"]["extra"] = 1
    got, want = _problems(bad)
    assert got == want and len(got) == 2
    assert any("unknown field; valid: arrival, kind, lengths" in p for p in got)


VALUES = st.sampled_from([None, 0, 1, -1, 2.5, "x", "1e3", [], {}, True, {"kind": "constant"}])
FIELDS = st.sampled_from(
    ["num_requests", "arrival", "lengths", "system_prompt_tokens", "kind", "extra",
     "num_trajectories", "turns", "pause_s"]
)  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["chat", "agent", "requests", "coding_agent"]),
       edits=st.dictionaries(FIELDS, VALUES, max_size=3))  # fmt: skip
def test_narrowing_never_changes_what_is_accepted_or_reported(kind, edits):
    data = copy.deepcopy(BASE)
    data["workload"]["kind"] = kind
    if kind != "chat":
        data["workload"] = {"kind": kind, "num_trajectories": 2, "turns": 3,
                            "arrival": {"kind": "poisson", "rate_per_s": 1.0}}  # fmt: skip
    data["workload"].update(edits)
    got, want = _problems(data)
    assert got == want
    if not want:
        full = scenario_model().model_validate(data)
        assert load_scenario(copy.deepcopy(data)).scenario.model_dump() == full.model_dump()


def test_a_narrowed_model_without_a_cluster_section_holds_cluster_none_alone():
    """The one-node model (``cluster: None`` alone, what a document without the section gets
    while ``sim.cluster`` is not imported: tests/cli/test_startup_imports.py) accepts what
    the model with the section accepts without one, with the same values, and refuses a
    section; a refused document is worded by the full model (``load_scenario``)."""
    one = _scenario_model(("chat",), cluster=False)
    many = _scenario_model(("chat",), cluster=True)
    assert one.model_fields["cluster"].annotation is type(None)
    full = scenario_model().model_fields["cluster"].annotation
    assert many.model_fields["cluster"].annotation == full
    assert list(one.model_fields) == list(many.model_fields) == list(scenario_model().model_fields)
    for data in (BASE, {**BASE, "cluster": None}):
        assert one.model_validate(data).model_dump() == many.model_validate(data).model_dump()
    cluster = {"nodes": [{"count": 2}]}
    with pytest.raises(ValidationError):
        one.model_validate({**BASE, "cluster": cluster})
    assert load_scenario({**BASE, "cluster": cluster}).scenario.cluster.n_nodes == 2
    bad = {**BASE, "cluster": {"nodes": [{"count": 0}], "extra": 1}}
    got, want = _problems(bad)
    assert got == want and len(want) == 2


def test_a_cluster_and_its_node_scenarios_share_one_narrowed_model():
    """Once ``sim.cluster.config`` is imported (as here), a document without the section
    gets the model with it: a cluster scenario's node scenarios build no second model."""
    import sim.cluster.config  # noqa: F401

    with_section, narrowed = scenario_model_for({**BASE, "cluster": {"nodes": [{"count": 2}]}})
    assert narrowed and scenario_model_for(BASE) == (with_section, True)


def test_the_policy_table_names_each_policy_s_module_in_the_registry_s_order():
    """``POLICY_MODULES``: each shipped pause policy is registered by the module the table
    names, and the registry (the ``pause_policy`` union) reads in the table's order."""
    for name, module in POLICY_MODULES.items():
        assert policy_class(name).__module__ == f"sim.policy.{module}"
    kinds = [m.model_fields["kind"].default for m in policy_options_models()]
    assert kinds[: len(POLICY_MODULES)] == list(POLICY_MODULES)
    full = _members(scenario_model().model_fields["pause_policy"].annotation)
    assert full == policy_options_models()


@pytest.mark.parametrize("policy", [*POLICY_MODULES, None])
def test_a_document_naming_one_policy_gets_a_model_holding_that_policy_alone(policy):
    """A document without a ``pause_policy`` section (None here) gets ``hold`` alone."""
    data = {**BASE, "pause_policy": {"kind": policy}} if policy else BASE
    model, narrowed = scenario_model_for(data)
    assert narrowed
    got = model.model_fields["pause_policy"].annotation
    assert got is policy_class(policy or "hold").Options
    assert list(model.model_fields) == list(scenario_model().model_fields)  # same order


@pytest.mark.parametrize("section", [None, "hold", {}, {"kind": None}, {"kind": "nope"}])
def test_a_document_naming_no_known_policy_gets_every_policy(section):
    """A section naming no shipped policy (a plug-in's name, none readable) keeps the
    whole registry in the narrowed model (``None``: the section written ``null``)."""
    model, narrowed = scenario_model_for({**BASE, "pause_policy": section})
    assert narrowed
    assert _members(model.model_fields["pause_policy"].annotation) == policy_options_models()


POLICY_FIELDS = st.sampled_from(
    ["kind", "resume", "prefetch_margin_s", "horizon_s", "mu_hbm", "ttl_s", "extra",
     "predictor", "preempt_swap"]
)  # fmt: skip
POLICY_VALUES = st.sampled_from(
    [None, 0, 1, -1, 2.5, "x", "naive", "speculative", [], {}, True, {"mode": "min"}]
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from([*POLICY_MODULES, "nope"]),
       edits=st.dictionaries(POLICY_FIELDS, POLICY_VALUES, max_size=3))  # fmt: skip
def test_narrowing_the_policy_never_changes_what_is_accepted_or_reported(kind, edits):
    data = {**copy.deepcopy(BASE), "pause_policy": {"kind": kind, **edits}}
    got, want = _problems(data)
    assert got == want
    if not want:
        full = scenario_model().model_validate(data)
        assert load_scenario(copy.deepcopy(data)).scenario.model_dump() == full.model_dump()


ALLOCATOR_KINDS = ["buddy", "contiguous", "paged", "paged_hash", "radix", "static"]


@pytest.mark.parametrize("kind", [*ALLOCATOR_KINDS, None])
def test_a_document_naming_one_allocator_gets_a_model_holding_that_kind_alone(kind):
    """Only the named kind's config model is built (``paged`` without the section, None
    here); it is the class the full union holds, and the section's default stays ``paged``."""
    data = {**BASE, "allocator": {"kind": kind}} if kind else BASE
    model, narrowed = scenario_model_for(data)
    assert narrowed
    full = _members(scenario_model().model_fields["allocator"].annotation)
    got = model.model_fields["allocator"].annotation
    assert got in full and got.model_fields["kind"].default == (kind or "paged")
    assert model.model_fields["allocator"].default == scenario_model().model_fields["allocator"].default
    assert model.model_fields["allocator"].default.kind == "paged"


@pytest.mark.parametrize("section", [None, "paged", {}, {"kind": None}, {"kind": "nope"}])
def test_a_document_naming_no_registered_allocator_gets_every_kind(section):
    model, narrowed = scenario_model_for({**BASE, "allocator": section})
    assert narrowed
    full = scenario_model().model_fields["allocator"].annotation
    assert _members(model.model_fields["allocator"].annotation) == _members(full)


ALLOCATOR_FIELDS = st.sampled_from(
    ["kind", "block_size", "max_tokens", "growth", "placement", "min_block_tokens",
     "eviction", "null_block", "extra", "reservation"]
)  # fmt: skip
ALLOCATOR_VALUES = st.sampled_from(
    [None, 0, 1, -1, 16, 2.5, "x", "lru", "first_fit", "double", [], {}, True]
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from([*ALLOCATOR_KINDS, "nope"]),
       edits=st.dictionaries(ALLOCATOR_FIELDS, ALLOCATOR_VALUES, max_size=3))  # fmt: skip
def test_narrowing_the_allocator_never_changes_what_is_accepted_or_reported(kind, edits):
    data = {**copy.deepcopy(BASE), "allocator": {"kind": kind, **edits}}
    got, want = _problems(data)
    assert got == want
    if not want:
        full = scenario_model().model_validate(data)
        assert load_scenario(copy.deepcopy(data)).scenario.model_dump() == full.model_dump()
