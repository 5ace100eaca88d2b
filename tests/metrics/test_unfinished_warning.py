"""h70: a run stopped at ``duration_s`` with work still going on says what it left
unfinished: the title counts finished of submitted, the table has an ``unfinished`` row,
and ``warnings`` says the latency percentiles cover only what finished, with a lower
bound of the TTFT percentiles counting each wait without a first token so far."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from sim.metrics.schema import check_summary
from sim.metrics.summary import run_warnings, unfinished_warning
from sim.report.text import summary_rows, summary_title

ROOT = Path(__file__).resolve().parents[2]
NAN = float("nan")


def _requests() -> pd.DataFrame:
    """Six requests at t = 10 s: two finished (TTFT 1 s and 3 s), one running with its first
    token (TTFT 2 s), two waiting since 8 s and 4 s (no first token), one rejected."""
    return pd.DataFrame({
        "status": ["finished", "finished", "running", "waiting", "waiting", "rejected"],
        "arrival_s": [0.0, 1.0, 2.0, 8.0, 4.0, 5.0],
        "first_token_s": [1.0, 4.0, 4.0, NAN, NAN, NAN],
        "ttft_s": [1.0, 3.0, 2.0, NAN, NAN, NAN],
        "preemptions": [0] * 6,
    })  # fmt: skip


def _summary(**kw) -> dict:
    s = {"scenario": "x", "requests_completed": 2, "requests_submitted": 6, "unfinished": 3,
         "rejected": 1, "rejected_by_reason": {"rejected_too_long": 1}, "preemptions": 0,
         "trajectories_completed": 2, "trajectories_total": 6, "trajectories_ended": 3,
         "trajectories_by_status": {"completed": 2, "failed": 0, "context_exhausted": 0},
         "sim_time_s": 10.0, "wall_time_s": 0.5}  # fmt: skip
    return {**s, **kw}


def test_the_warning_by_hand():
    """TTFT sample with the waits in place of the unknown TTFTs: 1, 3, 2 (with a first
    token) and 10 - 8 = 2, 10 - 4 = 6 (waiting): sorted 1, 2, 2, 3, 6. numpy's linear
    percentile sits at rank p/100 x (5 - 1): p50 at rank 2 -> 2.0 s; p99 at rank 3.96 ->
    3 + 0.96 x (6 - 3) = 5.88 s -> "5.9". The rejected request has no TTFT, ever."""
    want = ("3 of 6 requests unfinished when the run stopped at 10.0 s of simulated time: the "
            "latency percentiles cover only what happened by then (end-to-end: the 2 finished "
            "requests); 2 still had no first token after waiting 2.0-6.0 s, so TTFT over the 5 "
            "requests with or awaiting a first token is at least p50 2.0 s, p99 5.9 s (each "
            "wait so far a lower bound of its TTFT)")  # fmt: skip
    assert unfinished_warning(_summary(), _requests()) == want
    assert run_warnings(_summary(), _requests())[0] == want  # first, before the others
    # every unfinished request already has its first token: no bound to give
    started = _requests().assign(
        status=["finished", "finished", "running", "finished", "finished", "rejected"]
    )
    assert unfinished_warning(_summary(unfinished=1), started).endswith(
        "(end-to-end: the 2 finished requests)"
    )
    finished = _summary(unfinished=0, rejected=0, rejected_by_reason={})
    assert run_warnings(finished, _requests().iloc[:2]) == []  # a finished run: none


def test_title_and_row_say_what_finished():
    s = _summary()
    assert summary_title(s) == ("x: 2 of 6 requests finished (3 unfinished), 2 of 6 trajectories "
                                "in 10.0 s simulated (0.50 s wall)")  # fmt: skip
    assert ("unfinished (waiting or running at the end)", "3", "count") in summary_rows(s)
    done = _summary(unfinished=0, trajectories_ended=6)
    assert summary_title(done) == "x: 2 requests, 2 trajectories in 10.0 s simulated (0.50 s wall)"
    assert not [r for r in summary_rows(done) if r[0].startswith("unfinished")]
    # requests all done, trajectories still between turns at the horizon
    assert summary_title(_summary(unfinished=0)).startswith("x: 2 requests, 2 of 6 trajectories in")


def test_the_probe_run_says_what_it_left(tmp_path, run_cli):
    """chat_azure at 20 requests/s for 400 requests, stopped at 30 s: the end-of-run title
    and the warning, the bound recomputed here from requests.parquet."""
    out = tmp_path / "run"
    code, text, err = run_cli(["run", str(ROOT / "workloads/chat_azure.yaml"), "--out", str(out),
                               "--no-report", "--set", "workload.num_requests=400", "--set",
                               "workload.arrival.rate_per_s=20", "--set", "duration_s=30"])  # fmt: skip
    assert code == 0
    s = json.loads((out / "summary.json").read_text())
    assert not check_summary(s)
    req = pd.read_parquet(out / "requests.parquet")
    done = int((req.status == "finished").sum())
    left = int(req.status.isin(["waiting", "running"]).sum())
    assert done + left == len(req) == 400 and left == s["unfinished"] > 0
    title = (f"chat_azure: {done:,} of 400 requests finished ({left:,} unfinished), "
             f"{done:,} of 400 trajectories in 30.0 s")  # fmt: skip
    assert title in text
    pending = req.status.isin(["waiting", "running"]) & req.first_token_s.isna()
    waited = s["sim_time_s"] - req.arrival_s[pending]  # the run's end: its last step's
    bound = np.percentile(np.concatenate([req.ttft_s.dropna(), waited]), 99)
    warning = s["warnings"][0]  # (then the overload rule's: 20/s outpaces the node)
    assert s["warnings"][1:] == [w for w in s["warnings"] if w.startswith("no steady state")]
    assert warning.startswith(f"{left:,} of 400 requests unfinished when the run stopped at 30.0 s")
    assert (
        f"{int(pending.sum()):,} still had no first token after waiting {waited.min():,.1f}-"
        in warning
    )
    assert f", p99 {bound:,.1f} s (each wait so far" in warning
    assert bound > s["ttft_s"]["p99"]  # the percentile the table shows understates the tail
    assert f"WARNING:   - {warning}" in err.splitlines()
