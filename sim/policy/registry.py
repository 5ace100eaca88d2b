"""The pause policies by name: ``make_policy('break_even', horizon_s=30)`` and the registry read.

Responsibility: one place where a policy name becomes an object (``make_policy``,
``policy_class``) and where the registry is read whole (``policy_names``,
``policy_options_models``, ``options_union``: the ``pause_policy`` section's type). A
shipped policy's module (``sim.policy.base.POLICY_MODULES``) is imported when one of its
names is asked for, and every one when the registry is read whole or a name is unknown
(its error lists every policy), so ``kvsim validate`` of a scenario imports only the
policy it names.

Invariant: the registry reads in ``POLICY_MODULES``' order, then the policies registered
besides it (plug-ins) in registration order, whichever module was imported first; a
policy registered at any time is found (read at each call).
"""

from __future__ import annotations

from typing import Annotated, Any, Union

from pydantic import Field

from sim.errors import InvariantError, UnknownNameError
from sim.policy.base import (
    _REGISTRY,
    POLICY_MODULES,
    PausePolicy,
    PolicyOptions,
    parse_options,
)


def _import(module: str) -> None:
    """Import one module of ``POLICY_MODULES`` (each by name, so the import graph shows
    it), which registers its policies."""
    if module == "break_even":
        from sim.policy import break_even  # noqa: F401
    elif module == "fixed":
        from sim.policy import fixed  # noqa: F401
    elif module == "hinted":
        from sim.policy import hinted  # noqa: F401
    elif module == "min_waste":
        from sim.policy import min_waste  # noqa: F401
    elif module == "ttl_pin":
        from sim.policy import ttl_pin  # noqa: F401
    else:
        raise ValueError(f"no pause policy module {module!r}")


def _registry() -> dict[str, type[PausePolicy]]:
    """Every policy, each declared module imported, in the registry's order."""
    for module in dict.fromkeys(POLICY_MODULES.values()):
        _import(module)
    missing = [name for name in POLICY_MODULES if name not in _REGISTRY]
    if missing:  # their modules were imported, so importing them again registers nothing
        raise InvariantError(
            f"shipped pause policies {', '.join(missing)} were removed from the registry "
            "after their modules registered them"
        )
    declared = {name: _REGISTRY[name] for name in POLICY_MODULES}
    return {**declared, **{n: c for n, c in _REGISTRY.items() if n not in POLICY_MODULES}}


def policy_names() -> list[str]:
    return sorted(_registry())


def policy_class(kind: str) -> type[PausePolicy]:
    """The policy registered as ``kind``, importing its module alone when it is declared."""
    if isinstance(kind, str) and kind not in _REGISTRY and kind in POLICY_MODULES:
        _import(POLICY_MODULES[kind])
    try:
        return _REGISTRY[kind]
    except KeyError:
        raise UnknownNameError("pause policy", str(kind), list(_registry())) from None


def make_policy(kind: str | PolicyOptions, **options: Any) -> PausePolicy:
    """``make_policy('break_even', horizon_s=30)`` or from a validated options object."""
    if isinstance(kind, PolicyOptions):
        return policy_class(kind.kind)(kind)
    cls = policy_class(kind)
    return cls(parse_options(cls, {"kind": kind, **options}))


def policy_options_models() -> tuple[type[PolicyOptions], ...]:
    """Every registered policy's options model, in the registry's order (read at each call:
    a policy registered late is as visible as a shipped one)."""
    return tuple(cls.Options for cls in _registry().values())


def options_union() -> Any:
    """The pydantic type of a ``pause_policy`` section: every policy's options by ``kind``."""
    classes = policy_options_models()
    if len(classes) == 1:
        return classes[0]
    return Annotated[Union[classes], Field(discriminator="kind")]  # noqa: UP007
