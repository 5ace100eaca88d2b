"""A key twice in one JSON object is refused, naming the file, the row or line and the key,
in bounded time (``sim.yamlio.unique_keys``, ``json_value``, ``load_json``).

Before: ``json`` kept the last value silently, so a trace row ``{"input_length": 64, ...,
"input_length": 9000}`` ran as 9000, in every JSON the project reads from users (Mooncake,
turns, Claude Code sessions and vLLM request logs, allocation traces, a run folder's
``summary.json``, regression baselines, a kernel run's ``env.json``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim import yamlio
from sim.errors import ConfigError, KvsimError
from sim.memory.replay import load_trace
from sim.prefix.session_trace import load_sessions
from sim.regress.baseline import read_baseline
from sim.report.data import read_run_folder
from sim.workload.turns_file import read_turns
from sim.workload.vllm_requests import load_vllm_requests
from sim.yamlio import duplicate_key_line, json_value, load_json, unique_keys

ROOT = Path(__file__).resolve().parents[1]
MOONCAKE_OK = '{"timestamp": 0, "input_length": 64, "output_length": 1, "hash_ids": [1]}'
MOONCAKE_TWICE = '{"timestamp": 0, "input_length": 64, "output_length": 1, "hash_ids": [1], "input_length": 9000}'
TWICE = "duplicate key 'input_length' in a JSON object"


def test_a_row_names_its_location_and_the_key():
    with pytest.raises(ConfigError) as exc:
        json_value(MOONCAKE_TWICE, "t.jsonl:7")
    assert str(exc.value) == f"t.jsonl:7: {TWICE}"
    with pytest.raises(ConfigError) as exc:  # nested objects too, bytes too
        json_value(b'{"a": {"b": 1, "b": 2}}', "t.jsonl:1")
    assert str(exc.value) == "t.jsonl:1: duplicate key 'b' in a JSON object"
    assert json_value('{"a": {"b": 1}, "b": 2}', "x") == {"a": {"b": 1}, "b": 2}


@pytest.mark.parametrize(
    "text,line",
    [
        ('{\n "a": 1,\n "b": {"a": 2},\n "a": 3\n}', 4),  # the same key in another object is fine
        ('[\n {"k": 1},\n {"k": 2,\n\n  "k": 3}\n]', 5),  # the line of the second one
        ('{"x": [{"y": {"z": 1}}, {"y": {"z": 1,\n"z": 2}}]}', 2),
    ],
)
def test_a_whole_file_names_the_line_of_the_second_key(text, line):
    with pytest.raises(ConfigError) as exc:
        json_value(text, "f.json", lines=True)
    assert exc.value.location == f"f.json:{line}"
    assert duplicate_key_line(text) == line


def test_mooncake_rows_are_refused_by_the_run_and_by_trace_replay(run_cli, tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text(MOONCAKE_OK + "\n" + MOONCAKE_TWICE + "\n")
    code, out, err = run_cli(["trace-replay", str(trace), "--format", "mooncake"])
    assert (code, out, err) == (2, "", f"kvsim: error: {trace}:2: {TWICE}\n")


def test_turns_sessions_and_request_logs_name_the_line(tmp_path):
    turns = tmp_path / "turns.jsonl"
    row = {"instance_id": "a", "turn": 0, "prompt_tokens": 10, "completion_tokens": 2,
           "tool_s": 0.1, "tool": "ls", "tool_cat": "view"}  # fmt: skip
    turns.write_text(json.dumps(row) + "\n" + json.dumps(row)[:-1] + ', "turn": 1}\n')
    with pytest.raises(ConfigError) as exc:
        read_turns(turns)
    assert str(exc.value) == f"{turns}:2: duplicate key 'turn' in a JSON object"
    log = tmp_path / "requests.jsonl"
    log.write_text('{"input_toks": 3, "output_toks": 1, "queued_ts": 1.0, "queued_ts": 0.5}\n')
    with pytest.raises(ConfigError) as exc:
        load_vllm_requests(log)
    assert str(exc.value) == f"{log}:1: duplicate key 'queued_ts' in a JSON object"
    folder = tmp_path / "sessions"
    folder.mkdir()
    (folder / "s.json").write_text('{\n"session_id": "a",\n"session_id": "b"\n}')
    with pytest.raises(ConfigError) as exc:
        load_sessions(folder)
    assert str(exc.value) == f"{folder / 's.json'}:3: duplicate key 'session_id' in a JSON object"


def test_allocation_traces_summaries_and_baselines_name_the_line(tmp_path):
    trace = tmp_path / "t.json"
    trace.write_text('{"ops": [\n{"op": "allocate", "seq": 1, "tokens": 4},\n'
                     '{"op": "free", "seq": 1, "seq": 2}\n]}')  # fmt: skip
    with pytest.raises(ConfigError) as exc:
        load_trace(trace)
    assert str(exc.value) == f"{trace}:3: duplicate key 'seq' in a JSON object"
    trace.write_text('{"ops": [],\n"settings": {},\n"ops": []}')
    with pytest.raises(ConfigError) as exc:
        load_json(trace)
    assert str(exc.value) == f"{trace}:3: duplicate key 'ops' in a JSON object"
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text('{\n  "ttft_p50_s": 1.0,\n  "ttft_p50_s": 2.0\n}\n')
    with pytest.raises(KvsimError) as exc:
        read_run_folder(run)
    assert str(exc.value) == (f"{run / 'summary.json'}:3: cannot read: duplicate key "
                              "'ttft_p50_s' in a JSON object")  # fmt: skip
    (tmp_path / "case.json").write_text('{"case": "case",\n "metrics": {},\n "metrics": {}}')
    with pytest.raises(ConfigError) as exc:
        read_baseline(tmp_path, "case")
    assert str(exc.value) == f"{tmp_path / 'case.json'}:3: duplicate key 'metrics' in a JSON object"


def test_the_check_is_linear_in_the_file(monkeypatch):
    """A row of 200,000 keys with the twice-written one last, and a 2 MB file whose last
    object repeats a key: each member is looked at at most twice (the first decode, then
    the line search decoding the refused value once more), counted through the object
    hook, so the work is linear in the file whatever the machine's speed."""
    row = "{" + ", ".join(f'"k{i}": {i}' for i in range(200_000)) + ', "k0": 1}'
    doc = json.dumps([{"op": "free", "seq": i} for i in range(40_000)], indent=1)
    doc = doc[: doc.rindex("}")] + ', "seq": 3}\n]'
    seen = [0]

    def counting(pairs):
        seen[0] += len(pairs)
        return unique_keys(pairs)

    monkeypatch.setattr(yamlio, "unique_keys", counting)
    for text, lines, members in ((row, False, 200_001), (doc, True, 2 * 40_000 + 1)):
        seen[0] = 0
        with pytest.raises(ConfigError, match="duplicate key"):
            json_value(text, "f.json", lines=lines)
        assert members <= seen[0] <= 2 * members
