"""`kvsim regress` end to end: update, pass, perturbations, JUnit, JSON, strict, errors."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from pydantic import BaseModel

SUITE = """
schema_version: 1
cases:
  - name: fixed-case
    runner: fixed
    inputs: {values: {latency_s: 1.0, hit_rate: 0.5, preemptions: 3, phi: null}}
    metrics:
      latency_s: {better: lower, rel: 0.05}
      hit_rate: {better: higher, abs: 0.01}
      preemptions: {better: lower}
      phi: {better: lower}
  - name: paged
    runner: allocator
    inputs:
      kind: paged
      pool_bytes: 4 MiB
      kv_bytes_per_token: 1024
      options: {block_size: 16}
      generator: {n_ops: 300, seed: 3, max_prompt_tokens: 512, max_append_tokens: 32, max_live: 16}
      request_tokens: [256]
    metrics:
      eta_alloc: {better: higher}
      eta_effective: {better: higher}
      phi_ext_at_256_tokens: {better: lower}
      peak_allocated_bytes: {better: lower}
      cow_copies: {better: lower}
"""


@pytest.fixture
def recorded(write_suite, run_cli):
    """A suite whose baselines were just written by ``--update``."""
    d = write_suite(SUITE)
    code, out, err = run_cli(["regress", "--suite", str(d), "--update"])
    assert code == 0, out + err
    return d


def _baseline(d, case):
    return json.loads((d / "baselines" / f"{case}.json").read_text())


def _set_baseline(d, case, metric, value):
    data = _baseline(d, case)
    data["metrics"][metric] = value
    (d / "baselines" / f"{case}.json").write_text(json.dumps(data))


def _regress(run_cli, d, *flags):
    return run_cli(["regress", "--suite", str(d), *flags])


def test_update_writes_baselines_and_reports(write_suite, run_cli):
    d = write_suite(SUITE)
    code, out, _ = _regress(run_cli, d)
    assert code == 1 and "FAIL fixed-case: latency_s no baseline" in out
    code, out, _ = _regress(run_cli, d, "--update")
    assert code == 0
    assert "updated 2 baseline files" in out and "9 metric values changed" in out
    fixed = _baseline(d, "fixed-case")
    assert fixed == {
        "schema_version": 1,
        "case": "fixed-case",
        "runner": "fixed",
        "metrics": {"latency_s": 1.0, "hit_rate": 0.5, "preemptions": 3, "phi": None},
    }
    paged = _baseline(d, "paged")["metrics"]
    assert list(paged) == [
        "eta_alloc", "eta_effective", "phi_ext_at_256_tokens", "peak_allocated_bytes", "cow_copies"
    ]  # fmt: skip
    assert 0 < paged["eta_alloc"] <= 1 and paged["peak_allocated_bytes"] <= 4 * 2**20


def test_identical_runs_pass_and_a_second_update_changes_nothing(recorded, run_cli):
    code, out, _ = _regress(run_cli, recorded)
    assert code == 0 and "-> PASSED" in out and "FAIL" not in out
    before = {p.name: p.stat().st_mtime_ns for p in (recorded / "baselines").iterdir()}
    code, out, _ = _regress(run_cli, recorded, "--update")
    assert code == 0
    assert "updated 0 baseline files" in out and "(2 unchanged, 0 metric values changed)" in out
    after = {p.name: p.stat().st_mtime_ns for p in (recorded / "baselines").iterdir()}
    assert before == after


def test_value_moved_beyond_tolerance_fails_naming_the_metric(recorded, run_cli):
    _set_baseline(recorded, "fixed-case", "latency_s", 0.9)  # allowed 0.045, moved 0.1
    code, out, _ = _regress(run_cli, recorded)
    assert code == 1
    assert "FAIL fixed-case: latency_s regression: baseline 0.9 -> now 1" in out
    assert "lower is better" in out
    assert "FAIL fixed-case: hit_rate" not in out and "FAIL paged" not in out


def test_value_moved_within_tolerance_passes(recorded, run_cli):
    _set_baseline(recorded, "fixed-case", "latency_s", 0.96)  # allowed 0.048, moved 0.04
    _set_baseline(recorded, "fixed-case", "hit_rate", 0.509)  # allowed 0.01
    code, out, _ = _regress(run_cli, recorded)
    assert code == 0, out


def test_changed_block_size_fails_naming_eta_alloc(recorded, run_cli):
    suite = recorded / "suite.yaml"
    suite.write_text(suite.read_text().replace("block_size: 16", "block_size: 64"))
    code, out, _ = _regress(run_cli, recorded)
    assert code == 1
    assert "FAIL paged: eta_alloc regression" in out  # bigger blocks waste more of each tail


def test_zero_tolerance_is_exact_for_exact_metrics(recorded, run_cli):
    eta = _baseline(recorded, "paged")["metrics"]["eta_alloc"]
    _set_baseline(recorded, "paged", "eta_alloc", eta * (1 + 1e-15) + 1e-15)
    _set_baseline(recorded, "fixed-case", "preemptions", 2)
    code, out, _ = _regress(run_cli, recorded)
    assert code == 1
    assert "FAIL paged: eta_alloc regression" in out
    assert "FAIL fixed-case: preemptions regression: baseline 2 -> now 3" in out


def test_missing_metric_fails_and_is_not_written(recorded, run_cli):
    suite = recorded / "suite.yaml"
    suite.write_text(suite.read_text().replace("      phi: {better: lower}",
                                               "      phi: {better: lower}\n      evictions: {better: lower}"))  # fmt: skip
    code, out, _ = _regress(run_cli, recorded)
    assert code == 1 and "FAIL fixed-case: evictions missing" in out
    code, out, _ = _regress(run_cli, recorded, "--update")
    assert code == 1
    assert (
        "FAIL fixed-case: evictions missing: the run did not report it (baseline not written)"
        in out
    )
    assert "evictions" not in _baseline(recorded, "fixed-case")["metrics"]


def test_undefined_value_must_stay_undefined(recorded, run_cli):
    _set_baseline(recorded, "fixed-case", "phi", 0.2)
    code, out, _ = _regress(run_cli, recorded)
    assert code == 1 and "FAIL fixed-case: phi changed: baseline 0.2 -> now null" in out


def test_improvement_passes_one_sided_fails_two_sided_or_strict(recorded, run_cli):
    _set_baseline(recorded, "fixed-case", "hit_rate", 0.4)  # now 0.5: higher is better
    code, out, _ = _regress(run_cli, recorded)
    assert code == 0 and "improvement" in out and "FAIL" not in out
    code, out, _ = _regress(run_cli, recorded, "--strict")
    assert code == 1 and "FAIL fixed-case: hit_rate improvement" in out and "--strict" in out
    suite = recorded / "suite.yaml"
    suite.write_text(suite.read_text().replace("abs: 0.01}", "abs: 0.01, two_sided: true}"))
    code, out, _ = _regress(run_cli, recorded)
    assert code == 1 and "FAIL fixed-case: hit_rate improvement" in out and "two-sided" in out


def test_update_prints_what_changed(recorded, run_cli):
    _set_baseline(recorded, "fixed-case", "latency_s", 0.9)
    code, out, _ = _regress(run_cli, recorded, "--update")
    assert code == 0
    row = next(line for line in out.splitlines() if "latency_s" in line)
    assert "fixed-case" in row and "0.9" in row and "regression" in row
    assert "updated 1 baseline files" in out and "1 metric values changed" in out
    assert _baseline(recorded, "fixed-case")["metrics"]["latency_s"] == 1.0


def test_junit_xml_has_the_failures(recorded, run_cli, tmp_path):
    _set_baseline(recorded, "fixed-case", "latency_s", 0.9)
    report = tmp_path / "reports" / "regress.xml"
    code, _, _ = _regress(run_cli, recorded, "--junit", str(report))
    assert code == 1
    root = ET.parse(report).getroot()
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("9", "1", "0")
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert set(suites) == {"fixed-case", "paged"}
    failed = [tc for tc in root.iter("testcase") if tc.find("failure") is not None]
    assert [tc.get("name") for tc in failed] == ["latency_s"]
    assert failed[0].get("classname") == "kvsim.regress.fixed-case"
    assert "latency_s regression" in failed[0].find("failure").get("message")
    assert suites["paged"].get("failures") == "0"


def test_junit_records_a_run_error(write_suite, run_cli, tmp_path):
    d = write_suite(
        SUITE
        + """
  - name: broken
    runner: trace_replay
    inputs: {trace: no_such_trace.jsonl}
    metrics: {hit_rate: {better: higher}}
"""
    )
    code, out, _ = _regress(run_cli, d, "--update")
    assert code == 1 and "ERROR broken:" in out and "trace file not found" in out
    assert sorted(p.name for p in (d / "baselines").iterdir()) == ["fixed-case.json", "paged.json"]
    report = tmp_path / "r.xml"
    code, out, _ = _regress(run_cli, d, "--junit", str(report))
    assert code == 1
    assert "fixed-case [fixed]: PASS" in out and "paged [allocator]: PASS" in out
    root = ET.parse(report).getroot()
    assert root.get("errors") == "1"
    err = root.find("testsuite[@name='broken']/testcase[@name='run']/error")
    assert "no_such_trace.jsonl: trace file not found" in err.get("message")


def test_json_output(recorded, run_cli):
    _set_baseline(recorded, "fixed-case", "preemptions", 4)  # now 3: an improvement
    code, out, _ = _regress(run_cli, recorded, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["passed"] is True and data["strict"] is False
    assert data["counts"]["cases"] == 2 and data["counts"]["metrics"] == 9
    assert data["counts"]["improvement"] == 1 and data["counts"]["ok"] == 8
    case = next(c for c in data["cases"] if c["name"] == "fixed-case")
    m = next(m for m in case["metrics"] if m["metric"] == "preemptions")
    assert (m["baseline"], m["now"], m["delta"], m["verdict"], m["fails"]) == (
        4, 3, -1, "improvement", False
    )  # fmt: skip
    assert m["better"] == "lower" and m["abs"] == 0 and m["rel"] == 0


def test_case_selection_and_baseline_folder(recorded, run_cli, tmp_path):
    other = tmp_path / "elsewhere"
    code, out, _ = _regress(run_cli, recorded, "--baseline", str(other), "--case", "fixed-case",
                            "--update")  # fmt: skip
    assert code == 0 and [p.name for p in other.iterdir()] == ["fixed-case.json"]
    code, out, _ = _regress(run_cli, recorded, "--baseline", str(other), "--case", "fixed-case")
    assert code == 0 and "paged" not in out


def test_stale_baseline_is_reported(recorded, run_cli):
    (recorded / "baselines" / "gone.json").write_text("{}")
    code, out, _ = _regress(run_cli, recorded)
    assert code == 0 and "gone.json has no case in the suite" in out


def test_corrupt_baseline_is_a_case_error_that_update_repairs(recorded, run_cli):
    (recorded / "baselines" / "paged.json").write_text("{not json")
    code, out, _ = _regress(run_cli, recorded)
    assert code == 1 and "ERROR paged:" in out and "paged.json:1: not valid JSON" in out
    code, _, _ = _regress(run_cli, recorded, "--update")
    assert code == 0 and _baseline(recorded, "paged")["case"] == "paged"


def test_wall_clock_metric_is_a_one_line_user_error(write_suite, run_cli):
    d = write_suite(SUITE.replace("latency_s: {better", "wall_time_s: {better"))
    code, out, err = _regress(run_cli, d)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "wall_time_s: wall-clock figures are never compared" in err


def test_without_a_checkout_suite_is_required(run_cli, monkeypatch, tmp_path):
    monkeypatch.setattr("sim.regress.locate.checkout_root", lambda: None)
    monkeypatch.chdir(tmp_path)  # no ./tests/golden/suite.yaml here either
    code, _, err = run_cli(["regress"])
    assert code == 2
    assert "no --suite given" in err and "pass --suite DIR" in err
    code, _, err = run_cli(["regress", "--suite", str(tmp_path / "none")])
    assert code == 2 and "no such suite file" in err


class BoomInputs(BaseModel):
    values: dict[str, float | int | None]


class _BoomRunner:
    """A runner with a bug: the session reports it and runs the other cases."""

    name = "boom"
    inputs_model = BoomInputs

    def run(self, inputs, ctx):
        raise RuntimeError("layer bug")


def test_a_crashing_runner_is_a_case_error_with_its_traceback(
    write_suite, run_cli, tmp_path, monkeypatch
):
    import sim.regress.runners as runners

    runners.get_runner("fixed")  # built-ins loaded before the registry is patched
    monkeypatch.setitem(runners._RUNNERS, "boom", _BoomRunner())  # removed after the test
    d = write_suite(
        SUITE.replace("name: fixed-case\n    runner: fixed", "name: fixed-case\n    runner: boom")
    )
    report = tmp_path / "r.xml"
    code, out, _ = _regress(run_cli, d, "--json", "--junit", str(report))
    assert code == 1
    data = json.loads(out)
    case = next(c for c in data["cases"] if c["name"] == "fixed-case")
    assert (case["status"], case["error"]) == ("error", "RuntimeError: layer bug")
    assert data["counts"]["errors"] == 1
    err = ET.parse(report).getroot().find("testsuite[@name='fixed-case']/testcase/error")
    assert "Traceback" in err.text and "raise RuntimeError" in err.text


class _ReturnsRunner:
    """A plug-in runner that returns ``RETURNED`` whatever its inputs."""

    name = "returns"
    inputs_model = BoomInputs
    returned: object = None

    def run(self, inputs, ctx):
        return self.returned


@pytest.mark.parametrize(
    "returned, error",
    [
        ([1.0, 0.5], "returned list [1.0, 0.5] for case 'fixed-case'; run must return a "
                     "mapping of metric names to numbers or None (docs/regression.md)"),
        (None, "returned NoneType None for case 'fixed-case'; run must return a mapping of "
               "metric names to numbers or None (docs/regression.md)"),
        ({"latency_s": "1.0"}, "returned str '1.0' for metric 'latency_s' of case "
                               "'fixed-case'; a metric is an int, a float or None "
                               "(docs/regression.md)"),
        ({"latency_s": True}, "returned bool True for metric 'latency_s' of case "
                              "'fixed-case'; a metric is an int, a float or None "
                              "(docs/regression.md)"),
    ],
)
def test_a_runner_returning_no_mapping_of_numbers_is_a_case_error_naming_it(
    recorded, run_cli, monkeypatch, returned, error
):
    """It aborted the whole session with a traceback (``now.get``, ``metric in now``, or
    the report formatting a string); now that case's one-line error, the others reported."""
    import sim.regress.runners as runners

    runners.get_runner("fixed")  # built-ins loaded before the registry is patched
    runner = _ReturnsRunner()
    runner.returned = returned
    monkeypatch.setitem(runners._RUNNERS, "returns", runner)  # removed after the test
    suite = recorded / "suite.yaml"
    suite.write_text(suite.read_text().replace("runner: fixed", "runner: returns"))
    for flags in ((), ("--update",)):
        code, out, _ = _regress(run_cli, recorded, "--json", *flags)
        assert code == 1
        data = json.loads(out)
        case = next(c for c in data["cases"] if c["name"] == "fixed-case")
        assert (case["status"], case["error"]) == ("error", f"regress runner 'returns' {error}")
        paged = next(c for c in data["cases"] if c["name"] == "paged")
        assert paged["status"] == "pass" and data["counts"]["errors"] == 1
    code, out, _ = _regress(run_cli, recorded)
    assert code == 1 and "paged [allocator]: PASS" in out
    assert "ERROR fixed-case: regress runner 'returns' returned" in out


def test_a_runner_returning_a_mapping_of_numbers_still_passes(recorded, run_cli, monkeypatch):
    """Any mapping (not only a dict), numbers or None for the declared metrics, anything
    for the others (ignored)."""
    from types import MappingProxyType

    import sim.regress.runners as runners

    runners.get_runner("fixed")
    runner = _ReturnsRunner()
    runner.returned = MappingProxyType(
        {"latency_s": 1.0, "hit_rate": 0.5, "preemptions": 3, "phi": None, "note": "x"}
    )
    monkeypatch.setitem(runners._RUNNERS, "returns", runner)
    suite = recorded / "suite.yaml"
    suite.write_text(suite.read_text().replace("runner: fixed", "runner: returns"))
    code, out, _ = _regress(run_cli, recorded)
    assert code == 0 and "fixed-case [returns]: PASS" in out


def test_update_json_lists_the_changes(recorded, run_cli):
    _set_baseline(recorded, "fixed-case", "preemptions", 5)
    code, out, _ = _regress(run_cli, recorded, "--update", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["update"] is True and data["written"] == ["fixed-case"]
    assert [(c["case"], c["metric"], c["baseline"], c["now"]) for c in data["changes"]] == [
        ("fixed-case", "preemptions", 5, 3)
    ]
