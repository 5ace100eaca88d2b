"""The documented `kvsim plan` commands (docs/capacity_planning.md) run verbatim and print
the chapter's corrected figures (E1, E2 corrected, E27, E28)."""

import json
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "capacity_planning.md"
BLOCK = re.compile(r'<!-- doc-command expect="([^"]+)" -->\s*```console\s*\n\$ (.+?)\n```', re.S)


def _doc_commands():
    found = BLOCK.findall(DOC.read_text())
    assert len(found) == 4, "docs/capacity_planning.md should document E1, E27, E28, E2"
    return found


@pytest.mark.parametrize("expect,command", _doc_commands())
def test_documented_plan_command(run_cli, expect, command):
    code, out, err = run_cli(command)
    assert code == 0, err
    rows = [line for line in out.splitlines() if re.match(r"^\W*\d[\d,]* +\W", line)]
    # the last column of each context row is the concurrency (shared when given)
    numbers = []
    for row in rows:
        cells = [c.strip() for c in re.split(r"[│|]", row) if c.strip()]
        numbers.append(cells[-2:] if ";" in expect else cells[-1:])
    if ";" in expect:
        want = [expect.split(";")]
    else:
        want = [[v] for v in expect.split(",")]
    assert numbers == want, out


@pytest.mark.parametrize("expect,command", _doc_commands())
def test_documented_commands_use_f34_utilization_1(run_cli, expect, command):
    """Each example gives a memory or reserve figure, so it keeps the chapter's F34 (u = 1)
    rather than kvsim plan's 0.9 default, and its pool is memory - weights - reserve."""
    assert "--reserve-" in command or "--gpu-mem-" in command
    code, out, _ = run_cli(command + " --json")
    assert code == 0
    data = json.loads(out)
    assert data["warnings"] == []  # a model whose window holds the planned contexts
    assert data["gpu_memory_utilization"] == 1.0
    pool = data["gpu_mem_bytes"] - data["weights_bytes_per_gpu"] - data["reserve_bytes_per_gpu"]
    assert data["kv_pool_bytes_per_gpu"] == pytest.approx(pool, rel=1e-12)
