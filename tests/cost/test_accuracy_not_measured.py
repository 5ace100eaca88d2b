"""h70: a calibration's held-out error covers only what it measured; the step time it does
not measure (its ``not_measured`` sections that price steps: attention's KV reads and
FLOPs, host copies) is named in ``accuracy.not_measured`` with its share of the run's step
time, in the accuracy line every command prints, and beside the capacity error band."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim.cost.accuracy import accuracy_section, accuracy_text, unmeasured_shares
from sim.cost.calibration import CrossValidationSpec, load_calibration
from sim.metrics.schema import check_summary
from sim.profiles import load_model

ROOT = Path(__file__).resolve().parents[2]
AGENTS = ROOT / "workloads/agent_swarm.yaml"  # coding agents priced by the H100 Vidur calibration
CV = CrossValidationSpec.model_validate({
    "quantity": "operator time",
    "leave_one_token_range_out": {"median_rel_error": 0.08, "worst_rel_error": -0.4,
                                  "points": 12, "held_out": ["<= 64 tokens"]},
    "domain": {"accelerator": "h100-sxm-80gb", "models": ["llama-2-7b"], "max_tokens": 4096},
})  # fmt: skip
KW = {"accelerator": "h100-sxm-80gb", "tp": 1, "max_step_tokens": 2048}


def _problems(acc) -> list[str]:
    """What the summary schema says of an ``accuracy`` value (other keys' absence aside)."""
    return [p for p in check_summary({"accuracy": acc}) if "accuracy" in p]


def _steps() -> pd.DataFrame:
    """Three rows of a steps table from before issue 25 (no ``attention_max_s``): one step
    of 10 ms, a coalesced decode run of 4 steps over 20 ms, and a zero-time decision (no
    step: its terms must not count)."""
    return pd.DataFrame({
        "n_steps": [1, 4, 0],
        "duration_s": [0.010, 0.020, 0.0],
        "kv_read_s": [0.003, 0.002, 9.0],
        "attention_s": [0.001, 0.0025, 9.0],
        "copy_s": [0.0, 0.0005, 9.0],
    })  # fmt: skip


def test_shares_by_hand_from_an_old_steps_table():
    """Step time: 0.010 + 0.020 = 0.030 s (the zero-time row left out). Attention, with no
    ``attention_max_s`` column (the estimate before issue 25): each row's larger term x
    its steps, max(0.003, 0.001) x 1 + max(0.002, 0.0025) x 4 = 0.003 + 0.010 = 0.013 s,
    0.013 / 0.030 = 43.33 %; copies: a row's first step alone (a run's later steps repeat
    decodes, which copy nothing), 0.0005 s, 1.67 %."""
    shares = unmeasured_shares(_steps(), ("attention", "copy"))
    assert shares == {"attention": pytest.approx(0.013 / 0.030, rel=1e-12),
                      "copy": pytest.approx(0.0005 / 0.030, rel=1e-12)}  # fmt: skip
    # no step ran: no share (never a division by zero)
    assert unmeasured_shares(_steps().iloc[2:], ("attention",)) == {"attention": None}


def test_shares_by_hand_from_every_steps_attention():
    """With ``attention_max_s`` (each row's sum of its steps' own larger term: the run's
    4 steps read more KV each, 0.0025 + 0.0026 + 0.0027 + 0.0028 = 0.0106 s), attention is
    (0.003 + 0.0106) / 0.030 = 45.33 %; the zero-time row's 9.0 does not count."""
    steps = _steps().assign(attention_max_s=[0.003, 0.0106, 9.0])
    shares = unmeasured_shares(steps, ("attention", "copy"))
    assert shares == {"attention": pytest.approx(0.0136 / 0.030, rel=1e-12),
                      "copy": pytest.approx(0.0005 / 0.030, rel=1e-12)}  # fmt: skip


def test_a_calibrated_section_names_what_its_error_leaves_out():
    """The shipped H100 Vidur calibration lists attention and copy as not measured (and
    decode, gemm: priced by its linear section, no step time of their own)."""
    cal = replace(load_calibration("h100-sxm-80gb-vidur"), cross_validation=CV)
    model = load_model("llama-2-7b")
    before = accuracy_section(cal, model=model, **KW)  # before a run: named, no share
    assert before["not_measured"] == {"attention": None, "copy": None}
    assert accuracy_text(before) == ("calibration, cross-validated (h100-sxm-80gb-vidur): "
                                     "median 8.0%, worst -40.0%; not measured: attention, copy")  # fmt: skip
    after = accuracy_section(cal, model=model, steps=_steps(), **KW)
    assert accuracy_text(after) == (
        "calibration, cross-validated (h100-sxm-80gb-vidur): median 8.0%, worst -40.0%; not "
        "measured: attention (43.3% of this run's step time), copy (1.7% of this run's step time)"
    )
    assert after["detail"].endswith(
        "; not measured (roofline-priced, outside the held-out error): attention (KV reads, "
        "attention FLOPs), host copies"
    )
    assert before["detail"] == after["detail"]  # the shares are in not_measured and the line
    assert not _problems(after) and not _problems(before)
    # a share under 0.05 % stays in the section and out of the line
    quiet = accuracy_section(cal, model=model, steps=_steps().assign(copy_s=0.0), **KW)
    assert quiet["not_measured"]["copy"] == 0.0
    assert accuracy_text(quiet).endswith(
        "; not measured: attention (43.3% of this run's step time)"
    )


def test_tables_and_the_roofline_measure_nothing_less_and_old_summaries_stay_valid():
    roof = accuracy_section(None, model=load_model("llama-3.1-8b"), steps=_steps(), **KW)
    assert (
        roof["not_measured"] == {}
        and accuracy_text(roof) == "roofline, unvalidated (no measured error)"
    )
    old = {k: v for k, v in roof.items() if k != "not_measured"}  # a run folder from before
    assert not _problems(old)
    for bad in ({"attention": -0.1}, {"attention": "a third"}, ["attention"]):
        assert _problems({**roof, "not_measured": bad}), bad
    from sim.report.html import accuracy_block

    assert "not measured (share of the step time)" in accuracy_block(old)  # row, "-"


def test_a_vidur_calibrated_agent_run_names_attention_in_accuracy(tmp_path, run_cli):
    """The probe's case: coding agents on the H100 Vidur calibration. The share is
    recomputed here from the run's steps table by the documented formula (every step's
    own attention, ``attention_max_s``; a row's first step alone is less)."""
    out = tmp_path / "run"
    code, text, _ = run_cli(["run", str(AGENTS), "--out", str(out), "--no-report", "--set",
                             "workload.num_trajectories=4", "--set",
                             "workload.arrival.concurrency=4"])  # fmt: skip
    assert code == 0
    s = json.loads((out / "summary.json").read_text())
    assert not check_summary(s)
    steps = pd.read_parquet(out / "steps.parquet")
    ran = steps[steps.n_steps > 0]
    want = float(ran.attention_max_s.sum() / ran.duration_s.sum())
    one = ran[ran.n_steps == 1]  # a row of one step: that step's larger term
    assert len(one) and (one.attention_max_s == np.maximum(one.kv_read_s, one.attention_s)).all()
    acc = s["accuracy"]
    assert acc["source"] == "h100-sxm-80gb-vidur" and set(acc["not_measured"]) == {
        "attention",
        "copy",
    }
    assert acc["not_measured"]["attention"] == pytest.approx(want, rel=1e-9) and want > 0.05
    (line,) = [x for x in text.splitlines() if "accuracy of the latencies" in x]
    assert line.endswith(f"; not measured: attention ({want:.1%} of this run's step time)")
    assert acc["detail"].endswith("not measured (roofline-priced, outside the held-out error): "
                                  "attention (KV reads, attention FLOPs), host copies")  # fmt: skip


def test_a_cluster_pools_its_nodes_steps(tmp_path, run_cli):
    """Four nodes on one calibration: the share is over every node's steps, not the
    first node's."""
    out = tmp_path / "run"
    code, _, _ = run_cli(["run", str(ROOT / "workloads/cluster_coding_agents.yaml"), "--out",
                          str(out), "--no-report", "--quiet", "--set",
                          "workload.num_trajectories=8", "--set",
                          "workload.arrival.concurrency=8"])  # fmt: skip
    assert code == 0
    steps = pd.read_parquet(out / "steps.parquet")
    ran = steps[steps.n_steps > 0]
    assert ran.node.nunique() > 1

    def share(r):
        return float(r.attention_max_s.sum() / r.duration_s.sum())

    acc = json.loads((out / "summary.json").read_text())["accuracy"]
    assert acc["not_measured"]["attention"] == pytest.approx(share(ran), rel=1e-9)
    assert acc["not_measured"]["attention"] != pytest.approx(share(ran[ran.node == 0]), rel=1e-6)


def test_the_capacity_band_says_what_it_leaves_out(capsys):
    from sim.cli.capacity import _print_band
    from sim.sweep.error_band import SCALE_KEY, capacity_error_band

    class Answer:
        def __init__(self, value):
            self.capacity = {"value": value, "ci95_low": value, "ci95_high": value,
                             "converged": True}  # fmt: skip

    band = capacity_error_band(lambda sc, slos, *, sets, **o: Answer(round(10 / sets[SCALE_KEY])),
                               AGENTS, [], sets={})  # fmt: skip
    assert band["accuracy"]["not_measured"] == {"attention": None, "copy": None}  # no run yet
    assert band["note"].endswith("; not measured, so outside the band: attention, copy)")
    _print_band(band, "concurrency")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("median 10.7%, worst +103.8%; not measured: attention, copy")
    # 10 / 1.107 -> 9 (slower), 10 / 0.893 -> 11 (faster)
    assert lines[-1] == (
        "  error band: 9 - 11 concurrency at step times +/-10.7% (slower - "
        "faster; attention, copy not measured, outside the band)"
    )
