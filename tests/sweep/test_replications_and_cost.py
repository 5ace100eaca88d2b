"""``kvsim run --replications K`` and the cost figures of summary.json."""

from __future__ import annotations

import json

import pytest

from sim.run import run_scenario
from sim.sweep.stats import ci95, mean_summary


def test_run_replications_writes_seed_folders_and_a_mean_summary(run_cli, tiny, tmp_path):
    out = tmp_path / "reps"
    code, stdout, err = run_cli(["run", str(tiny), "--out", str(out), "--replications", "3"])
    assert code == 0, err
    assert sorted(p.name for p in (out / "replications").iterdir()) == ["seed-3", "seed-4", "seed-5"]
    runs = [json.loads((out / "replications" / f"seed-{s}" / "summary.json").read_text()) for s in (3, 4, 5)]
    assert [r["seed"] for r in runs] == [3, 4, 5]
    s = json.loads((out / "summary.json").read_text())
    assert s["replications"] == 3 and s["seeds"] == [3, 4, 5] and s["seed"] == 3
    p99 = [r["ttft_s"]["p99"] for r in runs]
    assert s["ttft_s"]["p99"] == pytest.approx(sum(p99) / 3)
    assert s["ci95"]["ttft_s.p99"] == pytest.approx(list(ci95(p99)))
    assert s["requests_completed"] == pytest.approx(sum(r["requests_completed"] for r in runs) / 3)
    assert s["scenario"] == "tiny_agents" and s["command"][-2:] == ["--replications", "3"]
    assert set(runs[0]) <= set(s)  # the single-run schema, plus the replication keys
    assert "ttft_s.p99" in stdout
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no leftovers
    code, _, err = run_cli(["run", str(tiny), "--out", str(out), "--replications", "2"])
    assert code == 2 and "not empty" in err  # refused as kvsim run refuses it


def test_mean_summary_keeps_text_and_means_numbers():
    merged, intervals = mean_summary(
        [{"a": 1, "b": {"c": 2.0, "d": None}, "n": "x", "w": ["u"]},
         {"a": 3, "b": {"c": 4.0, "d": 5.0}, "n": "y", "w": []}]
    )  # fmt: skip
    assert merged == {"a": 2.0, "b": {"c": 3.0, "d": 5.0}, "n": "x", "w": ["u"]}
    assert set(intervals) == {"a", "b.c"}  # b.d has one number: no interval


def test_cost_figures_from_the_profile_price(tiny):
    s = run_scenario(str(tiny)).summary
    assert s["usd_per_gpu_hour"] == 3.0 and "h100-sxm-80gb profile" in s["price_source"]
    total = 3.0 * 1 * s["sim_time_s"] / 3600
    assert s["usd_total"] == pytest.approx(total)
    assert s["usd_per_million_output_tokens"] == pytest.approx(total / s["output_tokens"] * 1e6)
    assert s["usd_per_trajectory"] == pytest.approx(total / s["trajectories_completed"])
    # a GB of HBM for a second: the GPU-second price over the GPU's (overridden) 18 GB
    assert s["paused_hbm_usd"] == pytest.approx(s["paused_hbm_gb_s"] * 3.0 / 3600 / 18.0)
    assert s["paused_hbm_usd"] > 0


def test_scenario_pricing_overrides_and_no_price_gives_nulls(tiny):
    s = run_scenario(str(tiny), **{"pricing.usd_per_gpu_hour": 7.5, "pricing.price_source": "mine"}).summary
    assert s["usd_per_gpu_hour"] == 7.5 and s["price_source"] == "mine"
    assert s["usd_total"] == pytest.approx(7.5 * s["sim_time_s"] / 3600)
    text = tiny.read_text().replace("memory_bytes: 18000000000}", "memory_bytes: 18000000000, usd_per_gpu_hour: null}")
    tiny.write_text(text)
    s = run_scenario(str(tiny)).summary
    assert s["usd_per_gpu_hour"] is None
    assert all(s[k] is None for k in ("usd_total", "usd_per_million_output_tokens", "usd_per_trajectory", "paused_hbm_usd"))
