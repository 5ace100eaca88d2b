"""A speculative drafter's sizing: the KV it adds per token, its weights, its lookahead slots.

Responsibility: the one rule, used by a run (``sim.scenario.speculative`` for the scenario's
``speculative`` section, hence ``sim.scenario.resolve``) and by ``kvsim plan``
(``sim.sizing.plan``), so that the two cannot drift (docs/engine.md, "Drafter KV"):

* KV per token per GPU: an EAGLE head or MTP layer is one more attention layer of the
  target's geometry (F1 for one layer: ``2 x H_kv x d_head x b``, or the MLA latent, per
  TP rank, at the KV dtype); a draft model its profile's own bytes per token at the
  target's TP (vLLM's default ``draft_tensor_parallel_size``), at the KV dtype asked for;
  ngram none. vLLM keeps the drafter's layers in the one pool, at the target's block-table
  positions, so every token of a sequence pays them;
* weights: loaded beside the target's before vLLM sizes the KV cache, so they come out of
  the pool: a draft model's checkpoint (``weights_bytes``), an EAGLE head or MTP layer one
  decoder layer's share of the target's, ``weights / num_layers``; split over TP;
* lookahead slots per running sequence: vLLM's ``Scheduler.num_lookahead_tokens``, ``k``
  for a drafter that writes its own KV (EAGLE, MTP, draft model), 0 for ngram;
* grouped layers: an EAGLE head or MTP layer joins the target's full-attention / MLA KV
  cache groups before vLLM picks the group size (1), which can pad the other specs
  (gpt-oss + EAGLE: 12 sliding + 13 full, sliding padded to 13;
  ``drafter_layer_padding``); a draft model's layers are a spec of
  their own (0), ngram has none.

Invariant: every figure is 0 for ngram; a draft model's figures need its profile, the
others' none; nothing here loads a profile or knows a scenario.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from sim.errors import KvsimError
from sim.profiles.schema import ModelProfile
from sim.sizing.groups import TABLE_KINDS
from sim.sizing.kv import (
    kv_bytes_per_token_per_gpu,
    kv_elems_per_token_per_layer_per_gpu,
    model_layer_padding,
)
from sim.sizing.layer_padding import LayerPadding, vllm_layer_padding
from sim.units import dtype_bytes

#: a drafting method (vLLM ``--speculative-config`` ``method``): the type of a scenario's
#: ``speculative.method`` (``sim.sched.speculative.SpeculativeConfig``)
SpeculativeMethod = Literal["ngram", "eagle", "mtp", "draft_model"]
#: the drafting methods, those of ``SpeculativeMethod`` (``kvsim plan --speculative-method``)
METHODS: tuple[str, ...] = get_args(SpeculativeMethod)
#: methods whose drafter keeps KV and runs ``k`` sequential forward passes per step
DRAFTER_METHODS = ("eagle", "mtp", "draft_model")
#: methods whose drafter is one decoder layer of the target's geometry
HEAD_METHODS = ("eagle", "mtp")
#: the most drafts per step a scenario or ``kvsim plan`` accepts
MAX_SPECULATIVE_TOKENS = 32
#: the open vLLM issue behind the refusal of state-space prefix caching with spec decode
VLLM_ISSUE = "vllm-project/vllm#26201"
#: why a drafter with pipeline parallelism is refused (a run's and plan's one line)
PP_NOT_MODELLED = "speculative decoding with pp > 1 is not modelled"


@dataclass(frozen=True)
class DrafterSizing:
    """What a drafter adds to (KV, lookahead) and takes from (weights) the KV pool."""

    method: str
    num_speculative_tokens: int  # k: drafts proposed per step
    kv_bytes_per_token_per_gpu: float  # the drafter's KV per token on one TP rank
    kv_bytes_per_token: float  # the same over one full copy (TP 1)
    weights_bytes: float  # the drafter's weights over the engine instance (all TP ranks)
    tp: int
    lookahead_tokens: int  # KV slots reserved per running sequence beyond its tokens
    grouped_layers: int  # drafter layers vLLM groups with the target's full / MLA specs
    num_layers: int = 0  # the drafter's attention layers (a head 1, a draft model its own)
    kv_dtype: str = ""  # the drafter's KV element type ("" for ngram)
    draft_model: str | None = None  # the draft model's profile name (draft_model only)

    @property
    def weights_bytes_per_gpu(self) -> float:
        """The drafter's weights on one GPU (split over TP, as the target's)."""
        return self.weights_bytes / self.tp


def lookahead_tokens(method: str, k: int) -> int:
    """vLLM V1's ``Scheduler.num_lookahead_tokens``: ``k`` when
    ``speculative_config.use_eagle()`` (EAGLE, EAGLE-3, MTP) or ``uses_draft_model()``; 0
    for ngram."""
    return k if method in DRAFTER_METHODS else 0


def grouped_layers(method: str | None) -> int:
    """Drafter layers vLLM groups with the target's full-attention / MLA layers when it
    sizes its KV cache groups: 1 for an EAGLE head or MTP layer, else 0 (module docstring)."""
    return 1 if method in HEAD_METHODS else 0


def _draft_needed(method: str, draft: ModelProfile | None) -> ModelProfile:
    if draft is None:
        raise KvsimError(f"method {method} needs the draft model's profile")
    return draft


def drafter_weights_bytes(
    method: str, target: ModelProfile, draft: ModelProfile | None,
    target_weights_bytes: float | None = None,
) -> float:  # fmt: skip
    """The drafter's weights over the engine instance: a draft model's checkpoint, an EAGLE
    head or MTP layer ``target_weights_bytes / num_layers`` (None: the target profile's
    ``weights_bytes``, as a run loads it; ``kvsim plan`` passes its own F34 figure), the
    share ``sim.cost.speculative.drafter_profile`` prices; none for ngram."""
    if method in HEAD_METHODS:
        whole = target.weights_bytes if target_weights_bytes is None else target_weights_bytes
        return whole / target.num_layers
    if method == "draft_model":
        return _draft_needed(method, draft).weights_bytes
    return 0.0


def drafter_kv_bytes_per_token_per_gpu(
    method: str, target: ModelProfile, draft: ModelProfile | None, tp: int,
    kv_dtype: str | None = None,
) -> float:  # fmt: skip
    """The drafter's KV bytes per token on one TP rank at ``kv_dtype`` (None: the target's,
    or the draft profile's own): module docstring."""
    if method in HEAD_METHODS:
        return kv_elems_per_token_per_layer_per_gpu(target, tp) * dtype_bytes(kv_dtype or target.kv_dtype)
    if method == "draft_model":
        return kv_bytes_per_token_per_gpu(_draft_needed(method, draft), tp, 1, kv_dtype)
    return 0.0


def drafter_sizing(
    method: str, k: int, target: ModelProfile, draft: ModelProfile | None, tp: int = 1,
    kv_dtype: str | None = None, target_weights_bytes: float | None = None,
) -> DrafterSizing:  # fmt: skip
    """Every figure of a drafter at TP ``tp`` (one pipeline stage: a drafter with PP is
    refused by its callers, ``PP_NOT_MODELLED``)."""
    if method not in METHODS:
        raise KvsimError(f"speculative method {method!r} is not one of {', '.join(METHODS)}")
    own = _draft_needed(method, draft) if method == "draft_model" else None
    layers = own.num_layers if own is not None else grouped_layers(method)
    dtype = "" if method == "ngram" else kv_dtype or (own or target).kv_dtype
    return DrafterSizing(
        method=method,
        num_speculative_tokens=k,
        kv_bytes_per_token_per_gpu=drafter_kv_bytes_per_token_per_gpu(method, target, draft, tp, kv_dtype),
        kv_bytes_per_token=drafter_kv_bytes_per_token_per_gpu(method, target, draft, 1, kv_dtype),
        weights_bytes=drafter_weights_bytes(method, target, draft, target_weights_bytes),
        tp=tp,
        lookahead_tokens=lookahead_tokens(method, k),
        grouped_layers=grouped_layers(method),
        num_layers=layers,
        kv_dtype=dtype,
        draft_model=None if own is None else own.name,
    )  # fmt: skip


def drafter_layer_padding(model: ModelProfile, grouped: int) -> LayerPadding:
    """vLLM's KV cache grouping of ``model``'s layers (one worker) when ``grouped`` drafter
    layers join each of its full-attention / MLA / indexer specs (an EAGLE head or MTP
    layer is one layer of the target's geometry): the group size is taken over the joined
    counts, then the drafter's own layers leave the counts (they are the drafter's KV,
    charged apart). gpt-oss-20b + EAGLE: 12 sliding + 13 full, groups of 13, sliding padded
    12 -> 13 (vLLM's own example in ``_get_kv_cache_groups_uniform_page_size``); without
    grouped layers, ``model_layer_padding``."""
    plain = model_layer_padding(model)
    if not grouped:
        return plain
    kinds = {g.name: g.kind for g in model.kv_groups()}
    extra = {n: grouped if kinds.get(n) in TABLE_KINDS else 0 for n in plain.layers}
    joined = vllm_layer_padding({n: c + extra[n] for n, c in plain.layers.items()})
    padded = {n: c - extra.get(n, 0) for n, c in joined.padded_layers.items()}
    return LayerPadding(joined.group_size_layers, dict(plain.layers), padded)


def drafter_padding_layers(model: ModelProfile, grouped: int) -> dict[str, int]:
    """How many layers vLLM's padding adds to (or, negative, takes from) each of
    ``model``'s groups because ``grouped`` drafter layers joined them
    (``drafter_layer_padding``), against its padding without a drafter: gpt-oss-20b +
    EAGLE ``{'sliding': 1, 'full': 0}``; gemma-3-27b's 52 sliding layers, held as 60 in
    groups of 10, are held as 55 in groups of 11 (-5)."""
    plain = model_layer_padding(model).padded_layers
    joined = drafter_layer_padding(model, grouped).padded_layers
    return {name: joined.get(name, n) - n for name, n in plain.items()}
