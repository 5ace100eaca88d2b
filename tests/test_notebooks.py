"""The shipped notebooks execute (reduced sizes) and produce their tables."""

import runpy
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def test_allocator_comparison_runs_and_ranks_paged_above_static(monkeypatch, capsys):
    monkeypatch.setenv("KVSIM_NOTEBOOK_OPS", "600")
    ns = runpy.run_path(str(NOTEBOOKS / "allocator_comparison.py"))
    table = ns["table"]
    from sim.memory import allocator_kinds

    assert set(table.index) == set(allocator_kinds())
    assert table.loc["paged", "eta_alloc_mean"] > table.loc["static", "eta_alloc_mean"]
    assert table.loc["paged", "copied_MiB"] <= table.loc["contiguous", "copied_MiB"]
    assert "eta_alloc_mean" in capsys.readouterr().out
