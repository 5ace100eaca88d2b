"""The research notebooks (notebooks/*.ipynb) are stored executed and reproduce themselves.

Each test re-executes one notebook at its CI-sized defaults (nbclient, kernel ``python3``)
and checks that the ``KEY_NUMBERS {json}`` line it prints matches the stored outputs. The
runs are seeded and deterministic, so the tolerance is tight: relative 1e-6 (absolute
1e-9 near zero; the printed values are rounded to 6 decimals). A notebook whose numbers
move on purpose is rebuilt with ``python notebooks/build.py NN``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
NAMES = [
    "01_allocators",
    "02_pause_policies",
    "03_capacity_planning",
    "04_harness_prefix_reuse",
    "05_calibration",
    "06_agent_hints_and_bounds",
]
REL_TOL = 1e-6
ABS_TOL = 1e-9
MAX_BYTES = 1_000_000
HANG_S = 3600  # per cell


def _stream_text(nb) -> str:
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if out.get("output_type") == "stream":
                parts.append(out.get("text", ""))
    return "".join(parts)


def key_numbers(nb) -> dict[str, float]:
    lines = [ln for ln in _stream_text(nb).splitlines() if ln.startswith("KEY_NUMBERS ")]
    assert len(lines) == 1, f"expected one KEY_NUMBERS line, got {len(lines)}"
    return json.loads(lines[0].removeprefix("KEY_NUMBERS "))


def _close(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)


def test_all_notebooks_listed_and_percent_format_gone():
    assert sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb")) == NAMES
    assert not (NOTEBOOKS / "allocator_comparison.py").exists()


@pytest.mark.parametrize("name", NAMES)
def test_stored_notebook_reads_without_running(name):
    path = NOTEBOOKS / f"{name}.ipynb"
    assert path.stat().st_size < MAX_BYTES
    nb = nbformat.read(path, as_version=4)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    first = nb.cells[0]
    assert first.cell_type == "markdown" and first.source.startswith("# ") and "?" in first.source
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code), "stored unexecuted"
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    last = "".join(o.get("text", "") for o in code[-1].outputs if o.output_type == "stream")
    assert "KEY_NUMBERS " in last and "Answer: " in last
    assert key_numbers(nb)


class _Reexecution:
    """One notebook re-executed; a class per notebook (below), so that pytest-xdist
    (``--dist loadscope``) hands each to a worker of its own: together they are minutes."""

    name: str

    def test_reexecutes_to_its_stored_numbers(self):
        path = NOTEBOOKS / f"{self.name}.ipynb"
        stored = nbformat.read(path, as_version=4)
        fresh = nbformat.read(path, as_version=4)
        # timeout: a hang guard per cell, never a speed budget (a loaded machine is slow)
        NotebookClient(fresh, timeout=HANG_S, kernel_name="python3",
                       resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()  # fmt: skip
        want, got = key_numbers(stored), key_numbers(fresh)
        assert set(got) == set(want)
        moved = {k: (want[k], got[k]) for k in want if not _close(want[k], got[k])}
        assert not moved, f"{self.name}: key numbers moved (stored, fresh): {moved}"


for _name in NAMES:  # TestNotebook01_allocators, ...
    globals()[f"TestNotebook{_name}"] = type(f"TestNotebook{_name}", (_Reexecution,), {"name": _name})
