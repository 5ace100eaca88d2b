"""Layer groups: the KV shapes of one model's layers, one frozen spec per group.

A model's layers fall into groups that cache differently (vLLM's ``KVCacheSpec`` kinds):

* ``full`` - every token's K and V (``2 x H_kv x d_head`` elements per token per layer);
* ``sliding_window`` - the same, for the last ``window_tokens`` tokens only;
* ``chunked_local`` - the same, for the tokens of the current ``window_tokens`` chunk only
  (Llama 4's chunked local attention);
* ``mla`` - one latent of ``kv_lora_rank + qk_rope_head_dim`` elements per token per layer;
* ``indexer`` - a sparse-attention indexer's key cache (DeepSeek-V3.2's lightning indexer):
  one key of ``head_dim`` elements plus ``scale_bytes_per_token`` per token, on the layers
  of the group it sits ``alongside``;
* ``mamba`` / ``linear_attention`` - a fixed-size state per sequence (Mamba2, gated
  DeltaNet): a convolution state of ``(conv_kernel - 1) x conv_channels`` elements and a
  recurrent state of ``state_heads x state_head_dim x state_dim`` elements, each with its
  own dtype, whatever the context length.

Invariant: a group's fields are whole, positive and consistent with its kind (a window
only where one applies); token groups may pin their own ``kv_dtype`` (None: the model's,
which a scenario may set); state groups never take the KV dtype (vLLM's
``--kv-cache-dtype`` does not apply to Mamba states).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, NonNegativeFloat, PositiveInt, model_validator

from sim.config_model import ConfigModel
from sim.units import DTYPE_BYTES

DType = Literal["fp32", "fp16", "bf16", "fp8", "int8", "int4", "nvfp4"]
assert set(DType.__args__) == set(DTYPE_BYTES)  # one list of dtypes

#: the group kinds that store something per token (the rest store a state per sequence)
TOKEN_KINDS = ("full", "sliding_window", "chunked_local", "mla", "indexer")
STATE_KINDS = ("mamba", "linear_attention")
#: a ``layer_pattern`` entry for a layer with no cache at all (an MLP-only block)
NO_CACHE = "none"

GroupName = Annotated[str, Field(min_length=1, max_length=40, pattern=r"^[a-z][a-z0-9_]*$")]


class _Group(ConfigModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: GroupName

    @property
    def holds_tokens(self) -> bool:
        """True for a per-token cache, False for a per-sequence state."""
        return self.kind in TOKEN_KINDS


class AttentionGroup(_Group):
    """Full, sliding-window or chunked-local attention: K and V per token per layer."""

    kind: Literal["full", "sliding_window", "chunked_local"]
    num_kv_heads: PositiveInt
    head_dim: PositiveInt
    window_tokens: PositiveInt | None = None  # the window, or the chunk; None for full
    kv_dtype: DType | None = None  # None: the model's kv_dtype

    @model_validator(mode="after")
    def _window(self) -> AttentionGroup:
        if (self.kind == "full") != (self.window_tokens is None):
            raise ValueError(
                "window_tokens is required for sliding_window and chunked_local, and only them"
            )
        return self

    def elems_per_token(self) -> int:
        """K and V elements per token per layer on one full copy."""
        return 2 * self.num_kv_heads * self.head_dim


class MLAGroup(_Group):
    """Multi-head latent attention: one compressed latent per token per layer."""

    kind: Literal["mla"]
    kv_lora_rank: PositiveInt
    qk_rope_head_dim: PositiveInt
    kv_dtype: DType | None = None

    def elems_per_token(self) -> int:
        """Latent elements per token per layer (no factor 2: K and V share it)."""
        return self.kv_lora_rank + self.qk_rope_head_dim


class IndexerGroup(_Group):
    """A sparse-attention indexer's key cache: one key (no value) per token per layer."""

    kind: Literal["indexer"]
    head_dim: PositiveInt  # index_head_dim
    kv_dtype: DType = "fp8"  # DeepSeek-V3.2 stores the indexer keys in fp8
    scale_bytes_per_token: NonNegativeFloat = 0.0  # quantisation scales beside each key
    alongside: GroupName  # the group whose every layer also carries an indexer

    def elems_per_token(self) -> int:
        """Key elements per token per layer."""
        return self.head_dim


class StateGroup(_Group):
    """Mamba2 or linear attention (gated DeltaNet): a fixed state per sequence per layer."""

    kind: Literal["mamba", "linear_attention"]
    conv_kernel: int = Field(ge=2)  # the causal convolution keeps conv_kernel - 1 inputs
    conv_channels: PositiveInt  # channels convolved (Mamba2: d_inner + 2 n_groups d_state)
    state_heads: PositiveInt  # recurrent heads (Mamba2 nheads; DeltaNet value heads)
    state_head_dim: PositiveInt  # Mamba2 head_dim; DeltaNet key head dim
    state_dim: PositiveInt  # Mamba2 d_state; DeltaNet value head dim
    conv_dtype: DType = "bf16"
    state_dtype: DType = "bf16"
    # the state kernel's chunk (config.json chunk_size): vLLM aligns the block size to it
    # under mamba_cache_mode all (sim.sizing.hybrid_pages); None: not stated
    chunk_tokens: PositiveInt | None = None

    def conv_elems(self) -> int:
        """Convolution-state elements per sequence per layer."""
        return (self.conv_kernel - 1) * self.conv_channels

    def recurrent_elems(self) -> int:
        """Recurrent-state elements per sequence per layer."""
        return self.state_heads * self.state_head_dim * self.state_dim


LayerGroup = Annotated[
    AttentionGroup | MLAGroup | IndexerGroup | StateGroup, Field(discriminator="kind")
]


def check_groups(groups: list, pattern: list[str] | None, num_layers: int) -> None:
    """Names unique, the pattern names real groups, every group placed; ValueError if not."""
    names = [g.name for g in groups]
    if len(set(names)) != len(names) or NO_CACHE in names:
        raise ValueError(f"layer_groups names must be unique and not {NO_CACHE!r}")
    layered = [g.name for g in groups if g.kind != "indexer"]
    if pattern is None:
        if len(layered) != 1:
            raise ValueError("layer_pattern is required when more than one group has layers")
        pattern = layered
    unknown = sorted(set(pattern) - set(layered) - {NO_CACHE})
    if unknown:
        raise ValueError(
            f"layer_pattern names {unknown} that are no layer group; valid: "
            f"{', '.join(layered + [NO_CACHE])}"
        )
    kinds = expand_pattern(pattern, num_layers)
    for g in groups:
        host = g.alongside if g.kind == "indexer" else g.name
        if host not in kinds:
            raise ValueError(f"layer group {g.name!r} has no layer in layer_pattern")


def expand_pattern(pattern: list[str], num_layers: int) -> list[str]:
    """The pattern repeated from layer 0 over ``num_layers`` layers."""
    return [pattern[i % len(pattern)] for i in range(num_layers)]
