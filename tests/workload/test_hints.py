"""``workload.hints``: the KV hints a harness attaches to its calls (sim.workload.hints)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sim.errors import ConfigError
from sim.policy import KVHint
from sim.workload.agent import TurnSpec
from sim.workload.coding_agent import fitted
from sim.workload.config import AgentWorkload, CodingAgentWorkload, HumanInLoopWorkload
from sim.workload.distributions import Constant
from sim.workload.hints import HintsConfig, dist_estimate, hint_emitter
from sim.workload.rng import Streams

ARRIVAL = {"kind": "fixed"}


class Ctx:
    field_prefix = "workload"

    def __init__(self, seed: int = 0) -> None:
        self.streams = Streams(seed)

    def resolve(self, path):
        return path


def emitter(kind=AgentWorkload, seed=0, tool_time_scale=None, **hints):
    extra = {"turns": 3} if kind is AgentWorkload else {}
    if tool_time_scale is not None:
        extra["tool_time_scale"] = tool_time_scale
    cfg = kind(num_trajectories=1, arrival=ARRIVAL, hints=hints, **extra)
    return hint_emitter(cfg, Ctx(seed))


def turn(pause_s, category="tool"):
    return TurnSpec(pause_s, 10, 10, category=category)


def test_exact_hints_pin_short_waits_and_demote_long_ones():
    e = emitter()
    assert e.hint(turn(1.0), last=False) == KVHint(pin_for_s=1.25, demote="host", prefetch_at_s=1.0)
    assert e.hint(turn(45.0), last=False) == KVHint(demote="host", prefetch_at_s=45.0)
    assert e.hint(None, last=True) == KVHint(release=True)
    assert e.hint(None, last=False) is None  # a fork follows: no pause of its own
    quiet = emitter(release=False, prefetch=False, demote="nvme", retain_priority=2)
    assert quiet.hint(None, last=True) is None
    assert quiet.hint(turn(9.0), last=False) == KVHint(retain_priority=2, demote="nvme")
    assert emitter(enabled=False) is None


def test_noise_is_a_seeded_lognormal_factor():
    first = emitter(noise_factor=3.0, seed=7).expected_s(10.0, "tool")
    assert first == emitter(noise_factor=3.0, seed=7).expected_s(10.0, "tool") != 10.0
    e = emitter(noise_factor=3.0, seed=1)
    logs = np.log([e.expected_s(10.0, "tool") / 10.0 for _ in range(4000)])
    assert abs(logs.mean()) < 0.05 and abs(logs.std() - math.log(3.0)) < 0.05
    assert emitter(seed=1).expected_s(10.0, "tool") == 10.0  # noise_factor 1: exact


def test_fitted_hints_read_the_kinds_tool_time_distributions():
    cfg = CodingAgentWorkload(num_trajectories=1, arrival=ARRIVAL, tool_time_scale=2.0)
    fit = fitted(cfg)
    e = emitter(CodingAgentWorkload, source="fitted", tool_time_scale=2.0)
    for name, c in fit.categories.items():
        median = float(c.tool_s.ppf(np.array([0.5]))[0])
        assert e.expected[name] == pytest.approx(2.0 * median, rel=1e-12)
    mean = emitter(CodingAgentWorkload, source="fitted", estimate="mean")
    for name, c in fit.categories.items():
        u = (np.arange(4096) + 0.5) / 4096
        assert mean.expected[name] == pytest.approx(float(c.tool_s.ppf(u).mean()), rel=1e-12)
    # the agent kind: its one pause_s distribution; a constant's median is itself
    assert emitter(source="fitted").expected == {"*": 1.0}
    assert emitter(source="fitted").expected_s(45.0, "anything") == 1.0


def test_fitted_is_refused_for_a_kind_without_tool_times():
    with pytest.raises(ConfigError, match=r"workload\.hints\.source.*'human_in_loop'"):
        emitter(HumanInLoopWorkload, source="fitted")


def test_dist_estimate_without_a_ppf_draws_from_its_stream():
    rng = np.random.default_rng(0)
    assert dist_estimate(Constant(value=3.0), "mean", 0.5, rng) == 3.0


@pytest.mark.parametrize("field, value", [("noise_factor", 0.5), ("quantile", 2.0)])
def test_bad_hint_options_are_refused(field, value):
    with pytest.raises(ValueError, match=field):
        HintsConfig(**{field: value})
