"""Untrusted files that are not plain text files, or JSON that ``json`` itself refuses:
one-line errors in bounded time and memory, never a traceback, a hang or a read without
end (``sim.yamlio.read_bytes_bounded``, ``sim.yamlio.json_value``).

Before: ``kvsim validate /dev/zero`` read until memory ran out (a device's size is 0, so
the size check passed), and a JSON line nested
100,000 deep or with a 5,000-digit number raised ``RecursionError`` / ``ValueError``
tracebacks from the trace readers and from ``kvsim report``."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import pytest

from sim.errors import ConfigError
from sim.yamlio import json_value, read_bytes_bounded

ROOT = Path(__file__).resolve().parents[1]
DEVICE = Path("/dev/zero")
needs_device = pytest.mark.skipif(not DEVICE.exists(), reason="no /dev/zero here")
DEEP = "[" * 100_000 + "]" * 100_000
LONG_NUMBER = '{"timestamp": 0, "input_length": ' + "9" * 5_000 + ', "output_length": 1}'


@needs_device
def test_devices_and_folders_are_refused_before_they_are_read_and_pipes_are_bounded(tmp_path):
    link = tmp_path / "link.yaml"
    link.symlink_to(DEVICE)
    for path, what in ((DEVICE, "a device or socket"), (link, "a device or socket"),
                       (tmp_path, "a folder")):  # fmt: skip
        with pytest.raises(ConfigError) as exc:
            read_bytes_bounded(path)
        assert str(exc.value) == f"{path}: not a regular file ({what})"
    fifo = tmp_path / "fifo.yaml"  # a pipe (``<(...)``, ``/dev/stdin``) is read, bounded
    os.mkfifo(fifo)
    for data, limit in ((b"a: 1\n", 100), (b"x" * 5000, 100)):
        writer = threading.Thread(target=lambda d=data: _write_fifo(fifo, d))
        writer.start()
        try:
            got = read_bytes_bounded(fifo, limit)
            assert got == data
        except ConfigError as exc:
            assert len(data) > limit
            assert str(exc) == f"{fifo}: file is over the limit of 100 bytes"
        writer.join(timeout=10)
        assert not writer.is_alive()
    big = tmp_path / "big.yaml"
    big.write_bytes(b"a" * 101)
    with pytest.raises(ConfigError, match=r"big\.yaml: file is 101 bytes; the limit is 100$"):
        read_bytes_bounded(big, 100)
    assert read_bytes_bounded(big, 101) == b"a" * 101


def _write_fifo(path: Path, data: bytes) -> None:
    try:
        with path.open("wb") as fh:
            fh.write(data)
    except BrokenPipeError:  # the reader stopped at its limit
        pass


@needs_device
@pytest.mark.parametrize("command", ["validate", "run"])
def test_the_cli_refuses_a_device_as_the_scenario(run_cli, tmp_path, command):
    link = tmp_path / "s.yaml"
    link.symlink_to(DEVICE)
    for path in (DEVICE, link):
        argv = [command, str(path)] + (["--out", str(tmp_path / "o")] if command == "run" else [])
        code, out, err = run_cli(argv)
        assert code == 2 and out == ""
        assert err.strip().splitlines() == [f"kvsim: error: {path}: not a regular file "
                                            "(a device or socket)"]  # fmt: skip
    assert not (tmp_path / "o").exists()


def test_json_that_json_refuses_is_one_line_at_its_location():
    with pytest.raises(ConfigError) as exc:
        json_value(DEEP, "t.jsonl:2")
    assert str(exc.value) == "t.jsonl:2: not valid JSON (nested too deeply)"
    with pytest.raises(ConfigError) as exc:
        json_value(LONG_NUMBER, "t.jsonl:3")
    assert str(exc.value) == ("t.jsonl:3: not valid JSON (Exceeds the limit (4300 digits) for "
                              "integer string conversion: value has 5000 digits)")  # fmt: skip
    with pytest.raises(ConfigError) as exc:
        json_value("[", "t.jsonl:4")
    assert str(exc.value) == "t.jsonl:4: not valid JSON (Expecting value, column 2)"
    assert json_value(b'{"a": [1, 2.5]}', "x") == {"a": [1, 2.5]}


@pytest.mark.parametrize("line", [DEEP, LONG_NUMBER], ids=["deep", "long_number"])
def test_trace_replay_names_the_line_json_refuses(run_cli, tmp_path, line):
    trace = tmp_path / "t.jsonl"
    ok = json.dumps({"timestamp": 0, "input_length": 64, "output_length": 1, "hash_ids": [1]})
    trace.write_text(ok + "\n" + line + "\n")
    code, out, err = run_cli(["trace-replay", str(trace), "--format", "mooncake"])
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"kvsim: error: {trace}:2: not valid JSON (")


@needs_device
def test_trace_replay_and_report_refuse_a_device(run_cli, tmp_path):
    code, _, err = run_cli(["trace-replay", str(DEVICE), "--format", "mooncake"])
    assert code == 2
    assert err == f"kvsim: error: {DEVICE}: cannot read trace: not a regular file or pipe\n"
    run = tmp_path / "run"
    scenario = ROOT / "workloads" / "seed_chunked_prefill.yaml"
    assert run_cli(["run", str(scenario), "--out", str(run), "--quiet", "--no-report"])[0] == 0
    (run / "summary.json").unlink()
    (run / "summary.json").symlink_to(DEVICE)
    code, out, err = run_cli(["report", str(run)])  # (it read until memory ran out)
    assert (code, err) == (2, f"kvsim: error: {run}: not a run folder (no summary.json)\n")
    shutil.rmtree(run)


def test_a_model_of_a_billion_layers_is_refused_not_built(run_cli):
    """Per-layer lists are built from ``num_layers``: a billion ran out of memory after
    ~45 s; it is bounded (``MAX_LAYERS``), named with the bound."""
    scenario = str(ROOT / "workloads" / "agent_swarm.yaml")
    model = "model={profile: llama-3.1-8b, overrides: {num_layers: %d}}"
    code, out, err = run_cli(["validate", scenario, "--set", model % 1_000_000_000])
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "num_layers: Input should be less than or equal to 10000" in err
    assert run_cli(["validate", scenario, "--set", model % 10_000])[0] == 0
