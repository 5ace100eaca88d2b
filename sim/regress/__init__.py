"""Regression checks of simulated metrics against golden baselines (``kvsim regress``).

Layer: an entry point beside ``sim/run`` and ``sim/cli``: a suite YAML names cases, each
case a registered *runner* (``scenario``, ``allocator``, ``trace_replay``, or one a user
registers) with its inputs and the metrics to check, each metric with its tolerance, good
direction and two-sidedness. Baselines are one JSON file per case.

    from sim.regress import load_suite, run_session
    report = run_session(load_suite("tests/golden"), "tests/golden/baselines")
    report.passed

Modules: ``suite`` (validation), ``runners`` (registry + built-ins), ``compare`` (verdict
rules), ``baseline`` (files), ``session`` (the run), ``report`` (table, JSON, JUnit),
``locate`` (defaults from the checkout).

Invariant: wall-clock figures never enter a comparison or a baseline; importing this
package imports no simulation layer (runners import theirs when a case runs).
"""

from sim.regress.compare import CaseOutcome, MetricOutcome, compare_case, compare_metric
from sim.regress.runners import RunContext, flatten_metrics, get_runner, register_runner
from sim.regress.session import RegressReport, run_session
from sim.regress.suite import Case, MetricCheck, Suite, load_suite

__all__ = [
    "Case",
    "CaseOutcome",
    "MetricCheck",
    "MetricOutcome",
    "RegressReport",
    "RunContext",
    "Suite",
    "compare_case",
    "compare_metric",
    "flatten_metrics",
    "get_runner",
    "load_suite",
    "register_runner",
    "run_session",
]
