"""sim.cost.calibration: schema, one-line errors, search folders, interpolation, copy times."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cost.calibration import (
    Calibration,
    as_mapping,
    available_calibrations,
    calibration_from_spec,
    load_calibration,
    validate_mapping,
)
from sim.errors import ConfigError, UnknownNameError

BASE = {
    "schema_version": 1,
    "device": "TEST GPU",
    "driver": "1.2",
    "torch_version": "2.11.0",
    "date": "2026-11-29",
    "source": "synthetic",
    "reference": {"hbm_bw_bytes_per_s": 4.0e12, "peak_flops_per_s": 1.0e15},
    "step_overhead_s": 0.0005,
    "attention": {
        "block_sizes": [1, 16, 64],
        "context_tokens": [1024, 4096],
        "bw_efficiency": [[0.4, 0.6], [0.8, 0.9], [0.7, 0.95]],
    },
    "decode": {"x": [1, 4, 16], "efficiency": [0.8, 0.6, 0.4]},
    "gemm": {"x": [16, 256], "efficiency": [0.2, 0.6]},
    "copy": {
        "h2d": {"overhead_s": 1.0e-5, "bw_bytes_per_s": 50.0e9},
        "d2h": {"overhead_s": 2.0e-5, "bw_bytes_per_s": 40.0e9},
    },
}


def write(tmp_path, data, name="cal.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture
def cal(tmp_path) -> Calibration:
    return load_calibration(str(write(tmp_path, BASE)))


def test_metadata_and_exact_grid_points(cal):
    assert (cal.device, cal.driver, cal.torch_version, cal.date, cal.source) == (
        "TEST GPU", "1.2", "2.11.0", "2026-11-29", "synthetic")  # fmt: skip
    assert cal.step_overhead_s == 0.0005
    assert cal.attention_bw_efficiency(16, 4096) == pytest.approx(0.9)
    assert cal.attention_bw_efficiency(1, 1024) == pytest.approx(0.4)
    assert cal.decode_bw_efficiency(4) == pytest.approx(0.6)
    assert cal.gemm_efficiency(256) == pytest.approx(0.6)


def test_interpolation_is_linear_in_log2_and_clamped(cal):
    # 4 is halfway between 1 and 16 in log2 (0, 2, 4): midpoint of 0.4 and 0.8 at ctx 1024
    assert cal.attention_bw_efficiency(4, 1024) == pytest.approx(0.6)
    # 2048 is halfway between 1024 and 4096 in log2
    assert cal.attention_bw_efficiency(16, 2048) == pytest.approx(0.85)
    assert cal.attention_bw_efficiency(32, 2048) == pytest.approx((0.85 + 0.825) / 2)
    assert cal.decode_bw_efficiency(2) == pytest.approx(0.7)
    assert cal.gemm_efficiency(64) == pytest.approx(0.4)
    # outside the measured range: the nearest measured value, never extrapolated
    assert cal.decode_bw_efficiency(1000) == pytest.approx(0.4)
    assert cal.gemm_efficiency(1) == pytest.approx(0.2)
    assert cal.attention_bw_efficiency(512, 10**6) == pytest.approx(0.95)


@settings(max_examples=150, deadline=None)
@given(b=st.integers(1, 4096), ctx=st.integers(1, 10**7), n=st.integers(1, 10**5))
def test_queries_stay_within_measured_values(b, ctx, n):
    cal = Calibration.uniform(attention=0.5)
    assert cal.attention_bw_efficiency(b, ctx) == pytest.approx(0.5)
    real = calibration_from_spec(validate_mapping(copy.deepcopy(BASE)))
    assert 0.4 <= real.attention_bw_efficiency(b, ctx) <= 0.95
    assert 0.4 <= real.decode_bw_efficiency(n) <= 0.8
    assert 0.2 <= real.gemm_efficiency(n) <= 0.6


def test_copy_time_is_overhead_plus_bytes_over_bw(cal):
    assert cal.copy_time_s(50 * 10**9) == pytest.approx(1.0 + 1.0e-5)
    assert cal.copy_time_s(40 * 10**9, "d2h") == pytest.approx(1.0 + 2.0e-5)
    assert cal.copy_time_s(0) == 0.0
    assert cal.copy_bw_bytes_per_s("d2h") == 40.0e9
    with pytest.raises(UnknownNameError, match="valid: d2h, h2d"):
        cal.copy_time_s(10, "sideways")
    with pytest.raises(ValueError):
        cal.copy_time_s(-1)


def test_round_trip_through_mapping(cal):
    again = calibration_from_spec(validate_mapping(dict(as_mapping(cal))), cal.path)
    assert again == cal


def test_unquoted_yaml_date_is_accepted(tmp_path):
    text = yaml.safe_dump(BASE, sort_keys=False).replace("'2026-11-29'", "2026-11-29")
    path = tmp_path / "d.yaml"
    path.write_text(text)
    assert load_calibration(str(path)).date == "2026-11-29"


def _bad(tmp_path, mutate):
    data = copy.deepcopy(BASE)
    mutate(data)
    path = write(tmp_path, data)
    with pytest.raises(ConfigError) as info:
        load_calibration(str(path))
    msg = str(info.value)
    assert "\n" not in msg
    return msg, path


def _line_of(path, key):
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if key in line)


@pytest.mark.parametrize(
    "mutate, field, words",
    [
        (lambda d: d.update(source="guess"), "source", "'gpu', 'synthetic' or 'cpu'"),
        (lambda d: d.update(step_overhead_s=-1), "step_overhead_s", "greater than or equal"),
        (lambda d: d.update(colour="red"), "colour", "unknown field"),
        (lambda d: d["decode"].update(efficiency=[0.8, 95, 0.4]), "decode", "(0, 1.5]"),
        (lambda d: d["gemm"].update(x=[256, 16]), "gemm", "strictly increasing"),
        (lambda d: d["attention"].update(bw_efficiency=[[0.4, 0.6]]), "attention", "one row"),
        (lambda d: d["copy"].pop("d2h"), "copy", "missing: d2h"),
        (lambda d: d.update(date="yesterday"), "date", "ISO date"),
    ],
)
def test_bad_files_give_one_line_with_file_line_and_field(tmp_path, mutate, field, words):
    msg, path = _bad(tmp_path, mutate)
    assert msg.startswith(f"{path}:")
    assert f": {field}" in msg
    assert words in msg
    if field in ("source", "step_overhead_s", "colour", "date"):
        assert msg.startswith(f"{path}:{_line_of(path, field + ':')}:")


def test_several_problems_still_one_line(tmp_path):
    msg, _ = _bad(tmp_path, lambda d: d.update(source="x", step_overhead_s=-1))
    assert "(and 1 more)" in msg


def test_not_a_mapping_and_bad_yaml_and_missing_file(tmp_path):
    p = tmp_path / "list.yaml"
    p.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_calibration(str(p))
    p = tmp_path / "broken.yaml"
    p.write_text("device: [unclosed\n")
    with pytest.raises(ConfigError, match=r"broken.yaml:\d+: invalid YAML"):
        load_calibration(str(p))
    with pytest.raises(ConfigError, match="cannot read file"):
        load_calibration(str(tmp_path / "nope.yaml"))


def test_by_name_search_folders_and_env_shadowing(tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    write(a, {**BASE, "device": "IN A"}, "mine.yaml")
    write(b, {**BASE, "device": "IN B"}, "mine.yaml")
    write(b, BASE, "other.yaml")
    assert load_calibration("mine", search_dirs=[a, b]).device == "IN A"
    assert set(available_calibrations([a, b])) == {"mine", "other"}
    with pytest.raises(UnknownNameError, match="unknown calibration 'absent'; valid: mine, other"):
        load_calibration("absent", search_dirs=[a, b])
    profiles = tmp_path / "profiles"
    (profiles / "calibration").mkdir(parents=True)
    write(profiles / "calibration", {**BASE, "device": "FROM ENV"}, "synthetic-example.yaml")
    monkeypatch.setenv("KVSIM_PROFILES", str(profiles))
    assert load_calibration("synthetic-example").device == "FROM ENV"  # user folder first


def test_shipped_synthetic_example_is_labelled_synthetic(monkeypatch):
    monkeypatch.delenv("KVSIM_PROFILES", raising=False)
    cal = load_calibration("synthetic-example")
    assert cal.source == "synthetic"
    assert "SYNTHETIC" in cal.device and "NOT a measurement" in cal.notes
    assert cal.attention_block_sizes == (1, 2, 4, 8, 16, 32, 64, 128)


def test_module_does_not_import_torch():
    code = "import sys, sim.cost.calibration; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
