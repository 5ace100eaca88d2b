"""The pause-policy protocol, its options, and the registry of policies by name.

Responsibility: one place where a policy name becomes an object (``make_policy``), where
options are validated (pydantic, ``extra="forbid"``; errors become one-line
``ConfigError``s naming ``pause_policy.<field>``), and where the behaviour shared by every
policy lives: attaching a prefetch plan to an offload. ``POLICY_MODULES`` declares each
shipped policy (name -> its module of ``sim.policy``) without importing it: a module is
imported when one of its names is asked for (``policy_class``), and
every declared module when the whole registry is read (``policy_names``,
``policy_options_models``, an unknown name's error), so ``kvsim validate`` of a scenario
imports only the policy it names.

Invariant (registry): every name of ``POLICY_MODULES`` is registered by that module
(tested); the registry reads in the table's order, then the policies registered besides
it (plug-ins) in registration order, whichever module was imported first.

Invariant: a policy is a pure function of ``PauseFacts`` (plus its options): no SimPy, no
clock, no state between calls, so it is unit-tested on hand-built facts and two calls with
equal facts give equal decisions.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sim.errors import ConfigError, UnknownNameError
from sim.policy.facts import Decision, PauseFacts
from sim.policy.resume import plan_prefetch


class PredictorOptions(BaseModel):
    """How the engine predicts a tool's wait (scenario key ``pause_policy.predictor``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    mode: Literal["mean", "quantile", "min", "oracle"] = "mean"
    quantile: float = Field(0.5, ge=0, le=1)  # for mode 'quantile'
    window: int = Field(256, ge=1)  # recent waits kept per tool for quantiles
    prior_wait_s: float | None = Field(None, ge=0)  # a tool never seen; None = unknown


class PolicyOptions(BaseModel):
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
#: reads (the ``pause_policy`` union's order: its JSON Schema)
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

_REGISTRY: dict[str, type[PausePolicy]] = {}


def _import_module(module: str) -> None:
    """Import ``sim.policy.<module>`` (one of ``POLICY_MODULES``'), which registers its
    policies."""
    importlib.import_module(f"sim.policy.{module}")


def _load_all() -> dict[str, type[PausePolicy]]:
    """The registry with every declared policy imported, in the registry's order: the
    table's, then the plug-ins' registration order."""
    for module in dict.fromkeys(POLICY_MODULES.values()):
        _import_module(module)
    declared = {name: _REGISTRY[name] for name in POLICY_MODULES}
    return {**declared, **{n: c for n, c in _REGISTRY.items() if n not in POLICY_MODULES}}


def register(cls: type[PausePolicy]) -> type[PausePolicy]:
    """Class decorator: make ``cls`` reachable by ``cls.name``."""
    module = POLICY_MODULES.get(cls.name)
    if module is not None and cls.__module__ != f"sim.policy.{module}":
        _import_module(module)  # a shipped name taken by another class: refused below
    if cls.name in _REGISTRY:
        raise ValueError(f"pause policy {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def policy_names() -> list[str]:
    return sorted(_load_all())


def policy_class(kind: str) -> type[PausePolicy]:
    """The policy registered as ``kind``, importing its module alone when it is declared."""
    if kind not in _REGISTRY and isinstance(kind, str) and kind in POLICY_MODULES:
        _import_module(POLICY_MODULES[kind])
    try:
        return _REGISTRY[kind]
    except KeyError:
        raise UnknownNameError("pause policy", str(kind), list(_load_all())) from None


def make_policy(kind: str | PolicyOptions, **options: Any) -> PausePolicy:
    """``make_policy('break_even', horizon_s=30)`` or from a validated options object."""
    if isinstance(kind, PolicyOptions):
        return policy_class(kind.kind)(kind)
    cls = policy_class(kind)
    return cls(parse_options(cls, {"kind": kind, **options}))


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


def policy_options_models() -> tuple[type[PolicyOptions], ...]:
    """Every registered policy's options model, in the registry's order (read at each call:
    a policy registered late is as visible as a shipped one)."""
    return tuple(cls.Options for cls in _load_all().values())


def options_union() -> Any:
    """The pydantic type of a ``pause_policy`` section: every policy's options by ``kind``."""
    classes = policy_options_models()
    if len(classes) == 1:
        return classes[0]
    return Annotated[Union[classes], Field(discriminator="kind")]  # noqa: UP007
