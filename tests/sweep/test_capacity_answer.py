"""What a capacity answer says beside its number: the window's SLO values beside the
whole run's, intervals never below 0, no passing load -> exit 1, cost per token at the
answer, every option and configuration checked before any run."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pandas as pd
import pytest

from sim.cost import StepWork
from sim.cost.pricer import prefill_share
from sim.run.pricing import step_time_split, token_costs
from sim.sweep import answer, find_capacity, parse_slo
from sim.sweep.stats import ci95


def test_interval_is_clipped_at_zero_and_says_so():
    lo, hi, notes = answer.interval([1.0, 10.0])
    raw = ci95([1.0, 10.0])
    assert raw[0] < 0 and (lo, hi) == (0.0, raw[1])
    assert "clipped at 0" in notes[0] and "--replications 5" in notes[0]
    assert answer.interval([4.0, 5.0, 6.0]) == (*ci95([4.0, 5.0, 6.0]), [])
    assert answer.interval([7.0, 7.0]) == (7.0, 7.0, [])
    lo, hi, notes = answer.interval([3.0])
    assert (lo, hi) == (None, None) and notes[0].startswith("one replication: no interval")


def test_a_slo_met_inside_the_window_only_is_named():
    slo = parse_slo("ttft_p99_s=2")
    rows = [
        {"replication": 0, "seed": 1, "load": 12, "window": {"ttft_p99_s": 1.8},
         "whole_run": {"ttft_p99_s": 11.5}},
        {"replication": 1, "seed": 2, "load": 11, "window": {"ttft_p99_s": 1.9},
         "whole_run": {"ttft_p99_s": 1.95}},
    ]  # fmt: skip
    (note,) = answer.window_only_notes(rows, [slo])
    assert note.startswith("NOTE: ttft_p99_s<=2 is met inside the measurement window only, in 1 of 2")
    assert "ttft_p99_s = 11.5 s (window 1.8 s, seed 1, load 12)" in note
    rows[0]["whole_run"]["ttft_p99_s"] = 2.0  # at the limit meets it
    assert answer.window_only_notes(rows, [slo]) == []


class _Linear:
    """A pricer whose step times are easy to compute by hand: 10 ms per step, 0.1 ms per
    prefill token, 0.02 ms per decode, 1 us per decode history token."""

    def price(self, work: StepWork) -> SimpleNamespace:
        t = 0.01 + 1e-4 * work.prefill_tokens + 2e-5 * work.n_decode
        return SimpleNamespace(total_s=t + 1e-6 * work.decode_history_tokens)


def test_a_step_is_split_by_the_priced_time_of_its_parts():
    price = _Linear().price
    mixed = StepWork(100, 20_000, ((300, 1000),), copy_bytes=5e6, alloc_calls=3)
    # prefill alone 0.01 + 0.03 = 0.04 s; decodes alone 0.01 + 0.002 + 0.02 = 0.032 s
    assert prefill_share(price, mixed) == pytest.approx(0.04 / 0.072, rel=1e-12)
    assert prefill_share(price, StepWork(8, 800)) == 0.0  # decodes only
    assert prefill_share(price, StepWork(0, 0, ((512, 0),))) == 1.0  # a prefill only


def test_speculative_verifies_are_priced_with_the_decodes():
    """A verify of 1 + d tokens is scheduled as a chunk, but it is output work: the split
    moves it to the decode side (``verify_chunks``: its position among the chunks)."""
    price = _Linear().price
    # a prompt chunk of 300 tokens and a verify of 4 tokens, beside 100 plain decodes
    step = StepWork(100, 20_000, ((300, 1000), (4, 2000)))
    # prompt alone 0.01 + 0.03 = 0.04 s; decodes + verify 0.01 + 0.0004 + 0.002 + 0.02 = 0.0324 s
    assert prefill_share(price, step, [1]) == pytest.approx(0.04 / 0.0724, rel=1e-12)
    assert prefill_share(price, StepWork(0, 0, ((4, 2000),)), [0]) == 0.0  # a verify alone
    assert prefill_share(price, StepWork(0, 0, ((300, 0), (4, 2000))), [1]) == pytest.approx(
        0.04 / (0.04 + 0.0104), rel=1e-12
    )


def test_two_steps_priced_by_hand_give_the_cost_per_token():
    """Step 1: 300 prefill tokens beside 100 decodes (history 20,000), 1 s: prefill
    0.04 / (0.04 + 0.032) of it = 0.5556 s (by token counts it would be 0.75 s). Step 2:
    a run of 3 decode steps, 3 s, all decode."""
    price = _Linear().price
    first = StepWork(100, 20_000, ((300, 1000),))
    steps = pd.DataFrame({
        "duration_s": [1.0, 3.0, 0.0],
        "n_steps": [1, 3, 0],
        "prefill_tokens": [300, 0, 0],
        "n_decode": [100, 100, 0],
        "prefill_s": [1.0 * prefill_share(price, first), 0.0, 0.0],
    })  # fmt: skip
    prefill, decode = step_time_split(steps)
    assert prefill == pytest.approx(5 / 9, rel=1e-12) and decode == pytest.approx(4 - 5 / 9)
    # $36 over the run; 300 prompt tokens computed, 400 output tokens
    summary = {"usd_total": 36.0, "prefill_tokens": 300, "output_tokens": 400}
    requests = pd.DataFrame({"admitted_s": [0.0], "hit_tokens": [0], "held_tokens": [0]})
    c = token_costs(summary, steps, requests)
    assert c["prefill_time_share"] == pytest.approx(5 / 36, rel=1e-12)
    assert c["usd_per_million_input_tokens"] == pytest.approx(5.0 / 300 * 1e6, rel=1e-12)
    assert c["usd_per_million_output_tokens"] == pytest.approx(31.0 / 400 * 1e6, rel=1e-12)


def test_the_engine_records_each_steps_prefill_seconds(tiny):
    from sim.run import run_scenario

    st = run_scenario(str(tiny)).steps
    d, pre = st.duration_s.to_numpy(), st.prefill_s.to_numpy()
    assert ((pre >= 0) & (pre <= d + 1e-15)).all()
    one = st.n_steps == 1
    assert (pre[(one & (st.prefill_tokens == 0)).to_numpy()] == 0).all()  # decodes only
    alone = (one & (st.n_decode == 0) & (st.prefill_tokens > 0)).to_numpy()
    assert alone.any() and pre[alone] == pytest.approx(d[alone], rel=1e-12)  # all prefill
    mixed = (one & (st.n_decode > 0) & (st.prefill_tokens > 0)).to_numpy()
    assert mixed.any() and ((pre[mixed] > 0) & (pre[mixed] < d[mixed])).all()


def test_token_costs_add_up_to_the_run_total(tiny):
    from sim.run import run_scenario

    r = run_scenario(str(tiny))
    s = r.summary
    c = token_costs(s, r.steps, r.requests)
    assert s["usd_total"] > 0 and 0 < c["prefill_time_share"] < 1
    # the prefill and decode dollars add up to what the run cost
    total = (c["usd_per_million_input_tokens"] * s["prefill_tokens"]
             + c["usd_per_million_output_tokens"] * s["output_tokens"]) / 1e6  # fmt: skip
    assert total == pytest.approx(s["usd_total"], rel=1e-12)
    admitted = r.requests[r.requests.admitted_s.notna()]
    reused = float((admitted.hit_tokens + admitted.held_tokens).sum())
    assert c["usd_per_million_cached_input_tokens"] == pytest.approx(
        s["paused_hbm_usd"] / reused * 1e6
    )
    assert c["usd_per_trajectory"] == s["usd_per_trajectory"]
    free = token_costs({**s, "usd_total": None}, r.steps, r.requests)
    assert free["usd_per_million_input_tokens"] is None  # no price: no figure


def test_the_answer_shows_window_and_whole_run_and_its_cost(tiny):
    res = find_capacity(tiny, ["ttft_p99_s=0.5"], replications=2, executor="inline")
    assert res.capacity["met"] and res.capacity["ci95_low"] >= 0
    assert [row["load"] for row in res.at_capacity] == res.capacity["per_replication"]
    for row in res.at_capacity:
        probe = next(p for p in res.points
                     if p["replication"] == row["replication"] and p["load"] == row["load"])  # fmt: skip
        assert row["window"] == probe["slo_values"] and row["window"]["ttft_p99_s"] <= 0.5
        assert row["whole_run"]["ttft_p99_s"] > 0
    costs = [p["cost"] for p in res.points if (p["replication"], p["load"]) in
             {(row["replication"], row["load"]) for row in res.at_capacity}]  # fmt: skip
    want = sum(c["usd_per_million_output_tokens"] for c in costs) / len(costs)
    assert res.cost["usd_per_million_output_tokens"] == pytest.approx(want)
    assert res.cost["runs"] == 2 and res.cost["usd_per_gpu_hour"] > 0
    frame = res.points_frame()
    assert {"ttft_p99_s", "ttft_p99_s.whole_run", "cost.usd_per_million_input_tokens"} <= set(frame)


def test_no_load_meeting_the_slo_is_said_and_exits_1(run_cli, tiny):
    args = ["capacity", str(tiny), "--slo", "ttft_p99_s=0.001", "--replications", "1",
            "--workers", "1", "--max-points", "3"]  # fmt: skip
    code, out, _ = run_cli(args)
    assert code == 1
    assert "  capacity:  none: no load tried meets the SLOs (the smallest, load " in out
    assert "ttft_p99_s = " in out and "largest load that passed" not in out
    code, out, _ = run_cli([*args, "--json"])
    doc = json.loads(out)
    assert code == 1 and doc["capacity"]["met"] is False and doc["capacity"]["value"] is None
    assert doc["cost"] is None and doc["notes"][-1].startswith("no load tried meets the SLOs")


def test_options_and_every_configuration_are_checked_before_any_run(run_cli, tiny):
    code, _, err = run_cli(["capacity", str(tiny), "--slo", "ttft_p99_s=1", "--replications", "0"])
    assert code == 2 and "--replications must be in [1, 1000], got 0" in err
    code, _, err = run_cli(["capacity", str(tiny), "--slo", "ttft_p99_s=1",
                            "--vary", "hardware.accelerator=h100-sxm-80gb,h900"])  # fmt: skip
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1  # no probe ran: no progress line before it
    assert "--vary hardware.accelerator=h900" in lines[0] and "unknown accelerator 'h900'" in lines[0]
