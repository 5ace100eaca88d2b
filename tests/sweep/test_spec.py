"""Sweep files: expansion order and seeds, one-line errors, ``kvsim validate`` and
``kvsim schema --kind sweep``."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from sim.errors import ConfigError
from sim.sweep.spec import load_sweep

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "workloads").glob("*_sweep.yaml"))


def test_grid_times_points_in_order_with_seeds(sweep_file):
    sweep = load_sweep(sweep_file)
    assert sweep.points == [
        {"pause_policy.kind": "hold", "workload.arrival.concurrency": 2, "workload.num_trajectories": 6},
        {"pause_policy.kind": "hold", "workload.arrival.concurrency": 6, "workload.num_trajectories": 18},
        {"pause_policy.kind": "recompute", "workload.arrival.concurrency": 2, "workload.num_trajectories": 6},
        {"pause_policy.kind": "recompute", "workload.arrival.concurrency": 6, "workload.num_trajectories": 18},
    ]  # fmt: skip
    runs = sweep.runs(base_seed=3)
    assert [(r.point, r.replication, r.seed) for r in runs] == [
        (p, r, 3 + r) for p in range(4) for r in range(2)
    ]
    assert sweep.keys == ["pause_policy.kind", "workload.arrival.concurrency", "workload.num_trajectories"]


def test_a_point_seed_moves_its_replications(tiny):
    path = tiny.with_name("s.yaml")
    path.write_text("sweep:\n  base: tiny.yaml\n  points: [{seed: 10}, {}]\n  replications: 3\n")
    runs = load_sweep(path).runs(base_seed=3)
    assert [r.seed for r in runs] == [10, 11, 12, 3, 4, 5]
    assert all("seed" not in r.overrides for r in runs)


@pytest.mark.parametrize(
    "text, where, needle",
    [
        ("sweep:\n  base: tiny.yaml\n  grd: {seed: [1]}\n", ":3", "sweep.grd: unknown field; valid: base, grid, points, replications"),
        ("sweep:\n  base: nope.yaml\n", ":2", "sweep.base: no such scenario file: nope.yaml"),
        ("sweep:\n  base: tiny.yaml\n  replications: 0\n", ":3", "sweep.replications"),
        ("sweep:\n  base: tiny.yaml\n  grid:\n    seed: []\n", ":4", "a grid key needs at least one value"),
        ("name: x\n", ":1", "a sweep file needs a top-level 'sweep:' mapping"),
    ],
)
def test_errors_are_one_line_with_file_and_line(tiny, text, where, needle):
    path = tiny.with_name("bad.yaml")
    path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_sweep(path)
    msg = str(exc.value)
    assert "\n" not in msg and needle in msg and f"bad.yaml{where}" in msg


def test_validate_checks_every_point(run_cli, sweep_file):
    code, out, err = run_cli(["validate", str(sweep_file)])
    assert code == 0, err
    assert ": ok: sweep tiny_sweep: 4 points x 2 replications = 8 runs of tiny.yaml" in out
    bad = sweep_file.with_name("bad_sweep.yaml")
    bad.write_text("sweep:\n  base: tiny.yaml\n  grid: {allocator.kind: [paged, pagd], workload.turns: [2, -1]}\n")
    code, out, err = run_cli(["validate", str(bad)])
    lines = err.strip().splitlines()
    assert code == 2 and out == ""
    assert len(lines) == 4  # (paged, -1), (pagd, 2), and both problems of (pagd, -1)
    assert all(line.startswith("kvsim: error: point ") for line in lines)
    assert "point 1 (allocator.kind=\"paged\", workload.turns=-1): workload.turns: " in err
    assert "'pagd'" in err and "workload.turns" in err


def test_every_shipped_sweep_validates(run_cli):
    assert SHIPPED, "workloads/*_sweep.yaml"
    for path in SHIPPED:
        code, out, err = run_cli(["validate", str(path)])
        assert code == 0 and ": ok: sweep " in out, err


def test_schema_kind_sweep_describes_sweep_files(run_cli, tmp_path):
    out = tmp_path / "sweep.schema.json"
    code, _, err = run_cli(["schema", "--kind", "sweep", "--out", str(out)])
    assert code == 0, err
    schema = json.loads(out.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for path in SHIPPED:
        assert list(validator.iter_errors(yaml.safe_load(path.read_text()))) == []
    bad = {"sweep": {"base": "x.yaml", "replications": 0, "grd": {}}}
    assert len(list(validator.iter_errors(bad))) == 2
    code, _, err = run_cli(["schema", "--kind", "sweeps"])
    assert code == 2 and "valid: scenario, sweep" in err
