"""The ``model.mamba_cache_mode`` key checked: which saved states a state-space model keeps.

Responsibility: refuse, one located line each, the combinations vLLM does not run as
asked or kvsim does not model, and return the mode a run holds. vLLM's
``--mamba-cache-mode`` (``CacheConfig.mamba_cache_mode`` in ``vllm/config/cache.py``):

* ``none``: no state saved at block boundaries, so a model with Mamba or linear-attention
  layers gets no prefix hit (kvsim's default: every run before the key ran so);
* ``all``: a state saved at every block boundary (``MambaManager`` in
  ``vllm/v1/core/single_type_kv_cache_manager.py``); the engine carries them on the block
  table (``sim.sizing.group_demand.with_saved_states``) and the block size aligns to the
  state kernel's chunk (``sim.sizing.hybrid_pages``);
* ``align``: a state saved only where a scheduler step ends on a block boundary; refused,
  not modelled (it needs the scheduler's block-aligned prefill split and per-block saved
  flags in the prefix index).

Refused besides (``sim.prefix.hybrid_hit.mamba_cache_mode_problem`` for the model's side,
shared with ``kvsim trace-replay``): ``all`` / ``align`` under an allocator without a
prefix cache, which vLLM's ``MambaModelConfig.verify_and_update_config``
(``vllm/model_executor/models/config.py``) sets back to ``none``.

Invariant: ``none`` returns before any check (and before importing ``sim.prefix``), so
scenarios without the key resolve exactly as before it existed.
"""

from __future__ import annotations

from sim.errors import ConfigError
from sim.profiles.schema import ModelProfile
from sim.scenario.load import LoadedScenario


def _refuse(loaded: LoadedScenario, msg: str) -> ConfigError:
    return ConfigError(msg, location=loaded.where("model", "mamba_cache_mode"),
                       field="model.mamba_cache_mode")  # fmt: skip


def checked_mamba_cache_mode(
    loaded: LoadedScenario, model: ModelProfile, caches_prefixes: bool
) -> str:
    """The scenario's ``model.mamba_cache_mode`` once it passed the checks above."""
    mode = loaded.scenario.model.mamba_cache_mode
    if mode == "none":
        return mode
    # imported here: sim.prefix brings the allocators (numpy) that `kvsim validate` of a
    # scenario without the key never needs
    from sim.prefix.hybrid_hit import VLLM_MODE_SOURCE, mamba_cache_mode_problem

    problem = mamba_cache_mode_problem(mode, model.name, [g.kind for g in model.kv_groups()])
    if problem is None and not caches_prefixes:
        problem = (f"{mode} needs a prefix-caching allocator (radix, paged_hash, or paged "
                   "with prefix_caching: hash): without prefix caching vLLM sets it back to "
                   f"none ({VLLM_MODE_SOURCE})")  # fmt: skip
    if problem is not None:
        raise _refuse(loaded, problem)
    return mode
