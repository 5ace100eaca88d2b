"""Transformer geometries of real models, for the benchmarks and the synthetic run.

Responsibility: the shapes (layers, heads, widths) of the models whose layers the
benchmarks build with random weights. Invariant: standard library only, so both the
device scripts (torch) and the here-side tools (no torch) can import it; the numbers are
the public model cards' (Llama 3: 8B and 70B), plus 'tiny' for CPU quick runs.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Geometry:
    """One transformer's shape; weights are random, so only the shapes matter."""

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int

    @property
    def qkv_out(self) -> int:
        return (self.n_heads + 2 * self.n_kv_heads) * self.head_dim

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in_features, out_features) of each weight matrix of one layer."""
        return {
            "qkv": (self.d_model, self.qkv_out),
            "o": (self.n_heads * self.head_dim, self.d_model),
            "gate_up": (self.d_model, 2 * self.d_ff),
            "down": (self.d_ff, self.d_model),
        }

    def linear_params_per_layer(self) -> int:
        return sum(k * n for k, n in self.linear_shapes().values())

    def kv_elems_per_token_per_layer(self) -> int:
        return 2 * self.n_kv_heads * self.head_dim


#: real geometries (public model cards); 'tiny' keeps CPU quick runs to seconds
GEOMETRIES: dict[str, Geometry] = {
    "llama-3-8b": Geometry("llama-3-8b", 32, 4096, 32, 8, 128, 14336),
    "llama-3-70b": Geometry("llama-3-70b", 80, 8192, 64, 8, 128, 28672),
    "tiny": Geometry("tiny", 2, 256, 4, 2, 64, 512),
}
