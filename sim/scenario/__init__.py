"""Scenarios: the YAML a user writes, validated, overridden and resolved.

    from sim.scenario import load_scenario, resolve
    loaded = load_scenario("workloads/chat_poisson.yaml", {"seed": 3})
    resolved = resolve(loaded)   # profiles, KV pool, allocator options

Invariant: user errors are one-line ``ConfigError``s ``file:line: field: message``.
"""

from sim.scenario.load import LoadedScenario, load_scenario, model_at, parse_set
from sim.scenario.resolve import Resolved, make_allocator_for, resolve
from sim.scenario.schema import SCHEMA_VERSION, json_schema, scenario_model

__all__ = [
    "SCHEMA_VERSION",
    "LoadedScenario",
    "Resolved",
    "json_schema",
    "load_scenario",
    "make_allocator_for",
    "model_at",
    "parse_set",
    "resolve",
    "scenario_model",
]
