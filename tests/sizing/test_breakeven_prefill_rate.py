"""h113: ``kvsim breakeven``'s prefill rate and the ``prefill_rate_basis`` that names it
come from one rule (``sim.sizing.breakeven.prefill_rate``), so the words can never name a
source the rate did not use: --prefill-tflops first; else an MFU (given, or the default
0.45) x the accelerator's dense BF16 peak x the GPUs."""

from __future__ import annotations

import pytest

from sim.errors import KvsimError
from sim.profiles import load_accelerator
from sim.sizing.breakeven import DEFAULT_PREFILL_MFU, prefill_rate

H100 = load_accelerator("h100-sxm-80gb")


def test_the_rate_and_its_basis_by_the_rule():
    assert H100.peak_bf16_flops_per_s == pytest.approx(989.4e12, rel=1e-3)
    # an MFU given: 0.3 x 989.4 x 2 GPUs = 593.6 TFLOP/s
    got = prefill_rate(0.3, None, H100, 2)
    assert got.flops_per_s == 0.3 * H100.peak_bf16_flops_per_s * 2
    assert got.basis.startswith(
        f"{got.flops_per_s / 1e12:,.1f} TFLOP/s = MFU 0.3 (--prefill-mfu as given) x "
        "h100-sxm-80gb's dense BF16 peak x 2 GPU(s): unvalidated")
    # no MFU: the default, said to be assumed
    default = prefill_rate(None, None, H100, 1)
    assert default.flops_per_s == DEFAULT_PREFILL_MFU * H100.peak_bf16_flops_per_s
    assert f"MFU {DEFAULT_PREFILL_MFU:g} (the default, assumed)" in default.basis
    # --prefill-tflops wins over the accelerator's peak, and the words say so
    given = prefill_rate(None, 400.0, H100, 8)
    assert given.flops_per_s == 400e12
    assert given.basis.startswith("400.0 TFLOP/s (--prefill-tflops as given)")
    assert prefill_rate(None, 400.0, None, 8) == given  # no accelerator needed


def test_what_the_rule_refuses_in_one_line():
    with pytest.raises(KvsimError, match="not both"):
        prefill_rate(0.3, 400.0, H100, 1)
    with pytest.raises(KvsimError, match="give --prefill-tflops, or --gpu"):
        prefill_rate(0.3, None, None, 1)
    with pytest.raises(KvsimError, match="--prefill-mfu"):
        prefill_rate(1.5, None, H100, 1)
