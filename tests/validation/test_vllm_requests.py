"""``workload.kind: vllm_requests``: a vLLM request log replayed with its arrivals and lengths."""

from __future__ import annotations

import json

import pytest

from sim.errors import ConfigError
from sim.run.runner import run_scenario
from sim.workload.vllm_requests import load_vllm_requests, read_vllm_log

ROWS = [
    {"request_id": "a", "input_toks": 100, "output_toks": 5, "queued_ts": 1000.25},
    {"request_id": "b", "input_toks": 40, "output_toks": 1, "queued_ts": 1000.75},
    {"request_id": "c", "input_toks": 300, "output_toks": 3, "queued_ts": 1002.25, "arrival_time": 5.0},
]


def write_log(tmp_path, rows, name="requests.jsonl") -> str:
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def scenario(log: str, **workload) -> dict:
    """A small engine whose steps cost exactly 10 ms (a fixed overhead, nothing else)."""
    return {
        "model": "llama-3.1-8b",
        "hardware": {"accelerator": "rtx-4090-24gb", "kv_pool_bytes_per_gpu": 1e9},
        "cost": {"weights": False, "kv_read": False, "gemm_flops": False, "attention_flops": False,
                 "step_overhead_s": 0.01},
        "workload": {"kind": "vllm_requests", "path": log, **workload},
    }  # fmt: skip


def test_replays_arrivals_from_the_first_queued_ts_and_exact_lengths(tmp_path):
    r = run_scenario(scenario(write_log(tmp_path, ROWS)))
    q = r.requests.sort_values("traj_id")
    assert q["arrival_s"].tolist() == [0.0, 0.5, 2.0]
    assert q["prompt_tokens"].tolist() == [100, 40, 300]
    assert q["output_tokens"].tolist() == [5, 1, 3] and (q["status"] == "finished").all()
    # request a alone: its prefill step, then 4 decode steps of 10 ms each
    assert q["ttft_s"].iloc[0] == pytest.approx(0.01) and q["e2e_s"].iloc[0] == pytest.approx(0.05)
    assert q["hit_tokens"].sum() == 0  # no content shared between requests


def test_num_requests_and_time_scale(tmp_path):
    log = write_log(tmp_path, ROWS)
    r = run_scenario(scenario(log, num_requests=2, time_scale=0.5))
    assert sorted(r.requests["arrival_s"]) == [0.0, 0.25]
    with pytest.raises(ConfigError, match="num_requests 4 is more than the log's 3 rows"):
        run_scenario(scenario(log, num_requests=4))


@pytest.mark.parametrize(
    "bad,message",
    [
        ("{not json", ":2: not valid JSON ("),
        ({"input_toks": 10, "output_toks": 2}, ":2: queued_ts: queued_ts must be a finite number"),
        ({"input_toks": 1.5, "output_toks": 2, "queued_ts": 1001.0}, ":2: input_toks: input_toks must be a whole"),
        ({"input_toks": 0, "output_toks": 2, "queued_ts": 1001.0}, ":2: input_toks: input_toks must be in [1,"),
        ({"input_toks": 10, "output_toks": True, "queued_ts": 1001.0}, "output_toks must be a whole"),
        ({"input_toks": 10, "output_toks": 2, "queued_ts": 1001.0, "first_token_ts": 1000.5},
         ":2: first_token_ts: impossible row: a negative TTFT"),
        ({"input_toks": 10, "output_toks": 2, "queued_ts": 1001.0, "first_token_ts": 1002.0,
          "last_token_ts": 1001.5}, ":2: last_token_ts: impossible row: first token after the last token"),
        ({"input_toks": 10, "output_toks": 2, "queued_ts": 1001.0, "scheduled_ts": 1000.0},
         ":2: scheduled_ts: impossible row: scheduled before it was queued"),
        ({"input_toks": 10, "output_toks": 2, "queued_ts": 1001.0, "scheduled_ts": 1001.5,
          "first_token_ts": 1001.2}, ":2: first_token_ts: impossible row: first token before it was scheduled"),
        ({"input_toks": 10, "output_toks": 2, "queued_ts": 1001.0, "last_token_ts": 1000.0},
         ":2: last_token_ts: impossible row: last token before it was queued"),
        ([1, 2], ":2: each line must be a JSON object"),
    ],
)
def test_bad_rows_are_one_line_errors_naming_file_line_and_field(tmp_path, bad, message):
    log = write_log(tmp_path, [ROWS[0], bad])
    with pytest.raises(ConfigError) as exc:
        load_vllm_requests(log)
    text = str(exc.value)
    assert "\n" not in text and "requests.jsonl" in text and message in text


def test_rows_of_several_engine_cores_are_sorted_and_counted(tmp_path):
    """Two engine cores flush in turn: rows out of queued_ts order are sorted (stable)."""
    c, a, b = ROWS[2], ROWS[0], ROWS[1]
    same = {**ROWS[1], "request_id": "b2"}  # the same queued_ts as b, later in the file
    log = write_log(tmp_path, [b, c, a, same])
    rows, out_of_order = read_vllm_log(log)
    assert [r.request_id for r in rows] == ["a", "b", "b2", "c"]
    assert out_of_order == 2  # a (earlier than b and c) and b2 (earlier than c)
    assert load_vllm_requests(log) == rows
    assert read_vllm_log(write_log(tmp_path, ROWS, "ordered.jsonl"))[1] == 0
    r = run_scenario(scenario(log))  # the replay reads them in the same order
    assert sorted(r.requests["arrival_s"]) == [0.0, 0.5, 0.5, 2.0]


def test_missing_empty_and_non_utf8_logs(tmp_path):
    with pytest.raises(ConfigError, match="request log not found"):
        load_vllm_requests(tmp_path / "nope.jsonl")
    with pytest.raises(ConfigError, match="no rows"):
        load_vllm_requests(write_log(tmp_path, []))
    p = tmp_path / "bin.jsonl"
    p.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_vllm_requests(p)


def test_a_missing_log_is_reported_with_the_scenario_line(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        run_scenario(scenario(str(tmp_path / "absent.jsonl")))


def test_shipped_logs_load():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "workloads/data/llmservingsim_perf/vllm_runs"
    for run in ("RTX4090/Llama-3.1-8B", "RTXPRO6000/Qwen3-32B"):
        rows = load_vllm_requests(root / run / "vllm/requests.jsonl")
        assert len(rows) == 300 and all(r.last_token_ts is not None for r in rows)
    assert (root.parent / "LICENSE").read_text().startswith("MIT License")
