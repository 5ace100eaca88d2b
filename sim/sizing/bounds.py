"""Range checks for the numbers the sizing formulas take: the flags of ``kvsim plan`` and
``kvsim breakeven`` and the fields of their input objects.

Invariant: a number passes ``check_number`` only when it is finite (an infinity only where
the caller allows it) and inside its stated range; otherwise one ``KvsimError`` line names
the input and the valid range. Every numeric input of ``plan`` and ``breakeven`` goes through
it, and the upper bounds keep every product of the formulas finite, so no NaN or infinity
reaches ``math.floor`` (OverflowError) or a division (ZeroDivisionError).
"""

from __future__ import annotations

import math

from sim.errors import KvsimError

#: the most GPUs (and TP or PP degree) a plan may state
MAX_GPUS = 1_000_000
#: the longest context or output a plan may state, in tokens
MAX_TOKENS = 10**12
#: the largest parameter count (a thousand times today's largest models)
MAX_PARAMS = 1e15
#: the largest memory or reserve figure per GPU, in GB or GiB (an exabyte)
MAX_MEMORY_GB = 1e9
#: the slowest and fastest host link per GPU, GB/s (the bounds keep transfer times finite)
MIN_LINK_GB_PER_S, MAX_LINK_GB_PER_S = 1e-6, 1e6
#: the slowest and fastest sustained prefill rate of a replica, TFLOP/s
MIN_TFLOPS, MAX_TFLOPS = 1e-6, 1e12
#: the longest wait or stall, in seconds (about 31.7 years)
MAX_TIME_S = 1e9


def check_number(
    value: float,
    name: str,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
    allow_inf: bool = False,
) -> float:
    """``value`` when it is a finite number in the range (``low_open``/``high_open``
    exclude that end; ``allow_inf`` lets ``+inf`` through when ``high`` is None); else a
    one-line ``KvsimError`` naming ``name`` and the valid range."""
    valid = _range_text(low, high, low_open, high_open)
    suffix = f" {valid}" if valid else ""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise KvsimError(f"{name} must be a number{suffix}, got {value!r}")
    finite = isinstance(value, int) or math.isfinite(value)
    inf_ok = allow_inf and high is None
    if not finite and not (inf_ok and value == math.inf):
        what = f"a number{suffix} or inf" if inf_ok else f"a finite number{suffix}"
        raise KvsimError(f"{name} must be {what}, got {value}")
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and (value >= high if high_open else value > high)
    if too_low or too_high:
        raise KvsimError(f"{name} must be {valid}, got {_fmt(value)}")
    return value


def _range_text(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    if low is not None and high is not None:
        return f"in {'(' if low_open else '['}{_fmt(low)}, {_fmt(high)}{')' if high_open else ']'}"
    if low is not None:
        return f"{'>' if low_open else '>='} {_fmt(low)}"
    if high is not None:
        return f"{'<' if high_open else '<='} {_fmt(high)}"
    return ""


def _fmt(x: float) -> str:
    if isinstance(x, int) and abs(x) < 10**7:
        return str(x)
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e7:
        return str(int(x))
    return f"{x:g}"
