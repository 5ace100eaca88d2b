"""The default suite (tests/golden/) against its committed baselines, and its coverage."""

from __future__ import annotations

import json
from pathlib import Path

from sim.regress.locate import resolve_baseline_dir, resolve_suite
from sim.regress.suite import load_suite

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def test_default_suite_matches_the_committed_baselines(run_cli):
    # no flags: the suite and baselines are found from the checkout the package runs from
    code, out, err = run_cli(["regress"])
    assert code == 0, out + err
    assert "-> PASSED" in out and "FAIL" not in out and "ERROR" not in out and "note:" not in out


def test_defaults_resolve_to_tests_golden():
    suite = resolve_suite(None)
    assert suite == GOLDEN / "suite.yaml"
    assert resolve_baseline_dir(None, suite) == GOLDEN / "baselines"


def test_every_case_has_a_baseline_and_every_allocator_kind_a_case():
    from sim.memory import allocator_kinds

    suite = load_suite(GOLDEN)
    names = {c.name for c in suite.cases}
    assert {p.stem for p in (GOLDEN / "baselines").glob("*.json")} == names
    kinds = {c.inputs.kind for c in suite.cases if c.runner == "allocator"}
    assert set(allocator_kinds()) <= kinds, "add a golden case for each new allocator kind"
    required = {"eta_alloc", "eta_effective", "phi_ext_at_256_tokens", "peak_allocated_bytes",
                "cow_copies"}  # fmt: skip
    for case in suite.cases:
        if case.runner == "allocator":
            assert required <= set(case.metrics), case.name
        if case.runner == "trace_replay":
            assert {"hit_rate", "evicted_blocks"} <= set(case.metrics), case.name
        if case.runner == "scenario" and case.name.startswith("sched-"):
            assert {"ttft_s.p50", "ttft_s.p99", "itl_s.p50", "itl_s.p99", "preemptions"} <= set(
                case.metrics
            ), case.name
        if case.runner == "scenario" and case.name.startswith("pause-"):
            assert {"pause_count", "resume_latency_s.p99", "paused_hbm_gb_s"} <= {
                m.replace(".p50", ".p99") for m in case.metrics
            }, case.name
    runners = [c.runner for c in suite.cases]
    assert runners.count("trace_replay") >= 1 and runners.count("scenario") >= 1
    # at least one scheduler case must exercise preemption, or the metric checks nothing
    preempting = [
        c.name
        for c in suite.cases
        if c.runner == "scenario"
        and json.loads((GOLDEN / "baselines" / f"{c.name}.json").read_text())["metrics"].get(
            "preemptions", 0
        )
        > 0
    ]
    assert preempting, "no golden scenario preempts"
