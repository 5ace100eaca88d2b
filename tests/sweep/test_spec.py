"""Sweep files: expansion order and seeds, one-line errors, ``kvsim validate`` and
``kvsim schema --kind sweep``."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from sim.errors import ConfigError
from sim.sweep.spec import load_sweep, seed_stride

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


def test_a_seed_grid_with_replications_never_runs_a_seed_twice(tiny):
    path = tiny.with_name("s.yaml")
    path.write_text("sweep:\n  base: tiny.yaml\n  grid: {seed: [1, 2], workload.turns: [2, 3]}\n"
                    "  replications: 2\n")  # fmt: skip
    runs = load_sweep(path).runs(base_seed=3)
    # seeds 1, 2 are one apart, 2 replications: they step by 2 (1, 3 | 2, 4), not 1, 2 | 2, 3
    assert [(r.overrides["workload.turns"], r.seed) for r in runs] == [
        (2, 1), (2, 3), (3, 1), (3, 3), (2, 2), (2, 4), (3, 2), (3, 4)]  # fmt: skip


@given(st.lists(st.integers(0, 50), min_size=1, max_size=6), st.integers(1, 5))
def test_seed_stride_gives_distinct_seeds_to_distinct_first_seeds(firsts, replications):
    stride = seed_stride(firsts, replications)
    owner: dict[int, int] = {}
    for s in firsts:
        for r in range(replications):
            assert owner.setdefault(s + r * stride, s) == s  # no seed of two first seeds
    if all(abs(a - b) >= replications or a == b for a in firsts for b in firsts):
        assert stride == 1  # runs that never overlapped keep seeds s, s+1, ...


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
    # each at the sweep file's line of the refused key
    assert all(line.startswith(f"kvsim: error: {bad}:3: sweep.grid.") for line in lines)
    assert ("3: sweep.grid.workload.turns: point 1 (allocator.kind=\"paged\", "
            "workload.turns=-1): workload.turns: ") in err  # fmt: skip
    assert "3: sweep.grid.allocator.kind: point 2 (allocator.kind=\"pagd\"" in err
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
