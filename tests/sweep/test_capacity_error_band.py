"""``kvsim capacity``'s error band: the search again at step times -/+ the cost model's
error (``sim.sweep.error_band``), and the CLI's report of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RTX4090 = ROOT / "workloads/validation/rtx4090_llama31_8b.yaml"


def test_capacity_error_band_searches_again_at_the_scaled_step_times(tiny):
    from sim.sweep.error_band import SCALE_KEY, capacity_error_band

    calls = []

    class Answer:
        def __init__(self, value):
            self.capacity = {"value": value, "ci95_low": value - 1, "ci95_high": value + 1,
                             "converged": True}  # fmt: skip

    def find(scenario, slos, *, sets, **options):
        calls.append((sets, options))
        return Answer(10.0 / sets[SCALE_KEY])

    band = capacity_error_band(find, tiny, [], sets={}, replications=2, out="somewhere")
    assert band["faster"] is None and calls == [] and "roofline" in band["note"]
    band = capacity_error_band(find, RTX4090, [], sets={}, replications=2, out="somewhere")
    # the RTX 4090 validation table's median |difference|: 1.3 % (docs/validation.md)
    assert [c[0][SCALE_KEY] for c in calls] == [pytest.approx(0.987), pytest.approx(1.013)]
    assert all(c[1] == {"replications": 2, "out": None} for c in calls)  # nothing written
    assert band["faster"]["value"] > band["slower"]["value"]
    assert band["step_time_error"] == pytest.approx(0.013)


def test_capacity_cli_reports_accuracy_and_no_band_for_a_roofline_scenario(run_cli, tiny):
    args = ["capacity", str(tiny), "--slo", "ttft_p99_s=0.5", "--replications", "1",
            "--max-points", "3"]  # fmt: skip
    code, out, _ = run_cli(args)
    assert code == 0 and "accuracy:  roofline, unvalidated" in out and "error band: none" in out
    code, out, _ = run_cli([*args, "--json"])
    band = json.loads(out)["error_band"]
    assert band["faster"] is None and band["accuracy"]["basis"] == "roofline, unvalidated"
    code, out, _ = run_cli([*args, "--json", "--no-error-band"])
    assert "error_band" not in json.loads(out)
