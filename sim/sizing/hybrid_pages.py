"""vLLM's page-size unification for hybrid models: the attention block size a Mamba state forces.

vLLM keeps every layer group in one block pool of one page size. A Mamba or
linear-attention layer's state is one page, so the attention page (block_size tokens of
one attention layer on one GPU) must be at least the state: vLLM raises the attention
block size to the smallest multiple of the kernel alignment that covers the state, and
pads the state page up to the attention page (``_align_hybrid_block_size`` in
``vllm/platforms/interface.py``, formerly
``HybridAttentionMambaModelConfig.verify_and_update_config`` in
``vllm/model_executor/models/config.py``; without Mamba prefix caching)::

    align = max(16, block_size)          # FlashAttention's MultipleOf(16), never lowered
    attn_block = align * ceil(state_page / (align * attention_page_per_token))
    block_size = max(block_size, attn_block)
    state_page_padded = block_size * attention_page_per_token

With Mamba prefix caching in ``all`` mode (``mamba_cache_mode="all"``) the same function
first aligns to the state kernel's chunk (``chunk_tokens``, config.json ``chunk_size``), so
that the kernel writes a state at every block boundary::

    chunk      = lcm(chunk_tokens, align)
    attn_block = chunk x ceil(ceil(state_page / attention_page_per_token) / chunk)

Invariant: pages are per layer on one tensor-parallel rank; a model without a state
group keeps the block size it was given (``raised`` False, state pages 0); so does a model
with states and no attention layer (vLLM then gives each state a page of its own).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.errors import KvsimError
from sim.profiles.layer_groups import StateGroup
from sim.profiles.schema import ModelProfile
from sim.sizing.groups import ATTENTION_KINDS, group_bytes

#: vLLM's smallest attention kernel block (FlashAttention and FlashInfer: multiples of 16)
KERNEL_BLOCK_ALIGNMENT_TOKENS = 16


@dataclass(frozen=True)
class PageUnification:
    """The block size a hybrid model runs with, and the pages behind it (one GPU, one layer)."""

    requested_block_size_tokens: int
    block_size_tokens: int
    raised: bool
    attention_page_bytes_per_token: float  # the largest attention layer's bytes per token
    state_page_bytes: float  # one state layer's state (0: no state group)
    state_page_padded_bytes: float  # the page a state takes once padded (0: no state group)


def unify_pages(
    model: ModelProfile, block_size: int, tp: int = 1, kv_dtype: str | None = None,
    mamba_cache_mode: str = "none",
) -> PageUnification:
    """vLLM's unified block size for ``model`` at ``tp`` (see the module docstring);
    KvsimError under ``mamba_cache_mode`` ``all`` when a state group has no
    ``chunk_tokens``."""
    if block_size < 1:
        raise KvsimError(f"block size must be >= 1 token, got {block_size}")
    groups = group_bytes(model, tp, kv_dtype)
    attn = max(
        (g.bytes_per_token_per_layer_per_gpu for g in groups if g.kind in ATTENTION_KINDS),
        default=0.0,
    )
    state = max((g.state_bytes_per_layer_per_gpu for g in groups if g.holds_state), default=0.0)
    if state == 0 or attn == 0:
        return PageUnification(block_size, block_size, False, attn, state, state)
    align = max(KERNEL_BLOCK_ALIGNMENT_TOKENS, block_size)
    attn_block: float
    if mamba_cache_mode == "all":
        chunk = math.lcm(_state_chunk(model), align)
        attn_block = chunk * -(-math.ceil(state / attn) // chunk)
    else:
        attn_block = align * -(-state // (align * attn))
    final = max(block_size, int(attn_block))
    return PageUnification(block_size, final, final > block_size, attn, state, final * attn)


def _state_chunk(model: ModelProfile) -> int:
    """The state kernel's chunk (tokens) of ``model``'s state groups (the largest, when
    they differ); KvsimError when none states it."""
    chunks = [g.chunk_tokens for g in model.kv_groups()
              if isinstance(g, StateGroup) and g.chunk_tokens]  # fmt: skip
    if not chunks:
        raise KvsimError(
            f"{model.name}: mamba_cache_mode all needs the state kernel's chunk "
            "(layer_groups[].chunk_tokens, config.json chunk_size), which sets vLLM's block size"
        )
    return max(chunks)
