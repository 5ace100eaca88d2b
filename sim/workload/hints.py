"""Agent KV hints from the workload: what a harness would tell the engine at each pause.

Responsibility: ``workload.hints`` (``HintsConfig``) and ``HintEmitter``, which attaches a
``sim.policy.KVHint`` to each call of an agent trajectory (for the pause after it):
  * the expected return time E of the pause: ``source: exact`` uses the pause's true length;
    ``source: fitted`` uses the kind's own tool-time distribution of the next call's tool
    category (``estimate: quantile`` at ``quantile``, default the median; or ``estimate:
    mean``), registered per kind with ``register_tool_times``; either is multiplied by a
    seeded lognormal factor whose geometric standard deviation is ``noise_factor`` (1 = no
    noise): exp(ln(noise_factor) x N(0, 1)), from the ``hints`` stream;
  * E <= ``pin_max_s``: ``pin_for_s = E x pin_slack`` (a lease with a margin; then the
    ``demote`` tier); longer: ``demote`` with ``prefetch_at_s = E`` (when ``prefetch``);
    every pause hint carries ``retain_priority`` (minus E with ``retain_by_return``: the
    engine then keeps the KV expected back soonest longest);
  * a trajectory's last call carries ``release`` (when ``release``): the session is over.
A call followed by a fork or a spawn (no next turn on its line) carries no hint.

Invariant: hints never change the plan (they are drawn from their own stream, after the
plan); the same seed gives the same hints; a kind without a registered tool-time
distribution refuses ``source: fitted`` in one line naming ``workload.hints.source``; a
fitted estimate that is not finite (NaN or inf, from a kind's tool-time plug-in) is
refused in one line naming the plug-in, before the run (a negative one is clipped to 0,
as the plans clip the pauses they draw).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from pydantic import ConfigDict, Field

from sim.config_model import ConfigModel
from sim.errors import ConfigError, KvsimError
from sim.lazy_numpy import numpy_on_first_use
from sim.plugins import load_plugins
from sim.policy import KVHint
from sim.workload.distributions import MAX_TIME_S
from sim.workload.kinds import workload_kind

if TYPE_CHECKING:
    import numpy as np
else:
    np = numpy_on_first_use(globals())

#: points of the quantile grid a distribution's mean is taken over (kinds with a ppf)
MEAN_GRID = 4096
#: draws a distribution without a ppf is summarised from (``hints/fit`` stream)
FIT_DRAWS = 8192
#: the category key of a distribution every tool shares
ANY_TOOL = "*"


class HintsConfig(ConfigModel):
    """``workload.hints``: the harness's KV hints (docs/pause_policies.md, Agent KV hints)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    enabled: bool = True
    source: Literal["exact", "fitted"] = "exact"
    estimate: Literal["quantile", "mean"] = "quantile"  # fitted: the statistic taken as E
    quantile: float = Field(0.5, ge=0, le=1)
    noise_factor: float = Field(1.0, ge=1, le=1e3)  # geometric std of E's error (1: exact)
    pin_max_s: float = Field(2.0, ge=0, le=MAX_TIME_S)  # pin when E is at most this
    pin_slack: float = Field(1.25, ge=1, le=100)  # the lease is E x this
    demote: Literal["host", "nvme"] = "host"
    prefetch: bool = True  # demoted pauses say when they expect to return
    retain_priority: float = Field(0.0, ge=-1e6, le=1e6)
    # the bias by return: retain_priority - E (seconds), so the sooner back is kept longer
    retain_by_return: bool = False
    release: bool = True  # the last call releases the session's KV


class ToolTimes(NamedTuple):
    """Where a kind's pauses come from: a distribution per tool category (``ANY_TOOL``: one
    for every category), the plan's time scale, and the cap the plan clips each pause at."""

    dists: dict[str, Any]
    scale: float = 1.0
    cap_s: float | None = None


#: kind -> (cfg, ctx) -> ToolTimes (or its first two fields as a tuple)
_TOOL_TIMES: dict[str, Callable[[Any, Any], tuple]] = {}
#: kind -> why it has no pause distribution (its refusal of ``source: fitted`` says so)
_NO_TOOL_TIMES: dict[str, str] = {}


def register_tool_times(kind: str, fn: Callable[[Any, Any], tuple]):
    """Declare where ``kind`` draws its tool times from (``source: fitted`` reads it)."""
    _TOOL_TIMES[kind] = fn


def refuse_tool_times(kind: str, reason: str) -> None:
    """Declare that ``kind`` has no pause distribution, and why (e.g. it replays a trace)."""
    _NO_TOOL_TIMES[kind] = reason


def tool_time_kinds() -> list[str]:
    """The kinds with tool times, the shipped ones included (``_declared``)."""
    _declared()
    return sorted(_TOOL_TIMES)


def _declared() -> None:
    """Run the loaders that declare the shipped kinds' tool times: the shipped kinds'
    (``sim.workload.builtin``), which adds the ``tool_times`` loader that imports their
    driver modules (each declares its kind's on import)."""
    load_plugins("workloads")
    load_plugins("tool_times")


def dist_estimate(
    dist: Any, estimate: str, q: float, rng: np.random.Generator,
    scale: float = 1.0, cap_s: float | None = None,
) -> float:  # fmt: skip
    """The mean or the ``q`` quantile of a distribution's draws clipped to its bounds,
    times ``scale``, capped at ``cap_s`` (as a plan draws its pauses): through its ppf when
    it has one (exact on a grid), else from ``FIT_DRAWS`` seeded draws."""
    exact_q = hasattr(dist, "ppf") and estimate == "quantile"
    if exact_q:
        x = np.asarray(dist.ppf(np.array([q])), dtype=np.float64)
    elif hasattr(dist, "ppf"):
        x = np.asarray(dist.ppf((np.arange(MEAN_GRID) + 0.5) / MEAN_GRID), dtype=np.float64)
    else:
        x = dist.sample(rng, FIT_DRAWS)
    if dist.min is not None or dist.max is not None:
        x = np.clip(x, dist.min, dist.max)
    x = scale * x
    if cap_s is not None:
        x = np.minimum(x, cap_s)  # monotone: a quantile stays exact
    if exact_q:
        return float(x[0])
    return float(np.quantile(x, q)) if estimate == "quantile" else float(x.mean())


class HintEmitter:
    """The hints of one workload's trajectories (shared by them: one ``hints`` stream)."""

    def __init__(self, cfg: HintsConfig, expected: dict[str, float], rng: np.random.Generator):
        self.cfg = cfg
        self.expected = expected  # fitted: category -> E (seconds); empty for exact
        self.rng = rng
        self.sigma = math.log(cfg.noise_factor)

    def expected_s(self, true_wait_s: float, category: str) -> float:
        c = self.cfg
        if c.source == "exact":
            e = true_wait_s
        else:
            e = self.expected.get(category, self.expected.get(ANY_TOOL, true_wait_s))
        if self.sigma > 0:
            e *= math.exp(self.sigma * float(self.rng.standard_normal()))
        return max(0.0, e)

    def hint(self, nxt: Any, last: bool) -> KVHint | None:
        """The hint of a call: ``nxt`` the next turn on its line (None: a fork, a spawn or
        the end follows), ``last`` whether it is the trajectory's last call."""
        c = self.cfg
        if last:
            return KVHint(release=True) if c.release else None
        if nxt is None:
            return None
        e = self.expected_s(nxt.pause_s, nxt.category)
        retain = c.retain_priority - e if c.retain_by_return else c.retain_priority
        if e <= c.pin_max_s:
            return KVHint(
                pin_for_s=e * c.pin_slack, retain_priority=retain, demote=c.demote,
                prefetch_at_s=e if c.prefetch else None,
            )  # fmt: skip
        return KVHint(
            retain_priority=retain, demote=c.demote, prefetch_at_s=e if c.prefetch else None
        )


def hint_emitter(wcfg: Any, ctx: Any) -> HintEmitter | None:
    """The emitter of a workload config (None when ``hints`` is absent or disabled)."""
    cfg: HintsConfig | None = getattr(wcfg, "hints", None)
    if cfg is None or not cfg.enabled:
        return None
    expected: dict[str, float] = {}
    if cfg.source == "fitted":
        workload_kind(wcfg.kind)  # a known kind (one-line refusal otherwise)
        _declared()  # the shipped kinds' tool times
        fn = _TOOL_TIMES.get(wcfg.kind)
        if fn is None:
            why = _NO_TOOL_TIMES.get(wcfg.kind, "has no pause distribution")
            raise ConfigError(
                f"source 'fitted' needs a kind with pause distributions "
                f"({', '.join(tool_time_kinds())}); {wcfg.kind!r} {why}: use 'exact'",
                field=f"{ctx.field_prefix}.hints.source",
            )
        tt = ToolTimes(*fn(wcfg, ctx))
        rng = ctx.streams("hints/fit")
        expected = {
            k: dist_estimate(d, cfg.estimate, cfg.quantile, rng, tt.scale, tt.cap_s)
            for k, d in tt.dists.items()
        }
        for k, e in expected.items():  # once per category and run
            if not math.isfinite(e):
                raise _bad_estimate(wcfg.kind, fn, k, e, cfg)
    return HintEmitter(cfg, expected, ctx.streams("hints"))


def _bad_estimate(kind: str, fn: Callable, category: str, e: float, cfg: HintsConfig) -> KvsimError:
    """The refusal of a tool-time estimate that is not a finite number (NaN made every hint
    0 s: ``max(0, nan)``), naming the kind's tool-time plug-in. A negative one is not
    refused: it is the statistic of draws a plan clips at 0 (a ``normal`` pause whose
    ``std`` exceeds its ``mean``), and ``expected_s`` clips it the same way."""
    name = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
    stat = f"quantile {cfg.quantile:g}" if cfg.estimate == "quantile" else "mean"
    return KvsimError(
        f"tool times of workload kind {kind!r} ({name}, register_tool_times): the {stat} of "
        f"category {category!r} is {e!r} s; an estimate must be a finite number of seconds "
        "(check its distributions, scale and cap_s)"
    )
