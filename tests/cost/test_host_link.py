"""Which host link the copy engines use: the scenario's figures, else a calibration's
pinned copy fits (per direction), else the accelerator profile (``host_link_fits``)."""

from __future__ import annotations

import simpy

from sim.cost.calibration import Calibration, CopyFit, host_link_fits, load_calibration
from sim.engine.copy_engine import CopyEngines
from sim.profiles import load_accelerator

SYNTH = load_calibration("synthetic-example")  # h2d 8 us + b / 53 GB/s, d2h 9 us + b / 52.5


def test_the_synthetic_example_fits_are_what_the_tests_below_expect():
    assert SYNTH.copy_fit("h2d") == CopyFit(8e-6, 53e9)
    assert SYNTH.copy_fit("d2h") == CopyFit(9e-6, 52.5e9)


def test_no_calibration_is_the_profile_with_no_overhead():
    assert host_link_fits(None, 54e9) == {"h2d": CopyFit(0.0, 54e9), "d2h": CopyFit(0.0, 54e9)}


def test_a_calibration_gives_each_direction_its_fit():
    assert host_link_fits(SYNTH, 54e9) == {"h2d": CopyFit(8e-6, 53e9), "d2h": CopyFit(9e-6, 52.5e9)}


def test_explicit_figures_win_one_by_one():
    bw_only = host_link_fits(SYNTH, 54e9, bw_bytes_per_s=64e9)
    assert bw_only == {"h2d": CopyFit(8e-6, 64e9), "d2h": CopyFit(9e-6, 64e9)}
    zero = host_link_fits(SYNTH, 54e9, overhead_s=0.0)  # an explicit 0 is not "unset"
    assert zero == {"h2d": CopyFit(0.0, 53e9), "d2h": CopyFit(0.0, 52.5e9)}
    both = host_link_fits(SYNTH, 54e9, bw_bytes_per_s=64e9, overhead_s=1e-5)
    assert both == {"h2d": CopyFit(1e-5, 64e9), "d2h": CopyFit(1e-5, 64e9)}


def test_copy_engines_time_each_direction_with_its_fit():
    env = simpy.Environment()
    h100 = load_accelerator("h100-sxm-80gb")
    ce = CopyEngines.from_profiles(env, h100, 2, calibration=SYNTH)
    n = 2**30
    out, back = ce.copy_out(n), ce.copy_in(n)
    env.run(until=env.all_of([out, back]))
    assert out.value.end_s == 9e-6 + n / 52.5e9
    assert back.value.end_s == 8e-6 + n / 53e9
    plain = CopyEngines.from_profiles(simpy.Environment(), h100, 2)
    assert (plain.d2h[1].bw_bytes_per_s, plain.d2h[1].overhead_s) == (54e9, 0.0)
    uniform = Calibration.uniform(copy_bw_bytes_per_s=20e9, copy_overhead_s=1e-3)
    flat = CopyEngines.from_profiles(env, h100, 1, calibration=uniform, overhead_s=0.0)
    assert (flat.h2d[0].bw_bytes_per_s, flat.h2d[0].overhead_s) == (20e9, 0.0)
