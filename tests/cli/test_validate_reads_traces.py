"""``kvsim validate`` reads the trace files a workload names with the run's readers and
bounds (``sim.workload.trace_files``), and refuses a KV pool of less than one block
(``sim.scenario.resolve``), with the one line ``kvsim run`` gives.

Before: validate only checked that a trace file existed, so a CSV row with ``-5`` tokens
or a Mooncake row that ``kvsim run`` refuses said ok; and a pool of 1,000 bytes (0 tokens)
said ``ok ... (0 tokens)`` while the run rejected every request."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
E20 = ROOT / "workloads" / "seed_chunked_prefill.yaml"
AZURE = ROOT / "workloads" / "data" / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
MOONCAKE = ROOT / "workloads" / "data" / "mooncake" / "synthetic_trace.jsonl"
SMALL = ["--set", "duration_s=5", "--quiet", "--no-report"]


def _scenario(tmp_path: Path) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(E20.read_text())
    return path


def _validate_and_run(run_cli, tmp_path, workload: str) -> tuple[str, str]:
    """The stderr of ``kvsim validate`` and of ``kvsim run`` of E20 with ``workload``."""
    scenario = _scenario(tmp_path)
    code, out, validate_err = run_cli(["validate", str(scenario), "--set", workload])
    assert (code, out) == (2, "")
    code, _, run_err = run_cli(["run", str(scenario), "--out", str(tmp_path / "o"),
                                "--set", workload, *SMALL])  # fmt: skip
    assert code == 2 and not (tmp_path / "o").exists()
    return validate_err, run_err


def test_a_bad_csv_row_is_the_run_s_error(run_cli, tmp_path):
    rows = AZURE.read_text().splitlines()[:40]
    rows.insert(3, "2023-11-16 18:15:50.0,-5,3")
    (tmp_path / "bad.csv").write_text("\n".join(rows) + "\n")
    workload = ("workload={kind: chat, num_requests: 5, arrival: {kind: poisson, rate_per_s: 1},"
                " lengths: {kind: trace, path: bad.csv}}")  # fmt: skip
    validate_err, run_err = _validate_and_run(run_cli, tmp_path, workload)
    want = (f"kvsim: error: {tmp_path / 'bad.csv'}: data row 3: ContextTokens: expected a whole "
            "number of tokens in [1, 10,000,000], got -5\n")  # fmt: skip
    assert validate_err == run_err == want


def test_an_arrival_trace_out_of_time_order_is_the_run_s_error(run_cli, tmp_path):
    (tmp_path / "t.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n0,10,2\n5,10,2\n1,10,2\n")
    workload = ("workload={kind: chat, num_requests: 3, arrival: {kind: trace}, "
                "lengths: {kind: trace, path: t.csv}}")  # fmt: skip
    validate_err, run_err = _validate_and_run(run_cli, tmp_path, workload)
    assert validate_err == run_err == (f"kvsim: error: {tmp_path / 't.csv'}: column "
                                       "'TIMESTAMP' is not in time order\n")  # fmt: skip


@pytest.mark.parametrize(
    "row,message",
    [
        ({"timestamp": 9, "input_length": -64, "output_length": 1, "hash_ids": [1]},
         "input_length: must be a whole number >= 1, got -64"),
        ('{"timestamp": 9, "input_length": 64, "output_length": 1, "hash_ids": [1], '
         '"input_length": 9000}', "duplicate key 'input_length' in a JSON object"),
    ],
)  # fmt: skip
def test_a_bad_mooncake_row_is_the_run_s_error(run_cli, tmp_path, row, message):
    lines = MOONCAKE.read_text().splitlines()[:3]
    lines.append(row if isinstance(row, str) else json.dumps(row))
    (tmp_path / "m.jsonl").write_text("\n".join(lines) + "\n")
    validate_err, run_err = _validate_and_run(run_cli, tmp_path, "workload={kind: mooncake, path: m.jsonl}")
    assert validate_err == run_err == f"kvsim: error: {tmp_path / 'm.jsonl'}:4: {message}\n"


def test_replayed_rows_the_trace_lacks_are_refused_by_validate(run_cli, tmp_path):
    (tmp_path / "m.jsonl").write_text("\n".join(MOONCAKE.read_text().splitlines()[:3]) + "\n")
    validate_err, run_err = _validate_and_run(
        run_cli, tmp_path, "workload={kind: mooncake, path: m.jsonl, num_requests: 4}"
    )
    assert validate_err == run_err
    assert validate_err.endswith("workload.num_requests: num_requests 4 is more than the 3 "
                                 "requests from row 0 (a replay is not repeated: its hash ids "
                                 "would all hit)\n")  # fmt: skip


def test_turns_and_request_logs_and_mix_components_are_read(run_cli, tmp_path):
    (tmp_path / "turns.jsonl").write_text('{"instance_id": "a", "turn": 0, "prompt_tokens": 0}\n')
    (tmp_path / "requests.jsonl").write_text('{"input_toks": 3, "output_toks": 1}\n')
    cases = [
        ("workload={kind: agent_trace, path: turns.jsonl, num_trajectories: 1, "
         "arrival: {kind: closed_loop, concurrency: 1}}", f"{tmp_path / 'turns.jsonl'}:1: "),
        ("workload={kind: vllm_requests, path: requests.jsonl}", f"{tmp_path / 'requests.jsonl'}:1: "),
        ("workload={kind: mix, components: [{kind: requests, requests: [{count: 1, "
         "prompt_tokens: 8, output_tokens: 2}]}, {kind: vllm_requests, path: requests.jsonl}]}",
         f"{tmp_path / 'requests.jsonl'}:1: "),
    ]  # fmt: skip
    for workload, where in cases:
        validate_err, run_err = _validate_and_run(run_cli, tmp_path, workload)
        assert validate_err == run_err and validate_err.startswith(f"kvsim: error: {where}")
        assert len(validate_err.splitlines()) == 1


@pytest.mark.parametrize(
    "pool,message",
    [
        (1000, "the KV pool holds 0.00305 tokens (1000 B per GPU at 3.277e+05 B per token per "
               "GPU), less than one block of 16 tokens"),
        (15 * 327680, "the KV pool holds 15 tokens (4.915e+06 B per GPU at 3.277e+05 B per "
                      "token per GPU), less than one block of 16 tokens"),
    ],
)  # fmt: skip
def test_a_pool_below_one_block_is_refused_by_validate_and_run(run_cli, tmp_path, pool, message):
    item = f"hardware.kv_pool_bytes_per_gpu={pool}"
    code, out, err = run_cli(["validate", str(E20), "--set", item])
    want = (f"kvsim: error: --set hardware.kv_pool_bytes_per_gpu: hardware.kv_pool_bytes_per_gpu"
            f": {message}: no request could be admitted (raise kv_pool_bytes_per_gpu, "
            "gpu_memory_utilization or tp)\n")  # fmt: skip
    assert (code, out, err) == (2, "", want)
    code, _, run_err = run_cli(["run", str(E20), "--out", str(tmp_path / "o"), "--set", item, *SMALL])
    assert (code, run_err) == (2, want)
    code, out, _ = run_cli(["validate", str(E20), "--set", f"hardware.kv_pool_bytes_per_gpu={16 * 327680}"])
    assert code == 0 and "(16 tokens)" in out


# ------------------------------------------------ fitted parameters and sweep points
FITTED = ROOT / "sim" / "workload" / "fitted"


def _bad_fit(tmp_path: Path, kind: str) -> Path:
    """The shipped fit of ``kind`` with its ``kind`` key written twice (lines 4 and 5)."""
    text = (FITTED / f"{kind}.yaml").read_text()
    assert text.splitlines()[3] == f"kind: {kind}"
    path = tmp_path / "fit.yaml"
    path.write_text(text.replace(f"kind: {kind}\n", f"kind: {kind}\nkind: {kind}\n", 1))
    return path


@pytest.mark.parametrize("kind", ["coding_agent", "function_calling", "human_in_loop",
                                  "multi_agent_team", "interactive_coding_agent"])  # fmt: skip
def test_a_bad_fitted_params_file_is_the_run_s_error(run_cli, tmp_path, kind):
    """Before: validate checked only that ``params.path`` existed and said ok; the run then
    refused the file."""
    fit = _bad_fit(tmp_path, kind)
    workload = (f"workload={{kind: {kind}, num_trajectories: 1, arrival: {{kind: closed_loop, "
                "concurrency: 1}, params: {path: fit.yaml}}")  # fmt: skip
    validate_err, run_err = _validate_and_run(run_cli, tmp_path, workload)
    assert validate_err == run_err == (f"kvsim: error: {fit}:5: kind: duplicate key 'kind' "
                                       "(first on line 4, again on line 5)\n")  # fmt: skip


def test_a_bad_value_in_a_mix_component_s_fit_is_the_run_s_error(run_cli, tmp_path):
    text = (FITTED / "coding_agent.yaml").read_text()
    (tmp_path / "fit.yaml").write_text(text.replace("system_prompt_tokens: 320", "system_prompt_tokens: -5"))
    workload = ("workload={kind: mix, components: [{kind: requests, requests: [{count: 1, "
                "prompt_tokens: 8, output_tokens: 2}]}, {kind: coding_agent, num_trajectories: 1, "
                "arrival: {kind: closed_loop, concurrency: 1}, params: {path: fit.yaml}}]}")  # fmt: skip
    validate_err, run_err = _validate_and_run(run_cli, tmp_path, workload)
    line = text[: text.index("system_prompt_tokens:")].count("\n") + 1
    assert validate_err == run_err == (f"kvsim: error: {tmp_path / 'fit.yaml'}:{line}: "
                                       "system_prompt_tokens: Input should be greater than or "
                                       "equal to 0\n")  # fmt: skip


def test_the_fitted_kinds_are_the_params_models():
    from sim.workload.params import PARAMS_MODELS
    from sim.workload.trace_files import _FITTED_KINDS

    assert set(_FITTED_KINDS) == set(PARAMS_MODELS)


def _sweep(tmp_path: Path, point: str) -> Path:
    (tmp_path / "base.yaml").write_text(E20.read_text())
    path = tmp_path / "sweep.yaml"
    path.write_text(f"schema_version: 1\nname: s\nsweep:\n  base: base.yaml\n  points:\n    - {point}\n")
    return path


def test_a_sweep_point_s_trace_and_fit_are_read(run_cli, tmp_path):
    """Before: ``kvsim validate SWEEP`` checked each point's files exist and said ok; the
    point's run then refused the trace's row (or the fit)."""
    rows = AZURE.read_text().splitlines()[:10]
    rows.insert(3, "2023-11-16 18:15:50.0,-5,3")
    (tmp_path / "bad.csv").write_text("\n".join(rows) + "\n")
    sweep = _sweep(tmp_path, "{workload: {kind: chat, num_requests: 5, arrival: {kind: poisson, "
                             "rate_per_s: 1}, lengths: {kind: trace, path: bad.csv}}}")  # fmt: skip
    code, out, err = run_cli(["validate", str(sweep)])
    assert (code, out) == (2, "")
    assert err == (f"kvsim: error: {sweep}:3: sweep: point 0 (workload={{\"kind\": \"chat\", "
                   "\"num_requests\": 5, \"arrival\": {\"kind\": \"poisson\", \"rate_per_s\": 1}, "
                   "\"lengths\": {\"kind\": \"trace\", \"path\": \"bad.csv\"}}): "
                   f"{tmp_path / 'bad.csv'}: data row 3: ContextTokens: expected a whole number "
                   "of tokens in [1, 10,000,000], got -5\n")  # fmt: skip
    fit = _bad_fit(tmp_path, "coding_agent")
    sweep = _sweep(tmp_path, "{workload: {kind: coding_agent, num_trajectories: 1, arrival: "
                             "{kind: closed_loop, concurrency: 1}, params: {path: fit.yaml}}}")  # fmt: skip
    code, out, err = run_cli(["validate", str(sweep)])
    assert (code, out) == (2, "")
    assert err.startswith(f"kvsim: error: {sweep}:3: sweep: point 0 (workload=")
    assert err.endswith(f"): {fit}:5: kind: duplicate key 'kind' (first on line 4, again on "
                        "line 5)\n")  # fmt: skip


def test_a_sweep_reads_each_distinct_workload_s_files_once(run_cli, tmp_path, monkeypatch):
    """Points that leave the workload as the base's read nothing again (a grid of N points
    over one trace reads it once, not N times)."""
    import sim.workload.trace_files as trace_files

    (tmp_path / "base.yaml").write_text(E20.read_text())
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("schema_version: 1\nname: s\nsweep:\n  base: base.yaml\n  grid:\n"
                     "    seed: [1, 2, 3]\n    workload.requests.1.count: [1, 2]\n")  # fmt: skip
    read = []
    real = trace_files.read_traces
    monkeypatch.setattr(trace_files, "read_traces", lambda cfg, *a: (read.append(cfg), real(cfg, *a)))
    code, out, err = run_cli(["validate", str(sweep)])
    assert code == 0, err
    # the base (count 1), then count 2 once: 2 reads for 1 + 6 scenarios
    assert [cfg.requests[1].count for cfg in read] == [1, 2]


def test_a_trace_a_point_names_by_its_key_is_located_at_that_key(run_cli, tmp_path):
    """A file refused when read (after the overrides applied) is located at the line of
    the point's key whose value names it, not at ``sweep:`` (before: ``sweep.yaml:3:
    sweep: point 1 ...``)."""
    rows = AZURE.read_text().splitlines()[:10]
    (tmp_path / "good.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
    (tmp_path / "base.yaml").write_text(E20.read_text())
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        "schema_version: 1\nname: s\nsweep:\n  base: base.yaml\n  points:\n"
        "    - {workload: {kind: chat, num_requests: 5, arrival: {kind: poisson, rate_per_s: 1},"
        " lengths: {kind: trace, path: good.csv}}}\n"
        "    - {workload: {kind: chat, num_requests: 5, arrival: {kind: poisson, rate_per_s: 1},"
        " lengths: {kind: trace, path: good.csv}}, workload.lengths.path: bad.csv}\n"
    )
    code, out, err = run_cli(["validate", str(sweep)])
    assert (code, out) == (2, "")
    assert err.startswith(f"kvsim: error: {sweep}:7: sweep.points.1.workload.lengths.path: point 1 (")
    assert err.endswith(f"): {tmp_path / 'bad.csv'}: trace has no column 'ContextTokens'\n")
