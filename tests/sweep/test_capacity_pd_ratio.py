"""``kvsim capacity --search pd_ratio`` (sim/sweep/pd_ratio.py): every prefill:decode
split of a disaggregated cluster's instances and aggregated serving of the same GPUs, each
judged against the SLOs at the scenario's own load.

Twelve 4,000-token prompts 50 ms apart on three 8B instances: one prefill instance
cannot keep up (each prompt waits for the ones before it: TTFT p99 ~0.8 s), two can
(~0.24 s), and aggregated serving (every instance prefills its own) is fastest (~0.13 s);
with a 0.5 s SLO the answer is 2 prefill + 1 decode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.errors import KvsimError
from sim.run import run_scenario
from sim.sweep.pd_ratio import AGGREGATED, configurations, find_pd_ratio, text_lines
from sim.sweep.slo import parse_slo

PDR = {
    "name": "pdr",
    "seed": 0,
    "model": "llama-3.1-8b",
    "hardware": {"accelerator": "h100-sxm-80gb", "kv_pool_bytes_per_gpu": 8e9},
    "allocator": {"kind": "radix"},
    "workload": {"kind": "requests", "requests": [
        {"count": 12, "at_s": 0.0, "interval_s": 0.05, "prompt_tokens": 4000, "output_tokens": 20}]},
    "cluster": {"nodes": [{"count": 1, "role": "prefill"}, {"count": 2, "role": "decode"}]},
}  # fmt: skip


@pytest.fixture(scope="module")
def answer():
    return find_pd_ratio(PDR, [parse_slo("ttft_p99_s=0.5")])


def test_every_split_and_aggregated_are_tried(answer):
    assert [r["name"] for r in answer.rows] == ["1P+2D", "2P+1D", AGGREGATED]
    assert [(r["prefill"], r["decode"], r["gpus"]) for r in answer.rows] == [
        (1, 2, 3), (2, 1, 3), (0, 0, 3)]  # fmt: skip
    assert answer.instances == 3 and answer.gpus_per_instance == [1, 1]
    for r in answer.rows:
        assert len(r["probes"]) == 1 and r["probes"][0]["seed"] == 0


def test_the_answer_is_the_passing_split(answer):
    one, two, agg = answer.rows
    assert not one["passed"] and two["passed"] and agg["passed"]
    assert one["slo_values"]["ttft_p99_s"] > 0.5 >= two["slo_values"]["ttft_p99_s"]
    assert answer.best is two and answer.aggregated is agg
    assert agg["slo_values"]["ttft_p99_s"] < two["slo_values"]["ttft_p99_s"]
    text = "\n".join(text_lines(answer))
    assert "answer: 2 prefill + 1 decode instances (2 + 1 GPUs); aggregated on 3 GPUs meets" in text
    json.dumps(answer.to_dict(), default=str)


def test_the_split_runs_are_the_plain_runs(answer):
    """A row's value is the run of that split (same seed) judged in the window."""
    res = run_scenario(PDR, **{"cluster.nodes.0.count": 2, "cluster.nodes.1.count": 1})
    assert res.summary["remote_prefills"] == 12
    assert answer.rows[1]["probes"][0]["slo_values_whole_run"]["ttft_p99_s"] == res.summary["ttft_s"]["p99"]


def test_aggregated_takes_the_decode_group_sections():
    dec = {"hardware": {"accelerator": "h200-141gb"}}
    cfg = dict((name, over) for name, _, over in configurations(4, dec))
    assert list(cfg) == ["1P+3D", "2P+2D", "3P+1D", AGGREGATED]
    assert cfg[AGGREGATED]["cluster.nodes"] == [{"count": 4, "hardware": {"accelerator": "h200-141gb"}}]
    assert cfg[AGGREGATED]["cluster.transfer"] is None


def test_a_scenario_without_roles_is_one_line():
    plain = {**PDR, "cluster": {"nodes": [{"count": 3}]}}
    with pytest.raises(KvsimError, match="two node groups, role: prefill then role: decode"):
        find_pd_ratio(plain, [parse_slo("ttft_p99_s=0.5")])
    with pytest.raises(KvsimError, match="at least one --slo"):
        find_pd_ratio(PDR, [])


def test_bad_options_are_refused_before_any_run(run_cli, tmp_path):
    slo = [parse_slo("ttft_p99_s=0.5")]
    with pytest.raises(KvsimError, match=r"--warmup-fraction must be in \[0, 1\), got 1.0"):
        find_pd_ratio(PDR, slo, warmup_fraction=1.0)
    with pytest.raises(KvsimError, match=r"--replications must be in \[1, 1000\], got 0"):
        find_pd_ratio(PDR, slo, replications=0)
    out = tmp_path / "cap"
    scenario = str(Path(__file__).resolve().parents[2] / "workloads" / "pd_coding_agents.yaml")
    code, _, err = run_cli(["capacity", scenario, "--search", "pd_ratio",
                            "--slo", "ttft_p99_s=0.5", "--out", str(out)])  # fmt: skip
    assert code == 2 and "--search pd_ratio takes no --out" in err, err
    assert len(err.strip().splitlines()) == 1 and not out.exists()
