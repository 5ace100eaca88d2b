"""The ``speculative`` section resolved: the drafter's model and its KV bytes per token.

Responsibility: check that speculative decoding can run as the scenario asks, load the
draft model's profile and size the drafter's KV, which joins the target's in the one pool
(vLLM gives the drafter's layers their own KV group in the same pool, with the same block
table positions). The sizing rule itself is ``sim.sizing.speculative``'s, which
``kvsim plan`` uses too:

* ``eagle`` / ``mtp``: one extra attention layer of the target's geometry (F1 for one
  layer: ``2 x H_kv x d_head x b``, or the MLA latent, per TP rank, at the KV dtype);
* ``draft_model``: the draft profile's own bytes per token at the target's TP (vLLM's
  default ``draft_tensor_parallel_size``), at the scenario's ``model.kv_dtype`` if set;
* ``ngram``: none.

The drafter's weights (``draft_weights_bytes``) come out of the KV pool with the
target's, as vLLM loads both before it sizes the cache.

Refused, one line each at the ``speculative`` line: pipeline parallelism above 1 and
data-parallel lockstep clusters (not modelled), and a model with state-space layers
(Mamba, linear attention) under a prefix-caching allocator, which vLLM does not run
either (vllm-project/vllm#26201, open: the saved states at block boundaries and the
rejected drafts' state updates do not agree); kvsim refuses it rather than model it.

vLLM puts an EAGLE head's or MTP layer's attention into the target's KV cache groups of
the same spec, so it counts towards the group size that pads the other specs
(``grouped_draft_layers``; ``_get_kv_cache_groups_uniform_page_size``'s own example:
gpt-oss + EAGLE, 12 sliding + 13 full, sliding padded to 13). A draft model's layers are
grouped with the target's only when their spec is identical (same KV heads, head size,
dtype, window); kvsim does not compare specs and leaves them out of the group size.

Invariant: without the section every figure is 0 / None and nothing is refused.
"""

from __future__ import annotations

from sim.errors import ConfigError, KvsimError
from sim.profiles import load_model
from sim.profiles.layer_groups import STATE_KINDS
from sim.profiles.schema import ModelProfile
from sim.scenario.load import LoadedScenario
from sim.sizing.speculative import (
    PP_NOT_MODELLED,
    VLLM_ISSUE,  # re-exported: the refusal's issue, named here first
    drafter_kv_bytes_per_token_per_gpu,
    drafter_weights_bytes,
    grouped_layers,
)

__all__ = ["VLLM_ISSUE", "draft_kv", "draft_weights_bytes", "grouped_draft_layers"]


def _refuse(loaded: LoadedScenario, msg: str, *loc: str) -> ConfigError:
    return ConfigError(msg, location=loaded.where("speculative", *loc),
                       field=".".join(("speculative", *loc)))  # fmt: skip


def _state_refusal(model: ModelProfile, mode: str) -> str:
    """Why speculative decoding with a prefix cache on a state-space model is refused."""
    if mode in ("auto", "none"):  # vLLM settles on align with a drafter (see below)
        saves = "follows vLLM" if mode == "auto" else "saves no state"
        why = (f"mamba_cache_mode {mode} {saves}, but with prefix caching and speculative "
               "decoding on, vLLM switches such a model to align (MambaModelConfig"
               ".verify_and_update_config), whose saved states")  # fmt: skip
    else:
        why = f"under mamba_cache_mode {mode} the saved states at block boundaries"
    return (
        f"speculative decoding with prefix caching on a model with state-space layers "
        f"({model.name}) is refused: {why} and the rejected drafts' state updates do not "
        f"agree ({VLLM_ISSUE}, open); use a non-caching allocator (paged) or drop speculative"
    )


def grouped_draft_layers(spec) -> int:
    """Layers of the drafter that vLLM groups with the target's full-attention / MLA
    layers when it sizes its KV cache groups (``sim.sizing.group_demand.kv_groups``): an
    EAGLE head or MTP layer (one decoder layer of the target's spec) 1; none for ngram; 0
    for a draft model, whose layers kvsim keeps as a spec of their own (module docstring)."""
    return grouped_layers(None if spec is None else spec.method)


def draft_weights_bytes(loaded: LoadedScenario, model: ModelProfile) -> float:
    """The drafter's weights over the engine instance, which vLLM loads beside the target's
    before it sizes the KV cache (``GPUModelRunner.load_model`` loads the drafter, and the
    memory it measures, ``model_memory_usage``, holds both): a draft model's checkpoint
    (its profile's ``weights_bytes``, split over the target's TP), an EAGLE head or MTP
    layer one decoder layer's share of the target's, ``weights_bytes / num_layers`` (the
    share ``sim.cost.speculative.drafter_profile`` prices); none for ngram or without the
    section. A draft model that cannot be loaded is reported by ``draft_kv``."""
    spec = loaded.scenario.speculative
    if spec is None or spec.method == "ngram":
        return 0.0
    draft = None
    if spec.method == "draft_model":
        try:
            draft = load_model(str(spec.draft_model))
        except KvsimError as exc:
            raise _refuse(loaded, f"draft model: {exc}", "draft_model") from None
    return drafter_weights_bytes(spec.method, model, draft)


def draft_kv(
    loaded: LoadedScenario, model: ModelProfile, uses_prefix_cache: bool
) -> tuple[float, ModelProfile | None]:
    """(the drafter's KV bytes per token per GPU, the draft model's profile or None)."""
    sc = loaded.scenario
    spec = sc.speculative
    if spec is None:
        return 0.0, None
    if sc.hardware.pp > 1:
        raise _refuse(loaded, f"{PP_NOT_MODELLED} (set pp: 1)")
    if sc.cluster is not None and sc.cluster.data_parallel is not None:
        raise _refuse(loaded, "speculative decoding in a data-parallel lockstep cluster is not modelled")
    if uses_prefix_cache and any(g.kind in STATE_KINDS for g in model.kv_groups()):
        raise _refuse(loaded, _state_refusal(model, sc.model.mamba_cache_mode))
    tp = sc.hardware.tp
    if spec.method == "ngram":
        return 0.0, None
    if spec.method in ("eagle", "mtp"):
        return drafter_kv_bytes_per_token_per_gpu(spec.method, model, None, tp), None
    overrides = {} if sc.model.kv_dtype is None else {"kv_dtype": sc.model.kv_dtype}
    try:
        draft = load_model(str(spec.draft_model), overrides=overrides)
        return drafter_kv_bytes_per_token_per_gpu(spec.method, model, draft, tp), draft
    except KvsimError as exc:
        raise _refuse(loaded, f"draft model: {exc}", "draft_model") from None
