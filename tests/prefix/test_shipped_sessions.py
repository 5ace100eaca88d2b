"""The shipped Claude Code sessions: all 487 beside the 32-session sample, licence beside.

The counts are the source's (../shared/data/claude_code_traces/README.md); a truncated or
re-encoded copy changes them.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[2] / "workloads" / "data" / "claude_code"


def _calls(requests) -> int:
    return sum(_calls(r["requests"]) if r.get("type") == "subagent" else 1 for r in requests)


def test_all_487_sessions_ship_with_their_licence():
    path = DATA / "sessions_all.jsonl.gz"
    assert path.stat().st_size == 715_992
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        sessions = [json.loads(line) for line in fh if line.strip()]
    assert len(sessions) == 487 and len({s["id"] for s in sessions}) == 487
    assert sum(_calls(s["requests"]) for s in sessions) == 33_445
    assert "Apache License" in (DATA / "LICENSE").read_text(encoding="utf-8")
    assert "sessions_all.jsonl.gz" in (DATA / "README.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_all_487_sessions_validate():
    from sim.prefix.session_trace import load_sessions

    sessions = load_sessions(DATA / "sessions_all.jsonl.gz")
    assert sum(1 for s in sessions for _ in s.calls()) == 33_445
