"""The ``model.mamba_cache_mode`` key checked: which saved states a state-space model keeps.

Responsibility: settle the mode a run holds (``none`` or ``all``) from the key and the
allocator, as vLLM settles its ``--mamba-cache-mode`` (``CacheConfig.mamba_cache_mode`` in
``vllm/config/cache.py``) in ``MambaModelConfig.verify_and_update_config``
(``vllm/model_executor/models/config.py``): without prefix caching ``none``; with it,
``none`` becomes ``all`` for a Mamba model and ``align`` for one whose model class lacks
``SupportsMambaPrefixCaching`` (linear attention: Qwen3-Next). The modes:

* ``auto`` (kvsim's default): that rule; where it gives ``align`` (not modelled) the run
  holds ``none`` with a warning that its hits over state layers are 0, an under-estimate;
* ``none``: no state saved at block boundaries, so a model with Mamba or linear-attention
  layers gets no prefix hit; with a prefix cache a what-if (vLLM would not run it), warned;
* ``all``: a state saved at every block boundary (``MambaManager`` in
  ``vllm/v1/core/single_type_kv_cache_manager.py``); the engine carries them on the block
  table (``sim.sizing.group_demand.with_saved_states``) and the block size aligns to the
  state kernel's chunk (``sim.sizing.hybrid_pages``);
* ``align``: a state saved only where a scheduler step ends on a block boundary; refused,
  not modelled (it needs the scheduler's block-aligned prefill split and per-block saved
  flags in the prefix index).

Refused, one located line each (``sim.prefix.hybrid_hit.settle_mamba_cache_mode``, shared
with ``kvsim trace-replay``): ``align``, ``all`` on linear-attention layers, and ``all``
under an allocator without a prefix cache. A model without state layers holds ``none``
whatever the key (vLLM ignores the flag for it).

Invariant: a dense model returns ``none`` before importing ``sim.prefix`` (the allocators'
numpy, which `kvsim validate` of a dense scenario never needs), so scenarios of models
without state layers resolve exactly as before the key existed.
"""

from __future__ import annotations

from sim.errors import ConfigError, KvsimError
from sim.profiles.layer_groups import STATE_KINDS
from sim.profiles.schema import ModelProfile
from sim.scenario.load import LoadedScenario


def checked_mamba_cache_mode(
    loaded: LoadedScenario, model: ModelProfile, caches_prefixes: bool
) -> tuple[str, str | None]:
    """(the mode the run holds, ``none`` or ``all``; a one-line warning or None) for the
    scenario's ``model.mamba_cache_mode``; ConfigError at its line for a refused one."""
    kinds = [g.kind for g in model.kv_groups()]
    if not set(kinds) & set(STATE_KINDS):
        return "none", None
    from sim.prefix.hybrid_hit import settle_mamba_cache_mode

    try:
        return settle_mamba_cache_mode(
            loaded.scenario.model.mamba_cache_mode, model.name, kinds, caches_prefixes
        )
    except KvsimError as exc:
        raise ConfigError(str(exc), location=loaded.where("model", "mamba_cache_mode"),
                          field="model.mamba_cache_mode") from None  # fmt: skip
