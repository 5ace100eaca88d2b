"""``kvsim capacity --search``: every search the command takes is named by its help and by
the refusal of an unknown one, before anything is read or run."""

from __future__ import annotations

import re

from typer.main import get_command

from sim.cli import app
from sim.cli.capacity import PD_RATIO
from sim.sweep.capacity import SEARCHES


def test_an_unknown_search_names_every_valid_one(run_cli, tmp_path) -> None:
    missing = tmp_path / "no_such.yaml"  # refused before the scenario is read
    code, out, err = run_cli(["capacity", str(missing), "--slo", "ttft_p99_s=2", "--search", "concurency"])
    assert (code, out) == (2, "")
    assert err.strip() == "kvsim: error: --search 'concurency': valid: concurrency, arrival_rate, nodes, pd_ratio"


def test_the_help_names_the_same_searches() -> None:
    cmd = get_command(app).commands["capacity"]  # type: ignore[attr-defined]
    (param,) = [p for p in cmd.params if p.name == "search"]
    named = re.findall(r"[a-z_]+", param.help.replace(" or ", ", "))
    assert named == [*SEARCHES, PD_RATIO]
