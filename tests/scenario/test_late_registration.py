"""Plug-ins registered late are usable (issue 25 item 6): every registry a scenario or a
command names reads its contents when it is used, so a plug-in registered after
``sim.scenario.schema`` was imported and after ``scenario_model()`` was built is accepted
from then on, and gives the run of the shipped kind it copies.

The registries: allocator kinds (the prefix kinds ``radix``/``paged_hash`` among them),
schedulers, pause policies, routers (``cluster.router``), workload kinds (top level and
``mix`` components, ``kvsim workload sample``), a kind's tool times (``hints.source:
fitted``), eviction strategies (``allocator.eviction``, ``trace-replay --eviction``),
replay policies (``trace-replay --eviction``), regress runners (a suite's ``runner``),
profiles (``KVSIM_PROFILES``) and the plug-in loaders of ``sim.plugins``
(``allocators``, ``workloads``). Each plug-in below copies a shipped kind under another
name. The ``registries`` fixture puts every registry back as it was after each test."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Literal, get_args

import pytest
import yaml

import sim.cluster.routers as router_registry
import sim.memory.registry as alloc_registry
import sim.plugins as plugin_registry
import sim.policy.base as policy_registry
import sim.regress.runners.base as runner_registry
import sim.sched.base as sched_registry
import sim.workload.hints as hints_registry
from sim.cluster.config import ClusterSection
from sim.cluster.routers import RoundRobin
from sim.cluster.routers import register as register_router
from sim.errors import ConfigError, KvsimError
from sim.memory import PagedAllocator, allocator_kinds, register_allocator
from sim.policy import policy_names
from sim.policy.base import register
from sim.policy.fixed import Hold
from sim.prefix.eviction import EVICTION_STRATEGIES, LRU, register_strategy
from sim.prefix.replay_policies import REPLAY_POLICIES, register_replay_policy
from sim.regress.runners import register_runner, runner_names
from sim.run import run_scenario
from sim.scenario import load_scenario
from sim.scenario.schema import json_schema, scenario_model, scenario_model_for
from sim.sched import VllmV1Config, VllmV1Scheduler, register_scheduler
from sim.workload.agent_config import CodingAgentWorkload
from sim.workload.chat import requests_count, requests_driver
from sim.workload.coding_agent import coding_agent_driver
from sim.workload.common_config import RequestsWorkload
from sim.workload.hints import register_tool_times
from sim.workload.kinds import WORKLOADS, WorkloadKind, register_workload, workload_kind
from sim.workload.mix_config import Workload

ROOT = Path(__file__).resolve().parents[2]

REQUESTS = {
    "kind": "requests",
    "requests": [{"count": 4, "at_s": 0.0, "prompt_tokens": 300, "output_tokens": 8}],
}
BASE = {
    "schema_version": 1,
    "model": "llama-3.1-8b",
    "hardware": {"accelerator": "h100-sxm-80gb"},
    "workload": REQUESTS,
}
LATE = {
    **BASE,
    "allocator": {"kind": "paged_late", "block_size": 32},
    "scheduler": {"kind": "vllm_late", "max_num_seqs": 2},
    "pause_policy": {"kind": "hold_late"},
}
SAME = {
    **BASE,
    "allocator": {"kind": "paged", "block_size": 32},
    "scheduler": {"kind": "vllm_v1", "max_num_seqs": 2},
    "pause_policy": {"kind": "hold"},
}


class PagedLate(PagedAllocator):
    """The paged allocator under another name."""


class VllmLateConfig(VllmV1Config):
    kind: Literal["vllm_late"] = "vllm_late"  # type: ignore[assignment]


class VllmLate(VllmV1Scheduler):
    name = "vllm_late"
    Config = VllmLateConfig


class HoldLate(Hold):
    name = "hold_late"

    class Options(Hold.Options):
        kind: Literal["hold_late"] = "hold_late"  # type: ignore[assignment]


class RoundRobinLate(RoundRobin):
    kind = "round_robin_late"

    class Options(RoundRobin.Options):
        kind: Literal["round_robin_late"] = "round_robin_late"  # type: ignore[assignment]


class RequestsLate(RequestsWorkload):
    """The ``requests`` workload under another name."""

    kind: Literal["requests_late"] = "requests_late"  # type: ignore[assignment]


REQUESTS_LATE = WorkloadKind("requests_late", RequestsLate, requests_count, requests_driver)
REQUESTS_LATE_FIELDS = {k: v for k, v in REQUESTS.items() if k != "kind"}


class CodingAgentLate(CodingAgentWorkload):
    """The ``coding_agent`` workload under another name."""

    kind: Literal["coding_agent_late"] = "coding_agent_late"  # type: ignore[assignment]


CODING_AGENT_LATE = WorkloadKind(
    "coding_agent_late", CodingAgentLate, lambda cfg: cfg.num_trajectories, coding_agent_driver
)


class LruLate(LRU):
    name = "lru_late"


class FixedLate:
    """A regress runner whose metrics are its inputs."""

    name = "fixed_late"
    inputs_model = RequestsLate  # any model: the metrics are its request count

    def run(self, inputs, ctx):
        return {"count": sum(g.count for g in inputs.requests)}


#: every registry, as a module-level dict that is filled in place
TABLES = (
    alloc_registry._REGISTRY,
    sched_registry._REGISTRY,
    policy_registry._REGISTRY,
    router_registry._REGISTRY,
    WORKLOADS,
    EVICTION_STRATEGIES,
    REPLAY_POLICIES,
    runner_registry._RUNNERS,
    hints_registry._TOOL_TIMES,
)


@contextlib.contextmanager
def _restored():
    """Every registry put back as it was on leaving (in place: modules that imported a
    table by name see the same dict); the shipped kinds are loaded first."""
    # run the shipped loaders and import every shipped policy (each module registers once)
    allocator_kinds(), workload_kind("chat"), runner_names(), policy_names(), hints_registry.tool_time_kinds()
    saved = [dict(t) for t in TABLES]
    pending = {k: list(v) for k, v in plugin_registry._PENDING.items()}
    try:
        yield
    finally:
        for table, contents in zip(TABLES, saved, strict=True):
            table.clear()
            table.update(contents)
        plugin_registry._PENDING.clear()  # the loaders a test added and did not run go
        plugin_registry._PENDING.update(pending)


@pytest.fixture
def registries(monkeypatch):
    """Every registry put back as it was after the test (``_restored``)."""
    monkeypatch.delenv("KVSIM_PROFILES", raising=False)
    with _restored():
        yield


def _workload(kind: str = "requests_late") -> dict:
    return {**BASE, "workload": {**REQUESTS, "kind": kind}}


def _mix(kind: str) -> dict:
    component = {**REQUESTS, "kind": kind}
    return {**BASE, "workload": {"kind": "mix", "components": [component], "names": ["a"]}}


def _same_run(late, same) -> None:
    for key in ("requests_completed", "output_tokens_per_s", "peak_allocated_bytes"):
        assert late.summary[key] == same.summary[key], key
    assert late.steps.end_s.tolist() == same.steps.end_s.tolist()


# ------------------------------------------------------------ allocator, scheduler, policy
def test_kinds_registered_after_the_schema_was_built_validate_and_run(registries):
    before = scenario_model()  # built (and cached) before the plugins exist
    with pytest.raises(ConfigError):
        load_scenario(LATE)
    register_allocator("paged_late", PagedLate)
    register_scheduler(VllmLate)
    register(HoldLate)
    after = scenario_model()
    assert after is not before  # rebuilt for the new registries
    assert scenario_model() is after  # and cached while they stay as they are
    loaded = load_scenario(LATE)
    assert loaded.scenario.allocator.kind == "paged_late"
    assert loaded.scenario.scheduler.max_num_seqs == 2
    late, same = run_scenario(LATE), run_scenario(SAME)
    assert (late.summary["allocator"], late.summary["scheduler"]) == ("paged_late", "vllm_late")
    assert late.summary["pause_policy"] == "hold_late"
    _same_run(late, same)


def test_the_shipped_kinds_come_back_after_a_test_registered_more():
    late = ((alloc_registry._REGISTRY, "paged_late"), (sched_registry._REGISTRY, "vllm_late"),
            (policy_registry._REGISTRY, "hold_late"),
            (router_registry._REGISTRY, "round_robin_late"), (WORKLOADS, "requests_late"),
            (EVICTION_STRATEGIES, "lru_late"), (REPLAY_POLICIES, "belady_late"),
            (runner_registry._RUNNERS, "fixed_late"),
            (hints_registry._TOOL_TIMES, "coding_agent_late"))  # fmt: skip
    with _restored():
        register_allocator("paged_late", PagedLate)
        register_scheduler(VllmLate)
        register(HoldLate)
        register_router(RoundRobinLate)
        register_workload(REQUESTS_LATE)
        register_strategy(LruLate())
        register_replay_policy("belady_late", REPLAY_POLICIES["belady"])
        register_runner(FixedLate())
        register_tool_times("coding_agent_late", hints_registry._TOOL_TIMES["coding_agent"])
        plugin_registry.add_loader("allocators", lambda: None)
        for table, name in late:
            assert name in table
        assert plugin_registry._PENDING["allocators"]
    for table, name in late:
        assert name not in table
    assert {"coding_agent", "function_calling", "tree_search"} <= set(hints_registry.tool_time_kinds())
    assert not plugin_registry._PENDING.get("allocators")
    assert "chat" in WORKLOADS and "radix" in alloc_registry._REGISTRY


def test_an_allocator_loader_added_after_the_schema_was_built_runs_before_validation(
    registries,
):
    scenario_model()
    plugin_registry.add_loader("allocators", lambda: register_allocator("paged_late", PagedLate))
    doc = {**SAME, "allocator": {"kind": "paged_late", "block_size": 32}}
    assert load_scenario(doc).scenario.allocator.kind == "paged_late"


# ----------------------------------------------------------------------------- workloads
def test_a_workload_kind_registered_after_the_schema_was_built_validates_and_runs(registries):
    scenario_model(), load_scenario(BASE)  # the full and the narrowed models built
    with pytest.raises(ConfigError, match="workload.kind: unknown kind 'requests_late'; valid: "):
        load_scenario(_workload())
    register_workload(REQUESTS_LATE)
    model, narrowed = scenario_model_for(_workload())
    assert narrowed and model is not scenario_model()  # narrowed to the plug-in alone
    assert load_scenario(_workload()).scenario.workload == RequestsLate(**REQUESTS_LATE_FIELDS)
    assert type(scenario_model().model_validate(_workload()).workload) is RequestsLate
    late, same = run_scenario(_workload()), run_scenario(BASE)
    _same_run(late, same)
    assert set(late.requests.workload) == {"requests_late"}  # the kind labels its requests
    # --set workload.kind: the old kind's options are dropped by the plug-in's fields
    chat = {"kind": "chat", "num_requests": 4, "arrival": {"kind": "poisson", "rate_per_s": 1},
            "lengths": {"prompt_tokens": 300, "output_tokens": 8}}  # fmt: skip
    sets = {"workload.kind": "requests_late", "workload.requests": REQUESTS["requests"]}
    assert load_scenario({**BASE, "workload": chat}, sets).scenario.workload == (
        load_scenario(_workload()).scenario.workload
    )


def test_a_late_workload_kind_is_a_mix_component_and_listed_where_kinds_are(registries):
    scenario_model()
    with pytest.raises(ConfigError, match="components.0.kind"):
        load_scenario(_mix("requests_late"))
    register_workload(REQUESTS_LATE)
    loaded = load_scenario(_mix("requests_late"))
    assert type(loaded.scenario.workload.components[0]) is RequestsLate
    _same_run(run_scenario(_mix("requests_late")), run_scenario(_mix("requests")))
    with pytest.raises(ConfigError) as info:  # an unknown kind's error names the plug-in
        load_scenario(_workload("no_such_kind"))
    assert "multi_agent_team, requests, requests_late, tree_search" in str(info.value)
    schema = json_schema()  # kvsim schema: at the top level and in a mix's components
    assert "requests_late" in json.dumps(schema["properties"]["workload"])
    mixes = [name for name in schema["$defs"] if name.startswith("MixWorkload")]
    assert mixes == ["MixWorkloadWithPlugins"]  # one mix model, with the plug-in's components
    components = schema["$defs"]["MixWorkloadWithPlugins"]["properties"]["components"]
    assert "requests_late" in json.dumps(components)
    for inner in ("requests_late", "requests"):  # a mix in a mix, a plug-in kind inside or not
        nested = {"kind": "mix", "components": [_mix(inner)["workload"]]}
        with pytest.raises(ConfigError, match=r"^<scenario>: workload\.mix: a mix component "
                           r"cannot itself be a mix$"):  # fmt: skip
            load_scenario({**BASE, "workload": nested})


def test_the_shipped_workload_union_is_the_same_object_with_no_plug_in(registries):
    """No plug-in registered: the scenario's workload and cluster sections are the shipped
    types themselves (so ``kvsim schema`` prints the same bytes); with one, the schema
    gains it and loses it again once it is gone."""

    def sections() -> tuple[tuple, tuple]:
        fields = scenario_model().model_fields
        return get_args(fields["workload"].annotation), get_args(fields["cluster"].annotation)

    shipped = (get_args(get_args(Workload)[0]), (ClusterSection, type(None)))
    bare = json_schema()
    assert sections() == shipped
    register_workload(REQUESTS_LATE)
    register_router(RoundRobinLate)
    assert json_schema() != bare and sections() != shipped
    WORKLOADS.pop("requests_late"), router_registry._REGISTRY.pop("round_robin_late")
    assert json_schema() == bare and sections() == shipped


def test_a_workload_loader_added_after_the_schema_was_built_runs_for_a_kind_named(registries):
    scenario_model(), load_scenario(BASE)
    plugin_registry.add_loader("workloads", lambda: register_workload(REQUESTS_LATE))
    assert load_scenario(BASE).scenario.workload.kind == "requests"  # a shipped kind: not run
    assert "requests_late" not in WORKLOADS
    assert load_scenario(_workload()).scenario.workload.kind == "requests_late"


def _loop_message(loader) -> str:
    return (
        f"plug-in loader '{loader.__module__}.{loader.__qualname__}' of registry 'allocators' "
        "was added again while the registry's loaders ran (by itself or a loader it runs: a "
        "loop); add it once (sim.plugins.add_loader, docs/plugins.md)"
    )


@pytest.mark.parametrize("how", ["re-adds itself", "re-adds itself and looks up", "via another"])
def test_a_loader_added_again_while_loaders_run_is_refused_naming_it(registries, how):
    """A loader that adds itself back looped for ever (``load_plugins`` popped it again and
    again), one that also looks a name up recursed; so did two loaders adding each other.
    Each is refused before it runs a second time, and the look-ups work afterwards."""
    runs: list[str] = []

    def again():
        runs.append("again")
        if len(runs) > 20:  # unchecked, the test fails rather than hangs
            raise RuntimeError("the loader looped")
        plugin_registry.add_loader("allocators", other if how == "via another" else again)
        if how == "re-adds itself and looks up":
            allocator_kinds()

    def other():
        runs.append("other")
        plugin_registry.add_loader("allocators", again)

    allocator_kinds()  # the shipped loader run first
    plugin_registry.add_loader("allocators", again)
    with pytest.raises(KvsimError) as exc:
        allocator_kinds()
    assert str(exc.value) == _loop_message(again)
    assert runs == (["again", "other"] if how == "via another" else ["again"])
    assert not plugin_registry._PENDING["allocators"] and not plugin_registry._RUNNING
    assert "paged" in allocator_kinds()

    def once():
        runs.append("once")

    for _ in range(2):  # added again after its look-up is over: it runs again, once
        plugin_registry.add_loader("allocators", once)
        allocator_kinds()
    assert runs[-2:] == ["once", "once"]


def test_loaders_that_keep_adding_new_loaders_stop_at_the_bound(registries, monkeypatch):
    """New objects each time (no loader comes back): the bound on one look-up stops them."""
    monkeypatch.setattr(plugin_registry, "MAX_LOADERS_PER_LOOKUP", 5)
    runs: list[int] = []

    def chain():
        runs.append(1)
        if len(runs) > 20:  # unchecked, the test fails rather than hangs
            raise RuntimeError("the loaders looped")
        plugin_registry.add_loader("allocators", lambda: chain())

    allocator_kinds()
    plugin_registry.add_loader("allocators", chain)
    with pytest.raises(KvsimError, match=r"^plug-in loader '.*<lambda>' of registry "
                       r"'allocators' would be loader 6 run by one look-up: loaders keep "
                       r"adding loaders \(at most 5; docs/plugins.md\)$"):  # fmt: skip
        allocator_kinds()
    assert len(runs) == 5
    plugin_registry.add_loader("allocators", lambda: runs.append(0))  # one look-up, two
    plugin_registry.add_loader("allocators", lambda: runs.append(0))  # loaders: both run
    allocator_kinds()
    assert runs[-2:] == [0, 0]


def test_a_workload_loader_runs_for_a_mix_component_it_registers(registries):
    scenario_model()
    plugin_registry.add_loader("workloads", lambda: register_workload(REQUESTS_LATE))
    assert load_scenario(_mix("requests_late")).scenario.workload.components[0].kind == (
        "requests_late"
    )


def test_kvsim_validate_and_run_take_a_late_workload_kind(registries, tmp_path, run_cli):
    path = tmp_path / "late.yaml"
    path.write_text(yaml.safe_dump(_workload()))
    assert run_cli(["validate", str(path)])[0] == 2
    register_workload(REQUESTS_LATE)
    code, out, err = run_cli(["validate", str(path)])
    assert code == 0 and "workload requests_late" in out, out + err
    code, out, err = run_cli(["run", str(path), "--out", str(tmp_path / "run"), "--no-report"])
    assert code == 0, out + err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["requests_completed"] == 4


def test_kvsim_workload_sample_lists_a_late_agent_kind(registries, run_cli):
    """A kind given by name (no scenario file) is validated by the same union."""

    argv = ["workload", "sample", "coding_agent_late", "--n", "2", "--seed", "1", "--json"]
    assert run_cli(argv)[0] != 0
    register_workload(CODING_AGENT_LATE)
    code, out, err = run_cli(argv)
    assert code == 0, out + err
    same = run_cli([*argv[:2], "coding_agent", *argv[3:]])[1]
    late, shipped = json.loads(out), json.loads(same)
    assert late["kind"] == "coding_agent_late" and late["trajectories"] == shipped["trajectories"]
    assert len(late["trajectories"]) == 2


def test_a_late_agent_kind_takes_fitted_hints_once_its_tool_times_are_registered(registries):
    """``workload.hints.source: fitted`` reads the tool-time registry of the kind named."""
    agents = {"num_trajectories": 2, "arrival": {"kind": "fixed"}, "hints": {"source": "fitted"}}
    late = {**BASE, "workload": {"kind": "coding_agent_late", **agents}}
    register_workload(CODING_AGENT_LATE)
    with pytest.raises(ConfigError, match="source 'fitted' needs a kind with pause"):
        run_scenario(late)
    register_tool_times("coding_agent_late", hints_registry._TOOL_TIMES["coding_agent"])
    same = {**BASE, "workload": {"kind": "coding_agent", **agents}}
    _same_run(run_scenario(late), run_scenario(same))


def test_a_workload_kind_registered_before_the_schema_is_imported_validates():
    """In a fresh interpreter: the kind is registered first, then ``sim.scenario`` is
    imported and the document validated (narrowed, then the full model for a mix)."""
    code = f"""
import sys
from typing import Literal
from sim.workload.agent_config import CodingAgentWorkload
from sim.workload.chat import requests_count, requests_driver
from sim.workload.coding_agent import coding_agent_driver
from sim.workload.common_config import RequestsWorkload
from sim.workload.hints import register_tool_times
from sim.workload.kinds import WorkloadKind, register_workload

class RequestsLate(RequestsWorkload):
    kind: Literal["requests_late"] = "requests_late"

register_workload(WorkloadKind("requests_late", RequestsLate, requests_count, requests_driver))
assert "sim.scenario.schema" not in sys.modules
from sim.scenario import load_scenario
print(load_scenario({_workload()!r}).scenario.workload.kind,
      load_scenario({_mix("requests_late")!r}).scenario.workload.components[0].kind)
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=300, check=True)  # fmt: skip
    assert out.stdout.split() == ["requests_late", "requests_late"]


def test_a_workload_kind_needs_a_tagged_model_and_a_name_of_its_own(registries):
    with pytest.raises(TypeError, match=r"kind: Literal\['other'\]"):
        register_workload(WorkloadKind("other", RequestsLate, requests_count, requests_driver))
    with pytest.raises(TypeError, match="pydantic config model"):
        register_workload(WorkloadKind("other", dict, requests_count, requests_driver))

    class Requests(RequestsWorkload):
        kind: Literal["requests"] = "requests"

    with pytest.raises(ValueError, match="'requests' is already registered"):
        register_workload(WorkloadKind("requests", Requests, requests_count, requests_driver))
    assert WORKLOADS["requests"].config is RequestsWorkload
    assert "other" not in WORKLOADS
    register_workload(REQUESTS_LATE)
    register_workload(REQUESTS_LATE)  # again, with the same model (a module reloaded)
    assert WORKLOADS["requests_late"].config is RequestsLate


def test_a_plug_in_cannot_take_a_shipped_workload_name_before_the_shipped_kinds_load(
    registries,
):
    """Registered before ``sim.workload.builtin`` ran (``requests`` not in the registry
    yet), a plug-in under a shipped name is refused at once: the shipped kinds still load."""

    class Requests(RequestsWorkload):
        kind: Literal["requests"] = "requests"

    del WORKLOADS["requests"]
    with pytest.raises(ValueError, match=r"'requests' is a shipped kind \(sim\.workload\."
                       r"common_config\.RequestsWorkload\); register yours under"):  # fmt: skip
        register_workload(WorkloadKind("requests", Requests, requests_count, requests_driver))
    assert "requests" not in WORKLOADS
    register_workload(WorkloadKind("requests", RequestsWorkload, requests_count, requests_driver))
    assert WORKLOADS["requests"].config is RequestsWorkload


def test_a_plug_in_cannot_replace_a_shipped_kind_s_driver(registries):
    """Review 2026-12-02: the shipped config model with a driver of one's own took the
    shipped name and changed every run of it; refused, before and after the shipped load."""

    def my_driver(cfg, ctx):  # pragma: no cover - never run
        raise AssertionError

    with pytest.raises(ValueError, match="'chat' is already registered with the driver"):
        register_workload(WorkloadKind("chat", WORKLOADS["chat"].config, requests_count, my_driver))
    chat = WORKLOADS.pop("chat")
    with pytest.raises(ValueError, match=r"'chat' is a shipped kind \(its driver"):
        register_workload(WorkloadKind("chat", chat.config, requests_count, my_driver))
    assert "chat" not in WORKLOADS
    register_workload(WorkloadKind("chat", chat.config, requests_count, chat.driver.__wrapped__))


def test_a_router_kind_is_not_replaced_by_another_class(registries):
    class Sticky(RoundRobin):  # a plug-in reusing a shipped name
        pass

    with pytest.raises(ValueError, match="router kind 'round_robin' is already registered"):
        register_router(Sticky)
    assert router_registry._REGISTRY["round_robin"] is RoundRobin
    register_router(RoundRobin)  # the same class again (a module reloaded) is fine


# ------------------------------------------------------------------------------- routers
def test_a_router_registered_after_the_schema_was_built_validates_and_runs(registries):
    cluster = {"nodes": [{"count": 2}], "router": {"kind": "round_robin_late"}}
    late_doc = {**BASE, "cluster": cluster}
    same_doc = {**BASE, "cluster": {**cluster, "router": {"kind": "round_robin"}}}
    load_scenario(same_doc)
    with pytest.raises(ConfigError, match="round_robin"):
        load_scenario(late_doc)
    register_router(RoundRobinLate)
    loaded = load_scenario(late_doc)
    assert isinstance(loaded.scenario.cluster, ClusterSection)
    assert type(loaded.scenario.cluster.router) is RoundRobinLate.Options
    least = {**cluster, "router": {"kind": "least_load", "by": "kv"}}
    switched = load_scenario(
        {**BASE, "cluster": least}, {"cluster.router.kind": "round_robin_late"}
    )
    assert switched.scenario == loaded.scenario  # --set drops the old router's options
    unnamed = load_scenario({**BASE, "cluster": {"nodes": [{"count": 2}]}}).scenario.cluster
    assert unnamed.router == RoundRobin.Options()  # the shipped section's default
    late, same = run_scenario(late_doc), run_scenario(same_doc)
    for key in ("requests_completed", "output_tokens_per_s", "peak_allocated_bytes"):
        assert late.summary[key] == same.summary[key], key
    assert late.requests.node.tolist() == same.requests.node.tolist()


def test_a_router_or_scheduler_whose_options_are_not_tagged_with_its_name_is_refused(
    registries,
):
    """An ``Options`` (``Config``) inherited with its parent's tag would map the tag to two
    models in the scenario's union: refused at registration, and scenarios still load."""

    class Sticky(RoundRobin):
        kind = "sticky"

        class Options(RoundRobin.Options):
            stickiness: int = 1

    class VllmSticky(VllmV1Scheduler):
        name = "vllm_sticky"

    with pytest.raises(TypeError, match=r"^router kind 'sticky' needs a pydantic config model "
                       r"with a field kind: Literal\['sticky'\], got "):  # fmt: skip
        register_router(Sticky)
    with pytest.raises(TypeError, match=r"^scheduler 'vllm_sticky' needs .* Literal\['vllm_st"):
        register_scheduler(VllmSticky)
    assert "sticky" not in router_registry._REGISTRY
    assert "vllm_sticky" not in sched_registry._REGISTRY
    doc = {**BASE, "cluster": {"nodes": [{"count": 2}]}}
    assert load_scenario(doc).scenario.cluster.router.kind == "round_robin"


# ---------------------------------------------------------------- prefix: eviction, replay
def test_an_eviction_strategy_registered_late_is_an_allocator_option(registries):
    radix = {"kind": "radix", "block_size": 16, "eviction": "lru_late"}
    load_scenario({**BASE, "allocator": {**radix, "eviction": "lru"}})
    with pytest.raises(ConfigError, match="lru_late"):
        run_scenario({**BASE, "allocator": radix})
    register_strategy(LruLate())
    late = run_scenario({**BASE, "allocator": radix})
    same = run_scenario({**BASE, "allocator": {**radix, "eviction": "lru"}})
    _same_run(late, same)
    assert late.summary["prefix_hit_rate"] == same.summary["prefix_hit_rate"]


def _sessions(tmp_path: Path) -> Path:
    """Two Claude Code sessions of 64-token blocks sharing a prefix (global ids)."""
    path = tmp_path / "sessions.jsonl"
    rows = []
    for name, t0 in (("a", 0), ("b", 1)):
        reqs = [{"t": t0 + 10 * i, "in": (4 + i) * 64, "out": 1, "hash_ids": list(range(4 + i))}
                for i in range(3)]  # fmt: skip
        rows.append({"id": name, "block_size": 64, "hash_id_scope": "global", "requests": reqs})
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_trace_replay_takes_a_late_eviction_strategy_and_replay_policy(
    registries, tmp_path, run_cli
):
    sessions = _sessions(tmp_path)

    def replay(eviction: str) -> dict:
        argv = ["trace-replay", str(sessions), "--format", "claude-code", "--cache-tokens",
                "384", "--concurrency", "2", "--eviction", eviction, "--json"]  # fmt: skip
        code, out, err = run_cli(argv)
        assert code == 0, out + err
        # the same replay; the policy's name and its caveat (``bound``) aside
        return {k: v for k, v in json.loads(out).items() if k not in ("eviction", "bound")}

    assert run_cli(["trace-replay", str(sessions), "--format", "claude-code",
                    "--eviction", "belady_late"])[0] != 0  # fmt: skip
    register_strategy(LruLate())
    register_replay_policy("belady_late", REPLAY_POLICIES["belady"])
    assert replay("lru_late") == replay("lru")
    assert replay("belady_late") == replay("belady")


# -------------------------------------------------------------------------- regress runner
def test_a_regress_runner_registered_after_a_suite_was_loaded_runs(registries, tmp_path, run_cli):
    suite = tmp_path / "suite"
    suite.mkdir()
    case = {"name": "late", "runner": "fixed_late", "inputs": REQUESTS_LATE_FIELDS,
            "metrics": {"count": {"better": "higher"}}}  # fmt: skip
    (suite / "suite.yaml").write_text(yaml.safe_dump({"schema_version": 1, "cases": [case]}))
    code, _, err = run_cli(["regress", "--suite", str(suite)])
    assert code == 2 and "fixed_late" in err
    register_runner(FixedLate())
    code, out, err = run_cli(["regress", "--suite", str(suite), "--update"])
    assert code == 0, out + err
    baseline = json.loads((suite / "baselines" / "late.json").read_text())
    assert baseline["metrics"] == {"count": 4}


# ------------------------------------------------------------------------------ profiles
def test_a_profile_folder_named_after_the_schema_was_built_is_searched(
    registries, tmp_path, monkeypatch
):
    models = tmp_path / "models"
    models.mkdir()
    text = (ROOT / "hardware_profiles" / "models" / "llama-3.1-8b.yaml").read_text()
    data = yaml.safe_load(text)
    data["name"] = "llama-late"
    (models / "llama-late.yaml").write_text(yaml.safe_dump(data))
    doc = {**BASE, "model": "llama-late"}
    load_scenario(BASE)
    with pytest.raises(ConfigError, match="llama-late"):
        run_scenario(doc)
    monkeypatch.setenv("KVSIM_PROFILES", str(tmp_path))
    _same_run(run_scenario(doc), run_scenario(BASE))


# ---------------------------------------------------------------------------------- docs
def test_the_plug_in_page_example_runs(registries):
    """docs/plugins.md's example registers a kind after the schema was built and runs it."""
    scenario_model()
    text = (ROOT / "docs" / "plugins.md").read_text()
    (block,) = re.findall(r"```python\n(.*?)```", text, re.S)
    code = compile(block, "docs/plugins.md", "exec", dont_inherit=True)  # no __future__
    exec(code, {"__name__": "plugins_example"})
    assert WORKLOADS["burst"].config.__module__ == "plugins_example"
