"""A calibration file's times and rates lie within physical ceilings, each refused with
file, line and field (``sim.cost.calibration``: ``MAX_STEP_OVERHEAD_S`` and the others).

Before: ``step_overhead_s: 1e308`` validated (``kvsim validate`` said ok) and the run
stopped at ``t=1e+308 s, past engine.max_sim_time_s`` without naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.cost.calibration import (
    MAX_BW_BYTES_PER_S,
    MAX_STEP_OVERHEAD_S,
    available_calibrations,
    load_calibration,
)
from sim.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
E20 = ROOT / "workloads" / "seed_chunked_prefill.yaml"
SYNTHETIC = ROOT / "hardware_profiles" / "calibration" / "synthetic-example.yaml"
VIDUR = ROOT / "hardware_profiles" / "calibration" / "h100-sxm-80gb-vidur.yaml"


def _edited(tmp_path: Path, source: Path, old: str, new: str) -> tuple[Path, int]:
    text = source.read_text()
    assert text.count(old) >= 1, old
    text = text.replace(old, new, 1)
    path = tmp_path / "cal.yaml"
    path.write_text(text)
    return path, text[: text.index(new)].count("\n") + 1


def test_a_step_overhead_past_the_ceiling_is_refused_by_validate_and_run(run_cli, tmp_path):
    cal, line = _edited(tmp_path, SYNTHETIC, "step_overhead_s: 0.00025", "step_overhead_s: 1e308")
    want = (f"kvsim: error: {cal}:{line}: step_overhead_s: Input should be less than or equal "
            "to 10\n")  # fmt: skip
    for argv in (["validate", str(E20)], ["run", str(E20), "--out", str(tmp_path / "o")]):
        code, out, err = run_cli([*argv, "--set", f"cost.calibration={cal}"])
        assert (code, out, err) == (2, "", want)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "source,old,new,message",
    [
        (SYNTHETIC, "step_overhead_s: 0.00025", "step_overhead_s: -0.001",
         "step_overhead_s: Input should be greater than or equal to 0"),
        (SYNTHETIC, "step_overhead_s: 0.00025", "step_overhead_s: .inf",
         "step_overhead_s: Input should be a finite number"),
        (SYNTHETIC, "    overhead_s: 8.0e-06", "    overhead_s: 2.0",
         "copy.h2d.overhead_s: Input should be less than or equal to 1"),
        (SYNTHETIC, "    bw_bytes_per_s: 53000000000.0", "    bw_bytes_per_s: 5.3e+20",
         "copy.h2d.bw_bytes_per_s: Input should be less than or equal to 1000000000000000"),
        (SYNTHETIC, "  peak_flops_per_s: 989400000000000.0", "  peak_flops_per_s: 9.9e+20",
         "reference.peak_flops_per_s: Input should be less than or equal to 1000000000000000000"),
        (VIDUR, "step_overhead_s: null", "step_overhead_s: 30.0",
         "step_overhead_s: Input should be less than or equal to 10"),
        (VIDUR, "      bus_bw_bytes_per_s: 314500000000.0", "      bus_bw_bytes_per_s: 3.1e+18",
         "allreduce.by_tp.2.bus_bw_bytes_per_s: Input should be less than or equal to "
         "1000000000000000"),
    ],
)  # fmt: skip
def test_times_and_rates_outside_their_bounds_name_file_line_and_field(
    tmp_path, source, old, new, message
):
    cal, line = _edited(tmp_path, source, old, new)
    with pytest.raises(ConfigError) as exc:
        load_calibration(str(cal))
    assert str(exc.value) == f"{cal}:{line}: {message}"


def test_the_ceilings_keep_every_shipped_calibration():
    for name, path in available_calibrations().items():
        cal = load_calibration(str(path))
        assert (cal.step_overhead_s or 0.0) <= MAX_STEP_OVERHEAD_S, name
        assert cal.reference_hbm_bw_bytes_per_s <= MAX_BW_BYTES_PER_S, name
    assert len(available_calibrations()) >= 5
