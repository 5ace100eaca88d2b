"""Pause economics for one trajectory (F29-F33): reload vs recompute vs hold.

Invariant: arithmetic about one trajectory's state only (it does not check that weights
fit). Every tensor-parallel rank moves its own share of the KV over its own link at the
same time, so a transfer takes (KV bytes per GPU) / (per-GPU one-way link bandwidth); an
MLA latent is whole on every rank, so every rank moves all of it. Holding the state blocks
what every GPU holds (``kv_bytes_all_gpus``: one rank's bytes times the ``tp x pp`` GPUs,
an MLA latent or a replicated KV head once per rank), the figure the engine's pauses
charge (F29) and host DRAM or NVMe store (each rank offloads its own pages, as vLLM's
``OffloadingConnector`` does); ``kv_bytes`` is the model's KV, one copy (F2). A context
beyond the model's window (``max_context_tokens``) is computed anyway and reported in
``warnings``. The recompute is F30 at the given sustained rate; its FLOPs are F23 by layer
group (``model_prefill_flops``), the attention term (``attention``) counted under
``attention_mask``: ``causal`` (default; the pairs a causal kernel computes, as the engine's
step pricers count them, ``cost.attention_mask``) or ``full`` (F23's square as the chapter
states it; ``square`` is accepted as its other name, the cost section's).
Every number in ``BreakEvenInputs`` is finite and in range (``sim.sizing.bounds``, checked
when the object is built), so every time it reports is finite.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from sim.errors import KvsimError
from sim.profiles.schema import AcceleratorProfile, ModelProfile
from sim.sizing.bounds import (
    MAX_GPUS,
    MAX_LINK_GB_PER_S,
    MAX_PARAMS,
    MAX_TFLOPS,
    MAX_TIME_S,
    MAX_TOKENS,
    MIN_LINK_GB_PER_S,
    MIN_TFLOPS,
    check_number,
)
from sim.sizing.compute import (
    break_even_wait_s,
    hold_cost_byte_s,
    model_prefill_flops,
    offload_round_trip_s,
    reload_time_s,
)
from sim.sizing.kv import kv_bytes_for_context
from sim.sizing.plan import window_warning
from sim.units import GB

#: ``kvsim breakeven``'s prefill MFU when neither --prefill-mfu nor --prefill-tflops is
#: given: an assumed round figure (a dense prefill on H100-class GPUs), not a measurement
DEFAULT_PREFILL_MFU = 0.45


@dataclass(frozen=True)
class PrefillRate:
    """``kvsim breakeven``'s prefill rate and where it comes from (one rule for both)."""

    flops_per_s: float  # sustained, the whole replica
    #: the rate in words with its source, and how far to trust the recompute time and the
    #: decision that follow from it (the JSON's ``prefill_rate_basis``)
    basis: str


def prefill_rate(mfu: float | None, tflops: float | None,
                 accelerator: AcceleratorProfile | None, num_gpus: int) -> PrefillRate:  # fmt: skip
    """The prefill rate of ``kvsim breakeven`` and its basis, by one precedence: a given
    --prefill-tflops (the user's figure, as accurate as it is); else an MFU (--prefill-mfu,
    or ``DEFAULT_PREFILL_MFU``) times the accelerator's dense BF16 peak times the GPUs, an
    assumption no calibration checks (the engine's calibrated step times are a run's:
    ``kvsim run`` with ``cost.calibration``). Both flags, or an MFU without an
    accelerator: a one-line error; each figure range-checked (``sim.sizing.bounds``)."""
    if mfu is not None and tflops is not None:
        raise KvsimError("give --prefill-mfu or --prefill-tflops, not both")
    if tflops is not None:
        rate = check_number(tflops, "--prefill-tflops", MIN_TFLOPS, MAX_TFLOPS) * 1e12
        return PrefillRate(rate, f"{rate / 1e12:,.1f} TFLOP/s (--prefill-tflops as given): "
                                 "the recompute time and the decision are as accurate as that figure")  # fmt: skip
    if accelerator is None:
        raise KvsimError(
            f"give --prefill-tflops, or --gpu with --prefill-mfu (default {DEFAULT_PREFILL_MFU})"
        )
    source = "--prefill-mfu as given" if mfu is not None else "the default, assumed"
    value = DEFAULT_PREFILL_MFU if mfu is None else check_number(mfu, "--prefill-mfu", 0, 1, low_open=True)
    rate = value * accelerator.peak_bf16_flops_per_s * num_gpus
    return PrefillRate(rate, (
        f"{rate / 1e12:,.1f} TFLOP/s = MFU {value:g} ({source}) x {accelerator.name}'s dense "
        f"BF16 peak x {num_gpus} GPU(s): unvalidated (no calibration measures a prefill's "
        "MFU here); the recompute time and the decision scale with it (pass "
        "--prefill-tflops from a measured prefill)"))


#: ``--attention-mask`` values and the ``model_prefill_flops`` mask each counts
BREAKEVEN_MASKS = {"causal": "causal", "full": "square", "square": "square"}


@dataclass(frozen=True)
class BreakEvenInputs:
    """One trajectory's pause: its context, the links, the prefill rate, the wait."""

    model: ModelProfile
    context_tokens: int
    link_bw_bytes_per_s: float  # per GPU, one direction
    prefill_flops_per_s: float  # sustained, the whole replica
    tp: int = 1
    pp: int = 1
    params: float | None = None
    kv_dtype: str | None = None
    attention: bool = False  # add F23's attention term to the recompute
    attention_mask: str = "causal"  # its pairs: causal (a kernel's) or full (F23's square)
    wait_s: float | None = None
    mu_ratio: float = math.inf  # mu_HBM / mu_DRAM
    stall_s: float = 0.0  # Delta_T_stall the scheduler accepts

    def __post_init__(self) -> None:
        """Refuse a number out of range (named by its ``kvsim breakeven`` flag) in one line."""
        check_number(self.context_tokens, "--context", 1, MAX_TOKENS)
        link_gb_per_s = self.link_bw_bytes_per_s / GB
        check_number(link_gb_per_s, "--link-gb-per-s", MIN_LINK_GB_PER_S, MAX_LINK_GB_PER_S)
        tflops = self.prefill_flops_per_s / 1e12
        rate = "the prefill rate in TFLOP/s (--prefill-tflops, or --prefill-mfu x peak x GPUs)"
        check_number(tflops, rate, MIN_TFLOPS, MAX_TFLOPS)
        check_number(self.tp, "--tp", 1, MAX_GPUS)
        check_number(self.pp, "--pp", 1, MAX_GPUS)
        if self.params is not None:
            check_number(self.params, "--params", 0, MAX_PARAMS, low_open=True)
        if self.wait_s is not None:
            check_number(self.wait_s, "--wait", 0, MAX_TIME_S)
        check_number(self.mu_ratio, "--mu-ratio", 1, low_open=True, allow_inf=True)
        check_number(self.stall_s, "--stall-s", 0, MAX_TIME_S)
        if self.attention_mask not in BREAKEVEN_MASKS:
            raise KvsimError(
                f"--attention-mask must be causal or full (or square), got {self.attention_mask!r}"
            )


@dataclass(frozen=True)
class BreakEvenResult:
    """Times in seconds, bytes in bytes, hold cost in GB*s (decimal)."""

    context_tokens: int
    kv_bytes: float  # the model's KV for the context, one copy (F2)
    kv_bytes_per_gpu: float  # one rank of the most loaded pipeline stage: what it moves
    kv_bytes_all_gpus: float  # kv_bytes_per_gpu x tp x pp: HBM held, bytes offloaded
    link_bw_bytes_per_s: float
    prefill_flops_per_s: float
    reload_s: float
    round_trip_s: float
    recompute_flops: float
    recompute_s: float
    reload_over_recompute: float
    recompute_over_reload: float
    break_even_wait_s: float
    wait_s: float | None
    hold_gb_s: float | None
    decision: str | None  # at the given wait: 'hold' or 'offload'
    warnings: list[str] = field(default_factory=list)  # computable but doubtful inputs

    def to_dict(self) -> dict:
        return asdict(self)


def break_even(inp: BreakEvenInputs) -> BreakEvenResult:
    """Reload, round trip, recompute, their ratio, hold cost and F33's break-even wait."""
    m, s = inp.model, inp.context_tokens
    kv = kv_bytes_for_context(m, s, kv_dtype=inp.kv_dtype)
    kv_gpu = kv_bytes_for_context(m, s, inp.tp, inp.pp, inp.kv_dtype, per_gpu=True)
    kv_all = kv_gpu * inp.tp * inp.pp  # every GPU charged as the engine charges it
    params = inp.params or m.active_params
    mask = BREAKEVEN_MASKS[inp.attention_mask]
    flops = model_prefill_flops(m, s, params, attention=inp.attention, mask=mask)  # F23 by group
    reload = reload_time_s(kv_gpu, inp.link_bw_bytes_per_s)
    recompute = flops / inp.prefill_flops_per_s
    t_star = break_even_wait_s(kv_gpu, inp.link_bw_bytes_per_s, inp.mu_ratio, inp.stall_s)
    wait = inp.wait_s
    return BreakEvenResult(
        context_tokens=s,
        kv_bytes=kv,
        kv_bytes_per_gpu=kv_gpu,
        kv_bytes_all_gpus=kv_all,
        link_bw_bytes_per_s=inp.link_bw_bytes_per_s,
        prefill_flops_per_s=inp.prefill_flops_per_s,
        reload_s=reload,
        round_trip_s=offload_round_trip_s(kv_gpu, inp.link_bw_bytes_per_s),
        recompute_flops=flops,
        recompute_s=recompute,
        reload_over_recompute=reload / recompute,
        recompute_over_reload=recompute / reload,
        break_even_wait_s=t_star,
        wait_s=wait,
        hold_gb_s=None if wait is None else hold_cost_byte_s(kv_all, wait) / GB,
        decision=None if wait is None else ("offload" if wait > t_star else "hold"),
        warnings=_warnings(m, s),
    )


def _warnings(model: ModelProfile, context_tokens: int) -> list[str]:
    window = model.max_context_tokens
    if window is not None and context_tokens > window:
        return [window_warning(model.name, window, context_tokens)]
    return []
