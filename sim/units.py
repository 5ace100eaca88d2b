"""Units: bytes, seconds and FLOPs inside; GB/GiB/ms only at the edges.

Invariant: every quantity inside kvsim is in bytes, seconds, FLOPs, bytes/s or FLOP/s.
The constants here are the only place decimal and binary prefixes are defined, so a GB
is never mistaken for a GiB (the source chapter makes that mistake; docs/model.md).
"""

from __future__ import annotations

KiB = 2**10
MiB = 2**20
GiB = 2**30
TiB = 2**40
KB = 10**3
MB = 10**6
GB = 10**9
TB = 10**12
TFLOP = 10**12
PFLOP = 10**15

#: bytes per stored element, by dtype name as users type it
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "fp16": 2.0,
    "bf16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
    # NVFP4 (Blackwell): 4-bit E2M1 values plus one fp8 (E4M3) scale per 16 values, so
    # 4 + 8/16 = 4.5 bits per element; the per-tensor fp32 scale is negligible
    "nvfp4": 0.5625,
}


def dtype_bytes(name: str) -> float:
    """Bytes per element of a dtype name; raises ValueError naming the valid choices."""
    try:
        return DTYPE_BYTES[name]
    except KeyError:
        raise ValueError(
            f"unknown dtype {name!r}; valid: {', '.join(sorted(DTYPE_BYTES))}"
        ) from None


def to_gb(n_bytes: float) -> float:
    """Bytes -> decimal gigabytes (10^9 B)."""
    return n_bytes / GB


def to_gib(n_bytes: float) -> float:
    """Bytes -> binary gibibytes (2^30 B)."""
    return n_bytes / GiB


def fmt_bytes(n_bytes: float) -> str:
    """Human form showing both GB and GiB, e.g. ``'10.737 GB (10.000 GiB)'``."""
    return f"{n_bytes / GB:.3f} GB ({n_bytes / GiB:.3f} GiB)"
