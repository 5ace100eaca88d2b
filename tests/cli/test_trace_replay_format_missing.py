"""``kvsim trace-replay FILE`` without ``--format``: kvsim's one-line error naming the
flag and its choices (exit 2), not click's usage block (h111 finding 9)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "workloads/data/mooncake/synthetic_trace.jsonl"


def test_missing_format_is_one_line_naming_the_flag_and_choices(run_cli):
    code, out, err = run_cli(["trace-replay", str(TRACE)])
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "Usage" not in err
    assert err.startswith("kvsim: error: --format: missing")
    assert err.rstrip().endswith("valid: claude-code, mooncake")
