"""Plugins registered late are usable: an allocator kind, a scheduler and a pause policy
registered after ``sim.scenario.schema`` was imported and after ``scenario_model()`` was
built are accepted by the next ``scenario_model()`` (the registries are read lazily), and
a scenario naming all three validates and runs, giving the run of the kinds they copy."""

from __future__ import annotations

from typing import Literal

import pytest

import sim.memory.registry as alloc_registry
import sim.policy.base as policy_registry
import sim.sched.base as sched_registry
from sim.errors import ConfigError
from sim.memory import PagedAllocator, register_allocator
from sim.policy.base import register
from sim.policy.fixed import Hold
from sim.run import run_scenario
from sim.scenario import load_scenario
from sim.scenario.schema import scenario_model
from sim.sched import VllmV1Config, VllmV1Scheduler, register_scheduler

BASE = {
    "schema_version": 1,
    "model": "llama-3.1-8b",
    "hardware": {"accelerator": "h100-sxm-80gb"},
    "workload": {
        "kind": "requests",
        "requests": [{"count": 4, "at_s": 0.0, "prompt_tokens": 300, "output_tokens": 8}],
    },
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


@pytest.fixture
def registries(monkeypatch):
    """Each registry replaced by a copy for the test (the shipped ones come back after)."""
    for module in (alloc_registry, policy_registry, sched_registry):
        monkeypatch.setattr(module, "_REGISTRY", dict(module._REGISTRY))


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
    for key in ("requests_completed", "output_tokens_per_s", "peak_allocated_bytes"):
        assert late.summary[key] == same.summary[key], key
    assert late.steps.end_s.tolist() == same.steps.end_s.tolist()


def test_the_shipped_kinds_come_back_after_a_test_registered_more(registries):
    assert "paged_late" not in alloc_registry._REGISTRY
    assert "vllm_late" not in sched_registry._REGISTRY
    assert "hold_late" not in policy_registry._REGISTRY
