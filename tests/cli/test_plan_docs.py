"""The documented `kvsim plan` commands (docs/capacity_planning.md) run verbatim and print
the chapter's corrected figures (E1, E2 corrected, E27, E28)."""

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
