"""A calibration file's times and rates lie within physical ceilings, each refused with
file, line and field (``sim.cost.calibration``: ``MAX_STEP_OVERHEAD_S`` and the others).

Before: ``step_overhead_s: 1e308`` validated (``kvsim validate`` said ok) and the run
stopped at ``t=1e+308 s, past engine.max_sim_time_s`` without naming the file. The
scenario's ``cost`` section had no ceiling at all on the same figures (``cost:
{step_overhead_s: 1e6}`` validated and the run stopped past ``engine.max_sim_time_s``); it
now shares the calibration's constants (``sim.profiles.bounds``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.cost.calibration import (
    MAX_BW_BYTES_PER_S,
    MAX_STEP_OVERHEAD_S,
    available_calibrations,
    load_calibration,
)
from sim.cost.config import CostConfig
from sim.errors import ConfigError
from sim.profiles import bounds
from sim.scenario import json_schema

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


#: (the ``cost`` field, a value past its ceiling, the ceiling as pydantic words it)
_COST_CEILINGS = [
    ("step_overhead_s", "1e300", "10"),
    ("step_overhead_s", "1e6", "10"),
    ("alloc_latency_s", "11", "10"),
    ("allreduce_latency_s", "0.5", "0.01"),
    ("allreduce_bw_bytes_per_s", "1e300", "1000000000000000"),
    ("kernel_floor_s", "0.002", "0.001"),
]


@pytest.mark.parametrize("name,value,ceiling", _COST_CEILINGS)
def test_a_scenario_cost_figure_past_its_ceiling_names_file_line_and_field(
    run_cli, tmp_path, name, value, ceiling
):
    text = E20.read_text().replace("cost:\n", f"cost:\n  {name}: {value}\n", 1)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(text)
    line = text[: text.index(f"  {name}: {value}")].count("\n") + 1
    code, out, err = run_cli(["validate", str(scenario)])
    assert (code, out) == (2, "")
    assert err == (f"kvsim: error: {scenario}:{line}: cost.{name}: Input should be less than "
                   f"or equal to {ceiling}\n")  # fmt: skip


def test_a_set_step_overhead_past_the_ceiling_is_refused_and_the_ceiling_itself_runs(run_cli):
    code, out, err = run_cli(["validate", str(E20), "--set", "cost.step_overhead_s=1e6"])
    assert (code, out, err) == (2, "", "kvsim: error: --set cost.step_overhead_s: "
                                "cost.step_overhead_s: Input should be less than or equal to 10\n")
    code, out, err = run_cli(["validate", str(E20), "--set", "cost.step_overhead_s=10"])
    assert (code, err) == (0, "") and out.startswith(f"{E20}: ok: ")


def test_the_scenario_and_the_calibration_share_one_constant_per_ceiling():
    """The ceilings are ``sim.profiles.bounds``'s (the same objects as the calibration's), and
    the JSON Schema states them as ``maximum``."""
    from sim.cost import calibration

    def ceiling(field: str) -> float:
        return next(m.le for m in CostConfig.model_fields[field].metadata if hasattr(m, "le"))

    assert ceiling("step_overhead_s") == bounds.MAX_STEP_OVERHEAD_S
    assert ceiling("alloc_latency_s") == bounds.MAX_KERNEL_S
    assert ceiling("allreduce_latency_s") == bounds.MAX_ALLREDUCE_LATENCY_S
    assert ceiling("allreduce_bw_bytes_per_s") == bounds.MAX_BW_BYTES_PER_S
    assert ceiling("kernel_floor_s") == bounds.MAX_KERNEL_FLOOR_S
    assert calibration.MAX_STEP_OVERHEAD_S is bounds.MAX_STEP_OVERHEAD_S
    cost = json_schema()["$defs"]["CostConfig"]["properties"]
    assert cost["step_overhead_s"]["maximum"] == bounds.MAX_STEP_OVERHEAD_S
    assert cost["step_overhead_s"]["minimum"] == 0


def test_each_hardware_ceiling_has_one_home_and_the_schemas_keep_their_maximums():
    """The ceilings live in ``sim.profiles.bounds`` (below both the profiles' schema and
    ``sim.cost``); ``sim.cost.calibration`` exports the same objects, and the JSON Schema
    maximums of every field they bound are the values they had when each file kind kept
    its own literal (1e-2 s all-reduce latency, 1e15 B/s, 10 s, 1 ms)."""
    from sim.cluster.config import TransferLink
    from sim.cost import calibration
    from sim.profiles import bounds as profile_bounds
    from sim.profiles.schema import AcceleratorProfile

    for name in (n for n in dir(profile_bounds) if n.startswith("MAX_")):
        assert getattr(calibration, name) is getattr(profile_bounds, name), name
    line = AcceleratorProfile.model_json_schema()["$defs"]["AllReduceLine"]["properties"]
    assert line["latency_s"]["maximum"] == 1e-2
    defs = json_schema()["$defs"]
    assert defs["TransferLink"]["properties"]["bandwidth_bytes_per_s"]["maximum"] == 1e15
    cost = defs["CostConfig"]["properties"]
    assert cost["step_overhead_s"]["maximum"] == 10.0
    assert cost["alloc_latency_s"]["maximum"] == 10.0
    assert cost["kernel_floor_s"]["maximum"] == 1e-3
    assert cost["allreduce_latency_s"]["anyOf"][0]["maximum"] == 1e-2
    assert cost["allreduce_bw_bytes_per_s"]["anyOf"][0]["maximum"] == 1e15

    def ceiling(model: type, field: str) -> object:
        return next(m.le for m in model.model_fields[field].metadata if hasattr(m, "le"))

    from sim.profiles.schema import AllReduceLine

    assert ceiling(AllReduceLine, "latency_s") is profile_bounds.MAX_ALLREDUCE_LATENCY_S
    assert ceiling(AllReduceLine, "bus_bw_bytes_per_s") is profile_bounds.MAX_BW_BYTES_PER_S
    assert line["bus_bw_bytes_per_s"]["maximum"] == 1e15
    assert ceiling(TransferLink, "bandwidth_bytes_per_s") is profile_bounds.MAX_BW_BYTES_PER_S


def test_the_calibrate_clip_is_the_calibration_file_s_efficiency_ceiling():
    """``kvsim calibrate`` clips a fitted efficiency to what the file it writes accepts."""
    from sim.cost import calibrate

    assert calibrate.EFF_MAX is bounds.MAX_EFFICIENCY
