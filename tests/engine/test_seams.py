"""The seams hold in the code: the KV manager is the only door to memory, and the pause
lifecycle the only caller of its pause verbs (a scan of the source; the layer order of
imports is tests/test_layers.py's)."""

from __future__ import annotations

import re
from pathlib import Path

SIM = Path(__file__).resolve().parents[2] / "sim"


def _sources(skip: tuple[str, ...]):
    for path in sorted(SIM.rglob("*.py")):
        rel = path.relative_to(SIM).as_posix()
        if not rel.startswith(skip):
            yield rel, path.read_text()


def test_nothing_above_memory_reaches_past_the_kv_manager():
    door = re.compile(r"\bkv\.(alloc|ledger|paused|_\w+)\b")
    found = [
        f"{rel}:{n}: {line.strip()}"
        for rel, text in _sources(("memory/", "prefix/"))
        for n, line in enumerate(text.splitlines(), 1)
        if door.search(line)
    ]
    assert found == []


def test_only_the_pause_lifecycle_calls_the_pause_verbs():
    verbs = re.compile(r"\bkv\.(hold|drop|resume|restore|restored)\(")
    found = [
        f"{rel}:{n}"
        for rel, text in _sources(("memory/", "engine/pauses/"))
        for n, line in enumerate(text.splitlines(), 1)
        if verbs.search(line)
    ]
    assert found == []



def test_no_probes_for_optional_abilities():
    """Optional abilities are declared on the base classes with defaults, never probed."""
    probe = re.compile(r"\b(hasattr|getattr)\(")
    files = ["memory/kv_manager.py", "memory/deferred.py", "engine/node.py", "sched/vllm_v1.py"]
    files += [p.relative_to(SIM).as_posix() for p in (SIM / "engine" / "pauses").glob("*.py")]
    found = [
        f"{rel}:{n}"
        for rel in files
        for n, line in enumerate((SIM / rel).read_text().splitlines(), 1)
        if probe.search(line)
    ]
    assert found == []
