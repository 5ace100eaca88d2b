"""The ``mix`` workload's configuration and the whole ``workload`` union it nests.

Responsibility: ``MixWorkload`` (several workloads on one engine) and ``Workload``, the
union of every kind of ``sim.workload.kind_models.WORKLOAD_MODELS`` in its order: a mix's
components may be of any kind, so this module imports every kind's module. The full
scenario model (``kvsim schema``, and any document a narrowed model refuses) takes its
``workload`` section from here; ``sim.workload.config.Workload`` is this union.

Invariant: ``Workload`` holds exactly the kinds of ``WORKLOAD_MODELS``, in its order (the
order of the JSON Schema and of the valid kinds an error lists); a mix component is
never itself a mix. ``workload_union(plugins)`` is ``Workload`` when no plug-in kind is
registered, else the same union with the plug-in kinds after the shipped ones, at the top
level and in a mix's components alike (``sim.workload.kind_models.plugin_kinds``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

from pydantic import Field, create_model, model_validator

from sim.workload.common_config import MAX_COMPONENTS, WorkloadConfigModel
from sim.workload.kind_models import WORKLOAD_MODELS, workload_models


class MixWorkload(WorkloadConfigModel):
    """Several workloads on one engine, each with its own arrival process; ``names`` label
    them in the ``workload`` column (default: the kind, with ``_i`` when a kind repeats)."""

    kind: Literal["mix"] = "mix"
    components: list[Workload] = Field(min_length=1, max_length=MAX_COMPONENTS)
    names: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:-]{1,32}$")]] | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_mix_component(cls, data: Any) -> Any:
        # before the components' union: with plug-in kinds that union holds no mix
        comps = data.get("components") if isinstance(data, Mapping) else None
        if isinstance(comps, (list, tuple)) and any(_kind_of(c) == "mix" for c in comps):
            raise ValueError("a mix component cannot itself be a mix")
        return data

    @model_validator(mode="after")
    def _components(self):
        if self.names is not None:
            if len(self.names) != len(self.components):
                raise ValueError(
                    f"names has {len(self.names)} entries for {len(self.components)} components"
                )
            if len(set(self.names)) != len(self.names):
                raise ValueError("names must be unique")
        return self

    def labels(self) -> list[str]:
        """Each component's name in the ``workload`` column."""
        if self.names is not None:
            return list(self.names)
        kinds = [c.kind for c in self.components]
        return [k if kinds.count(k) == 1 else f"{k}_{i}" for i, k in enumerate(kinds)]


def _kind_of(component: Any) -> Any:
    """A component's ``kind``, given as a mapping or as a config model."""
    if isinstance(component, Mapping):
        return component.get("kind")
    return getattr(component, "kind", None)


_OTHERS = dict(zip([k for k in WORKLOAD_MODELS if k != "mix"], workload_models(), strict=True))
#: the shipped kinds' models, in the table's order
_SHIPPED = tuple(MixWorkload if k == "mix" else _OTHERS[k] for k in WORKLOAD_MODELS)
Workload = Annotated[Union[_SHIPPED], Field(discriminator="kind")]  # noqa: UP007
# MixWorkload names ``Workload`` before it is defined: pydantic resolves it from this
# module when the class is first built (the scenario model builds it; defer_build)


@functools.lru_cache(maxsize=16)
def workload_union(plugins: tuple[tuple[str, type], ...] = ()) -> Any:
    """The ``workload`` union with the plug-in kinds ``plugins`` ((name, config model), in
    registration order) after the shipped kinds; ``Workload`` itself when there is none."""
    if not plugins:
        return Workload
    extra = tuple(config for _, config in plugins)
    # no mix among the components (``_no_mix_component`` refuses one first): the schema
    # has one mix model, this one
    others = tuple(m for m in _SHIPPED if m is not MixWorkload)
    components = Annotated[Union[(*others, *extra)], Field(discriminator="kind")]  # noqa: UP007
    field = MixWorkload.model_fields["components"]  # its bounds, with the plug-ins' union
    mix = create_model(
        "MixWorkloadWithPlugins",
        __base__=MixWorkload,
        __doc__=MixWorkload.__doc__,
        components=(list[components], field),  # type: ignore[valid-type]
    )
    kinds = tuple(mix if m is MixWorkload else m for m in _SHIPPED)
    return Annotated[Union[(*kinds, *extra)], Field(discriminator="kind")]  # noqa: UP007
