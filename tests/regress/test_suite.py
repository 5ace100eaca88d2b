"""Suite validation: one-line ``file:line: field: message`` errors, wall-clock refusal."""

from __future__ import annotations

import pytest

from sim.errors import ConfigError, KvsimError
from sim.regress.suite import load_suite, wall_clock_word

GOOD = """
schema_version: 1
defaults: {abs: 0.5, rel: 0.01}
cases:
  - name: one
    runner: fixed
    inputs: {values: {a: 1, b: 2}}
    metrics:
      a: {better: lower}
      b: {better: higher, abs: 0, two_sided: true}
"""


def test_good_suite_applies_defaults(write_suite):
    suite = load_suite(write_suite(GOOD))
    (case,) = suite.cases
    assert case.name == "one" and case.runner == "fixed"
    assert case.inputs.values == {"a": 1, "b": 2}
    a, b = case.metrics["a"], case.metrics["b"]
    assert (a.better, a.abs_tol, a.rel_tol, a.two_sided) == ("lower", 0.5, 0.01, False)
    assert (b.better, b.abs_tol, b.rel_tol, b.two_sided) == ("higher", 0.0, 0.01, True)
    assert list(case.metrics) == ["a", "b"]  # the suite's order is kept
    assert case.location.endswith("suite.yaml:4")


def _error(write_suite, text) -> str:
    d = write_suite(text)
    with pytest.raises(KvsimError) as info:
        load_suite(d)
    msg = str(info.value)
    assert "\n" not in msg
    return msg


def test_wall_clock_metric_is_refused_with_its_line(write_suite):
    msg = _error(write_suite, GOOD.replace("b: {better: higher", "wall_time_s: {better: higher"))
    assert "suite.yaml:9: cases.0.metrics.wall_time_s: wall-clock figures are never compared" in msg
    msg = _error(write_suite, GOOD.replace("b: {better: higher", "loop.elapsed_s: {better: lower"))
    assert "cases.0.metrics.loop.elapsed_s" in msg and "never compared" in msg


def test_wall_clock_words():
    assert wall_clock_word("wall_time_s") == "wall"
    assert wall_clock_word("summary.requests_per_wall_s") == "wall"
    assert wall_clock_word("ttft_s.p99") is None
    assert wall_clock_word("prefix_hit_rate") is None


@pytest.mark.parametrize(
    "old,new,expected",
    [
        ("better: lower}", "better: down}", "suite.yaml:8: cases.0.metrics.a.better: Input should be 'lower' or 'higher'"),
        ("better: lower}", "better: lower, tol: 1}", "suite.yaml:8: cases.0.metrics.a.tol: unknown field"),
        ("better: lower}", "better: lower, abs: -1}", "cases.0.metrics.a.abs: Input should be greater than or equal to 0"),
        ("runner: fixed", "runner: magic", "suite.yaml:5: cases.0.runner: unknown regress runner 'magic'; valid: allocator, fixed, scenario, trace_replay"),
        ("inputs: {values: {a: 1, b: 2}}", "inputs: {valuez: {}}", "suite.yaml:6: cases.0.inputs.values: Field required (and 1 more)"),
        ("name: one", "name: ../one", "suite.yaml:4: cases.0.name: must start with a letter or digit"),
        ("schema_version: 1", "schema_version: 2", "suite.yaml:1: schema_version: Input should be 1"),
        ("a: {better: lower}", "a: lower", "suite.yaml:8: cases.0.metrics.a: Input should be a valid dictionary"),
        ("a: {better: lower}", "a b: {better: lower}", "cases.0.metrics.a b: a metric name is a dotted path"),
        ("a: {better: lower}", "a: {abs: 1}", "cases.0.metrics.a.better: Field required"),
    ],
)  # fmt: skip
def test_errors_name_file_line_and_field(write_suite, old, new, expected):
    assert old in GOOD
    assert expected in _error(write_suite, GOOD.replace(old, new))


def test_duplicate_case_names(write_suite):
    text = GOOD + GOOD.split("cases:\n")[1]
    assert "suite.yaml:10: cases.1.name: duplicate case name 'one'" in _error(write_suite, text)


def test_allocator_inputs_need_exactly_one_workload(write_suite):
    text = """
    schema_version: 1
    cases:
      - name: paged
        runner: allocator
        inputs: {kind: paged, pool_bytes: 1 MiB, kv_bytes_per_token: 64}
        metrics: {eta_alloc: {better: higher}}
    """
    msg = _error(write_suite, text)
    assert "suite.yaml:5: cases.0.inputs: Value error, give exactly one workload" in msg


def test_not_a_suite(write_suite, tmp_path):
    assert "a suite must be a mapping" in _error(write_suite, "- 1\n- 2\n")
    assert "cases: Field required" in _error(write_suite, "schema_version: 1\n")
    with pytest.raises(ConfigError, match="suite file not found"):
        load_suite(tmp_path / "nowhere.yaml")
    assert "invalid YAML" in _error(write_suite, "cases: [\n")


def test_select_cases(write_suite):
    suite = load_suite(write_suite(GOOD))
    assert [c.name for c in suite.select(["one"])] == ["one"]
    assert suite.select(None) == suite.cases
    with pytest.raises(KvsimError, match="unknown case 'two'; valid: one"):
        suite.select(["two"])
