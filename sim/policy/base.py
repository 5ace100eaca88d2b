"""The pause-policy protocol, its options, and the table and registry of policies by name.

Responsibility: where options are validated (pydantic, ``extra="forbid"``; errors become
one-line ``ConfigError``s naming ``pause_policy.<field>``), where the behaviour shared by
every policy lives (attaching a prefetch plan to an offload), ``register`` (the class
decorator every policy uses) and ``POLICY_MODULES``, which declares each shipped policy
(name -> its module of ``sim.policy``) without importing it. The look-ups by name
(``make_policy``, ``policy_class``, ...) are ``sim.policy.registry``'s: they import the
policies' modules, which import this one.

Invariant (registry): every name of ``POLICY_MODULES`` is registered by that module and
by no other class (tested).

Invariant: a policy is a pure function of ``PauseFacts`` (plus its options): no SimPy, no
clock, no state between calls, so it is unit-tested on hand-built facts and two calls with
equal facts give equal decisions.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field, ValidationError

from sim.config_model import ConfigModel
from sim.errors import ConfigError
from sim.policy.facts import Decision, PauseFacts
from sim.policy.resume import plan_prefetch


class PredictorOptions(ConfigModel):
    """How the engine predicts a tool's wait (scenario key ``pause_policy.predictor``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    mode: Literal["mean", "quantile", "min", "oracle"] = "mean"
    quantile: float = Field(0.5, ge=0, le=1)  # for mode 'quantile'
    window: int = Field(256, ge=1)  # recent waits kept per tool for quantiles
    prior_wait_s: float | None = Field(None, ge=0)  # a tool never seen; None = unknown


class PolicyOptions(ConfigModel):
    """Options every policy accepts (scenario key ``pause_policy``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    kind: str
    resume: Literal["naive", "speculative", "pipelined"] = "naive"  # rule 3.13
    prefetch_margin_s: float = Field(0.2, ge=0)  # speculative timer lead (E25: 0.2 s)
    # preemption by swap to host DRAM instead of drop-and-recompute: not run by the engine
    # yet, so a scenario that sets it is refused (sim.run.checks.check_pause_policy)
    preempt_swap: bool = False
    predictor: PredictorOptions = PredictorOptions()


class PausePolicy(ABC):
    """Decides, at each tool call, what happens to the trajectory's KV."""

    name: ClassVar[str]
    Options: ClassVar[type[PolicyOptions]] = PolicyOptions
    #: the policy reads ``PauseFacts.running_batch_bytes``: the engine sums the other
    #: running requests' KV for it (O(running) per pause). True unless a policy says it
    #: never reads that fact (False: the fact is 0.0), so a plug-in written before the
    #: flag still gets the real figure
    reads_running_batch: ClassVar[bool] = True
    #: whether the policy may copy a paused context back into HBM (an offload's reload):
    #: blocks a prefix cache then caches were not computed, so a run does not count its
    #: prefix churn (``metrics.count_prefix_churn``); True (the safe answer) unless a
    #: policy declares it never does
    reloads_kv: ClassVar[bool] = True

    def __init__(self, options: PolicyOptions | None = None) -> None:
        self.options = options if options is not None else self.Options()

    @abstractmethod
    def decide(self, facts: PauseFacts) -> Decision:
        """The action for one pause."""

    def decide_many(self, facts: Sequence[PauseFacts]) -> list[Decision]:
        """Pauses starting in the same step; policies with a shared budget override this."""
        return [self.decide(f) for f in facts]

    def offload(self, action: str, facts: PauseFacts, reason: str) -> Decision:
        """An offload decision with this policy's resume plan attached."""
        plan = plan_prefetch(self.options.resume, facts, action, self.options.prefetch_margin_s)
        return Decision(action, reason, prefetch=plan)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.options!r})"


#: every shipped pause policy -> its module of ``sim.policy``, in the order the registry
#: reads (the ``pause_policy`` union's order: its JSON Schema); ``sim.policy.registry``
#: imports a module when one of its policies is asked for
POLICY_MODULES: dict[str, str] = {
    "break_even": "break_even",
    "hold": "fixed",
    "recompute": "fixed",
    "offload_host": "fixed",
    "offload_nvme": "fixed",
    "hints": "hinted",
    "min_waste": "min_waste",
    "ttl_pin": "ttl_pin",
}

#: name -> policy class, as registered (shipped policies when their module is imported)
_REGISTRY: dict[str, type[PausePolicy]] = {}


def register(cls: type[PausePolicy]) -> type[PausePolicy]:
    """Class decorator: make ``cls`` reachable by ``cls.name``. A shipped policy's name is
    refused to any other class, whether its module is imported yet or not."""
    module = POLICY_MODULES.get(cls.name)
    taken = module is not None and cls.__module__ != f"sim.policy.{module}"
    if taken or cls.name in _REGISTRY:
        raise ValueError(f"pause policy {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def parse_options(cls: type[PausePolicy], data: dict[str, Any]) -> PolicyOptions:
    """Validate a policy's options; the first problem becomes a one-line ConfigError."""
    try:
        return cls.Options.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(["pause_policy", *(str(p) for p in err["loc"])])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            valid = ", ".join(sorted(cls.Options.model_fields))
            msg = f"unknown option for pause policy {cls.name!r}; valid: {valid}"
        raise ConfigError(msg, field=field) from None
