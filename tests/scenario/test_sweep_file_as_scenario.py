"""h121: a sweep file given where a scenario goes (``kvsim run``, ``compare --vary``,
``capacity``, ``workload sample``) was refused as a scenario missing its model: "model:
required field is missing (and 3 more problems)", with no line. It is now one line at its
``sweep:`` key saying what the file is, which command runs it, and its base scenario (the
file those commands take, relative to where the command runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.errors import KvsimError
from sim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
SWEEP = ROOT / "workloads" / "coding_agents_sweep.yaml"


def _want(path: Path, base: str) -> str:
    line = path.read_text().splitlines().index("sweep:") + 1
    return (f"{path}:{line}: sweep: a sweep file, not a scenario: kvsim sweep {path} --out DIR "
            f"runs it; its base scenario, which this command takes, is {base}")  # fmt: skip


def test_the_shipped_sweep_names_its_base():
    with pytest.raises(KvsimError) as exc:
        load_scenario(SWEEP)
    assert str(exc.value) == _want(SWEEP, str(SWEEP.parent / "coding_agents_capacity.yaml"))


@pytest.mark.parametrize("argv", [
    ["run", str(SWEEP), "--out", "OUT"],
    ["capacity", str(SWEEP), "--slo", "ttft_p99_s=2"],
    ["compare", str(SWEEP), "--out", "OUT", "--vary", "seed=1,2"],
    ["workload", "sample", str(SWEEP)],
])  # fmt: skip
def test_every_command_taking_a_scenario_says_it(argv, tmp_path, run_cli):
    argv = [str(tmp_path / "out") if a == "OUT" else a for a in argv]
    code, out, err = run_cli(argv)
    assert code == 2 and out == ""
    assert err == f"kvsim: error: {_want(SWEEP, str(SWEEP.parent / 'coding_agents_capacity.yaml'))}\n"
    assert not (tmp_path / "out").exists()


def test_validate_still_checks_it_as_a_sweep(run_cli):
    code, out, _ = run_cli(["validate", str(SWEEP)])
    assert code == 0 and ": ok: sweep coding_agents_sweep: 6 points x 2 replications" in out
