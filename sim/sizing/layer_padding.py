"""vLLM's padding of a hybrid model's KV cache groups to one layer count.

vLLM puts the layers of each KV spec (full attention, one sliding window, one chunk, a
state kind...) into KV cache groups of ``group_size`` layers each, so that one pool of
``group_size`` tensors serves every group (``_get_kv_cache_groups_uniform_page_size``,
``vllm/v1/core/kv_cache_utils.py``)::

    group_size = min(layers per spec)            # the "1" of an n:1 pattern
    if max(layers per spec) < 1.5 * min(...):    # e.g. gpt-oss + an EAGLE layer, 12 + 13
        group_size = max(layers per spec)
    groups of a spec = cdiv(layers, group_size)  # the last one padded with empty layers
    # logger.warning("Add %d padding layers, may waste at most %.2f%% KV cache memory")

A block given to any group takes one page in every one of the ``group_size`` tensors, so
a spec of n layers costs ``cdiv(n, group_size) * group_size`` layers per block: gemma-3-27b
(52 sliding + 10 full) runs its sliding layers as 60, 8 of them padding.

With pipeline parallelism vLLM groups the whole model's layers once (spec by spec,
group i of a spec taking ``layers[i::groups]``) and each worker keeps as many tensors as
its largest group has layers on it; every group's block takes a page in each of them
(``get_kv_cache_config_from_groups``: ``group_size = max(len(group.layer_names))`` over the
worker's groups). So on a stage each spec costs ``groups x that stage's largest group``:
an uneven split pads too (gpt-oss-120b at PP 4: 5 sliding + 4 full layers on a stage
cost 5 + 5).

Invariant: a model with one spec, or whose specs all divide by the group size on one
stage, is returned unchanged (no padding); padded counts are never below the real ones.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LayerPadding:
    """vLLM's group size and each spec's layer count once padded (one stage)."""

    group_size_layers: int  # 0: no layer at all
    layers: dict[str, int]  # real layers per spec (group name)
    padded_layers: dict[str, int]  # cdiv(layers, group_size) * group_size

    def padding_layers(self, name: str) -> int:
        """Empty layers vLLM adds to spec ``name`` (0 when it divides)."""
        return self.padded_layers.get(name, 0) - self.layers.get(name, 0)

    @property
    def total_padding_layers(self) -> int:
        """Empty layers over every spec."""
        return sum(self.padded_layers.values()) - sum(self.layers.values())


def vllm_layer_padding(layers: dict[str, int]) -> LayerPadding:
    """vLLM's KV cache grouping of ``layers`` (spec name -> layers on one stage): the group
    size and each spec's padded layer count (module docstring). Specs with no layer on
    the stage are left out, as vLLM only sees the layers it holds."""
    held = {name: n for name, n in layers.items() if n > 0}
    if len(held) <= 1:  # one spec: vLLM's uniform path, one group, no padding
        return LayerPadding(max(held.values(), default=0), dict(layers), dict(layers))
    lo, hi = min(held.values()), max(held.values())
    size = hi if hi < lo * 1.5 else lo
    padded = {name: -(-n // size) * size if n > 0 else 0 for name, n in layers.items()}
    return LayerPadding(size, dict(layers), padded)


def vllm_stage_padding(layer_specs: list[tuple[str, ...]], stage_sizes: list[int]) -> list[LayerPadding]:
    """Each pipeline stage's grouping: ``layer_specs`` names the spec(s) of every layer in
    order, ``stage_sizes`` the layers of each stage (module docstring). One stage: the
    same as ``vllm_layer_padding`` of the whole model's counts."""
    where: dict[str, list[int]] = {}
    for i, names in enumerate(layer_specs):
        for name in names:
            where.setdefault(name, []).append(i)
    whole = vllm_layer_padding({name: len(ids) for name, ids in where.items()})
    size = whole.group_size_layers
    groups = {name: [ids[i :: -(-len(ids) // size)] for i in range(-(-len(ids) // size))]
              for name, ids in where.items()}  # fmt: skip
    out, start = [], 0
    for n in stage_sizes:
        inside = range(start, start + n)
        real = {name: sum(i in inside for i in ids) for name, ids in where.items()}
        if len(where) <= 1:
            out.append(LayerPadding(max(real.values(), default=0), real, dict(real)))
        else:
            largest = max(sum(i in inside for i in g) for gs in groups.values() for g in gs)
            padded = {name: len(gs) * largest for name, gs in groups.items()}
            out.append(LayerPadding(size, real, padded))
        start += n
    return out
