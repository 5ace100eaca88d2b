"""h101 (user trial h99, finding 7): ``kvsim run --replications 3`` printed
"ttft_s.p99: 0.553 [-0.9056, 2.011]", a negative bound on a latency. The t-interval's
arithmetic stays (summary.json ``ci95``); the print names the interval and its n, and a
bound below 0 is printed as 0 beside the t-interval's own, with a closing line. Every
replication's warnings are kept (the first one's alone were)."""

from __future__ import annotations

from sim.sweep.replicate import replication_lines, replication_summary


def _summary(seed: int, ttft: float, warnings: list[str]) -> dict:
    lat = {"mean": 0.1, "p50": 0.1, "p99": 1.0}
    return {"scenario": "x", "seed": seed, "ttft_s": {"mean": 0.1, "p50": 0.1, "p99": ttft},
            "itl_s": lat, "e2e_s": lat, "queue_s": lat, "output_tokens_per_s": 100.0,
            "warnings": warnings}  # fmt: skip


def test_the_trial_interval_is_clipped_and_said():
    """TTFT p99 over seeds 7-9: 1.228, 0.164, 0.267 s. Mean 1.659 / 3 = 0.553; deviations
    0.675, -0.389, -0.286, squares summing to 0.688742, sd sqrt(0.688742 / 2) = 0.586832;
    half-width t(0.975, 2) x sd / sqrt(3) = 4.303 x 0.338808 = 1.457891: [-0.9049, 2.011].
    The other figures are equal over the seeds: a zero-width interval, nothing clipped."""
    s = replication_summary([_summary(7, 1.228, []), _summary(8, 0.164, ["w8"]),
                             _summary(9, 0.267, ["w9", "w8"])])  # fmt: skip
    lo, hi = s["ci95"]["ttft_s.p99"]
    assert round(lo, 4) == -0.9049 and round(hi, 3) == 2.011  # the arithmetic, kept
    assert s["warnings"] == ["seed 8: w8", "seed 9: w9", "seed 9: w8"]
    assert replication_lines(s) == [
        "x: 3 replications (seeds 7-9), means with Student's t 95% intervals of the mean "
        "(n=3, t(0.975, 2) = 4.303):",
        "  ttft_s.p99: 0.553 [0 (t: -0.9049), 2.011]",
        "  itl_s.p99: 1 [1, 1]",
        "  e2e_s.p99: 1 [1, 1]",
        "  queue_s.p99: 1 [1, 1]",
        "  output_tokens_per_s: 100 [100, 100]",
        "  clipped at 0 (a latency or a rate is never negative): the t-interval reached "
        "below 0 for ttft_s.p99; 3 seeds spread too widely for its normal approximation, "
        "more replications narrow it (summary.json's ci95 keeps the t-interval)",
    ]


def test_one_replication_says_no_interval():
    s = replication_summary([_summary(1, 0.5, [])])
    lines = replication_lines(s)
    assert lines[0] == "x: 1 replication (seed 1): no interval (--replications 2 or more):"
    assert lines[1] == "  ttft_s.p99: 0.5" and s["warnings"] == []
