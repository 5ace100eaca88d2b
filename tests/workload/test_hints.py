"""``workload.hints``: the KV hints a harness attaches to its calls (sim.workload.hints)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import sim.workload.hints as hints_registry
from sim.errors import ConfigError, KvsimError
from sim.policy import KVHint
from sim.workload.agent import TurnSpec
from sim.workload.coding_agent import fitted
from sim.workload.config import (
    AgentTraceWorkload,
    AgentWorkload,
    ClaudeCodeWorkload,
    CodingAgentWorkload,
    FunctionCallingWorkload,
    HumanInLoopWorkload,
    InteractiveCodingAgentWorkload,
    MultiAgentTeamWorkload,
    TreeSearchWorkload,
)
from sim.workload.distributions import Constant
from sim.workload.hints import (
    ANY_TOOL,
    HintsConfig,
    ToolTimes,
    dist_estimate,
    hint_emitter,
    tool_time_kinds,
)
from sim.workload.interactive import fitted as interactive_fitted
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
    with pytest.raises(ConfigError, match=r"workload\.hints\.source.*'claude_code'"):
        emitter(ClaudeCodeWorkload, source="fitted")


def test_dist_estimate_without_a_ppf_draws_from_its_stream():
    rng = np.random.default_rng(0)
    assert dist_estimate(Constant(value=3.0), "mean", 0.5, rng) == 3.0


@pytest.mark.parametrize("field, value", [("noise_factor", 0.5), ("quantile", 2.0)])
def test_bad_hint_options_are_refused(field, value):
    with pytest.raises(ValueError, match=field):
        HintsConfig(**{field: value})


class _Draws:
    """A plug-in's distribution without a ppf: every draw is ``value``."""

    min = max = None

    def __init__(self, value: float) -> None:
        self.value = value

    def sample(self, rng, n):
        return np.full(n, self.value)


class _Ppf(_Draws):
    """A plug-in's distribution with a ppf: every quantile is ``value``."""

    def ppf(self, q):
        return np.full(len(q), self.value)


def _plugin_tool_times(dist, scale=1.0):
    """A tool-time plug-in for the ``agent`` kind: ``dist`` for every tool."""

    def plugin_tool_times(cfg, ctx):
        return ToolTimes({ANY_TOOL: dist}, scale)

    return plugin_tool_times


@pytest.mark.parametrize(
    "dist, scale, estimate, shown",
    [
        (_Draws(math.nan), 1.0, "quantile", "nan"),  # NaN: every hint was 0 s (max(0, nan))
        (_Draws(math.nan), 1.0, "mean", "nan"),
        (_Ppf(math.inf), 1.0, "quantile", "inf"),  # inf: KVHint's ValueError mid-run
        (_Ppf(2.0), math.nan, "quantile", "nan"),  # the plug-in's scale
        (_Ppf(-math.inf), 1.0, "mean", "-inf"),
    ],
)
def test_a_tool_time_plugin_whose_estimate_is_not_finite_is_refused_naming_it(
    monkeypatch, dist, scale, estimate, shown
):
    tool_time_kinds()  # the shipped kinds' declared first (they would replace the plug-in)
    fn = _plugin_tool_times(dist, scale)
    monkeypatch.setitem(hints_registry._TOOL_TIMES, "agent", fn)
    with pytest.raises(KvsimError) as err:
        emitter(source="fitted", estimate=estimate)
    stat = "quantile 0.5" if estimate == "quantile" else "mean"
    assert str(err.value) == (
        f"tool times of workload kind 'agent' ({fn.__module__}.{fn.__qualname__}, "
        f"register_tool_times): the {stat} of category '*' is {shown} s; an estimate must be "
        "a finite number of seconds (check its distributions, scale and cap_s)"
    )


def test_a_tool_time_plugins_finite_estimates_still_give_hints(monkeypatch):
    """A finite estimate is taken; a negative one is clipped to 0 (as a plan clips the
    pauses it draws: a ``normal`` pause wider than its mean has a negative low quantile)."""
    tool_time_kinds()
    monkeypatch.setitem(hints_registry._TOOL_TIMES, "agent", _plugin_tool_times(_Ppf(0.8)))
    e = emitter(source="fitted")
    assert e.expected == {"*": 0.8}
    assert e.hint(turn(45.0), last=False) == KVHint(pin_for_s=1.0, demote="host", prefetch_at_s=0.8)
    monkeypatch.setitem(hints_registry._TOOL_TIMES, "agent", _plugin_tool_times(_Draws(-3.0)))
    assert emitter(source="fitted").expected_s(45.0, "tool") == 0.0


# ------------------------------------------------- source: fitted for every fitted agent kind
def _lognormal_clipped_mean(median, sigma, lo, hi):
    """E[min(max(X, lo), hi)] of a lognormal, in closed form (independent of the sampler)."""
    mu, phi = math.log(median), lambda z: 0.5 * (1 + math.erf(z / math.sqrt(2)))
    za, zb = (math.log(lo) - mu) / sigma, (math.log(hi) - mu) / sigma
    body = math.exp(mu + sigma**2 / 2) * (phi(zb - sigma) - phi(za - sigma))
    return body + lo * phi(za) + hi * (1 - phi(zb))


def _quantile_table_mean(q):
    """The exact mean of a piecewise-linear quantile function (trapezoids)."""
    p, v = np.asarray(q.p), np.asarray(q.values)
    return float(np.sum(np.diff(p) * (v[1:] + v[:-1]) / 2))


def test_fitted_hints_for_human_in_loop_read_think_and_tool_times():
    # the defaults: think LogNormal(median 60, sigma 1, 2..1800 s), tool (0.3, 0.6, ..10 s)
    med = emitter(HumanInLoopWorkload, source="fitted").expected
    assert set(med) == {"tool", "user"}
    assert med["user"] == pytest.approx(60.0, rel=0.06)  # 8192 draws: ~1.4% std error
    assert med["tool"] == pytest.approx(0.3, rel=0.04)
    mean = emitter(HumanInLoopWorkload, source="fitted", estimate="mean").expected
    assert mean["user"] == pytest.approx(_lognormal_clipped_mean(60.0, 1.0, 2.0, 1800.0), rel=0.06)
    assert mean["tool"] == pytest.approx(_lognormal_clipped_mean(0.3, 0.6, 1e-9, 10.0), rel=0.04)
    e = emitter(HumanInLoopWorkload, source="fitted")
    assert e.hint(turn(600.0, "user"), last=False) == KVHint(
        demote="host", prefetch_at_s=med["user"]
    )  # a human's minute: demoted, whatever the true wait
    assert e.hint(turn(9.0, "tool"), last=False).pin_for_s == pytest.approx(1.25 * med["tool"])


def test_fitted_hints_for_function_calling_read_tool_and_think_times():
    cfg = dict(tool_s={"kind": "constant", "value": 0.25},
               think_s={"kind": "lognormal", "median": 8.0, "sigma": 0.5})  # fmt: skip
    kind = FunctionCallingWorkload
    e = hint_emitter(
        kind(num_trajectories=1, arrival=ARRIVAL, hints={"source": "fitted"}, **cfg), Ctx()
    )
    assert e.expected["function"] == 0.25
    assert e.expected["user"] == pytest.approx(8.0, rel=0.03)


def test_fitted_hints_for_the_interactive_coding_agent_read_its_fitted_tables():
    kind = InteractiveCodingAgentWorkload
    fit = interactive_fitted(kind(num_trajectories=1, arrival=ARRIVAL))
    tool, human = fit.think_s["tool"], fit.think_s["human"]
    med = emitter(kind, source="fitted").expected
    assert med["tool"] == pytest.approx(float(np.interp(0.5, tool.p, tool.values)), rel=1e-12)
    assert med["human"] == pytest.approx(float(np.interp(0.5, human.p, human.values)), rel=1e-12)
    mean = emitter(kind, source="fitted", estimate="mean").expected
    assert mean["tool"] == pytest.approx(_quantile_table_mean(tool), rel=2e-3)
    assert mean["human"] == pytest.approx(_quantile_table_mean(human), rel=2e-3)
    # the plan's time_scale and max_pause_s apply to the estimate as to the pauses
    cap = med["human"]  # x3 puts the human median above the cap; the tool median below
    scaled = hint_emitter(
        kind(num_trajectories=1, arrival=ARRIVAL, time_scale=3.0, max_pause_s=cap,
             hints={"source": "fitted"}), Ctx(),
    ).expected  # fmt: skip
    assert scaled["human"] == cap
    assert scaled["tool"] == pytest.approx(min(3.0 * med["tool"], cap), rel=1e-12)


def test_fitted_hints_for_tree_search_and_multi_agent_team():
    e = emitter(TreeSearchWorkload, source="fitted")  # pause_s LogNormal(median 1, sigma 0.8)
    assert set(e.expected) == {"*"} and e.expected["*"] == pytest.approx(1.0, rel=0.04)
    team = emitter(MultiAgentTeamWorkload, source="fitted")  # round_pause_s: constant 0
    assert team.expected == {"*": 0.0}


@pytest.mark.parametrize(
    "kind, why",
    [(AgentTraceWorkload, "recorded tool times"), (ClaudeCodeWorkload, "recorded pauses")],
)
def test_fitted_is_refused_for_replayed_kinds_in_one_line(kind, why):
    with pytest.raises(ConfigError, match=rf"workload\.hints\.source.*{why}") as err:
        emitter(kind, source="fitted")
    assert "\n" not in str(err.value)


def test_retain_by_return_biases_the_sooner_return_higher():
    e = emitter(retain_by_return=True, retain_priority=5.0)
    assert e.hint(turn(1.0), last=False).retain_priority == 4.0
    assert e.hint(turn(45.0), last=False) == KVHint(
        retain_priority=-40.0, demote="host", prefetch_at_s=45.0
    )
    assert emitter().hint(turn(45.0), last=False).retain_priority == 0.0  # off by default


def test_the_kinds_with_tool_times_are_all_known_in_a_fresh_process():
    """The shipped drivers are imported on their first call (``sim.workload.builtin``), and
    their modules declare their kinds' tool times: the tool-time registry imports them
    before its first look-up, so a process that called no agent driver lists every kind
    (the list the ``source: fitted`` refusal names), as one that ran them all."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    code = """
import json
from sim.workload import workload_kind
from sim.workload.hints import tool_time_kinds
{first}
print(json.dumps(tool_time_kinds()))
"""
    root = Path(__file__).resolve().parents[2]
    kinds = ["agent", "coding_agent", "function_calling", "human_in_loop",
             "interactive_coding_agent", "multi_agent_team", "tree_search"]  # fmt: skip
    for first in ('workload_kind("chat")', "pass"):  # the shipped kinds looked up first, or not
        out = subprocess.run([sys.executable, "-c", code.format(first=first)], cwd=root,
                             capture_output=True, text=True, timeout=300, check=True)  # fmt: skip
        assert json.loads(out.stdout) == kinds, first
