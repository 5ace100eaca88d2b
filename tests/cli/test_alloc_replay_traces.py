"""`kvsim alloc-replay` on large op traces: the scenario loader's bounds (200,000 YAML
nodes) no longer cap a trace at ~30k ops; JSON traces are parsed with ``json``, with the
line of each op in errors."""

from __future__ import annotations

import json

from sim.memory.replay import MAX_TRACE_NODES, load_trace
from sim.yamlio import MAX_NODES

ALLOCATOR = {"kind": "paged", "pool_bytes": "1 GiB", "kv_bytes_per_token": 1024, "block_size": 16}


def _ops(n: int) -> list[dict]:
    """n mapping ops (7 YAML nodes each), allocate and free in turn."""
    out: list[dict] = []
    for i in range(n // 2):
        out += [{"op": "allocate", "seq": i, "tokens": 16}, {"op": "free", "seq": i}]
    return out


def test_a_json_trace_past_the_scenario_bound_replays(run_cli, tmp_path):
    ops = _ops(60_000)  # 60k ops, ~360k values: refused before as an alias bomb
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"allocator": ALLOCATOR, "ops": ops}, indent=1))
    code, out, err = run_cli(["alloc-replay", str(path), "--every", "100000", "--json"])
    assert code == 0, err
    data = json.loads(out)
    assert (data["ops"], data["misses"], data["skipped"]) == (60_000, 0, 0)
    assert data["rows"][-1]["allocated_bytes"] == 0  # every sequence freed


def test_a_yaml_trace_past_the_scenario_bound_loads():
    """29,000 mapping ops = 203,001 YAML nodes, past the scenario loader's 200,000."""
    import tempfile
    from pathlib import Path

    n = 29_000
    text = "ops:\n" + "".join(f"  - {{op: allocate, seq: {i}, tokens: 16}}\n" for i in range(n))
    assert 7 * n + 2 > MAX_NODES and 7 * n + 2 < MAX_TRACE_NODES
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.yaml"
        path.write_text(text)
        trace = load_trace(path)
    assert len(trace.ops) == n and str(trace.ops[-1]) == f"allocate {n - 1} 16"


def test_a_yaml_trace_still_refuses_an_alias_bomb(run_cli, tmp_path):
    bomb = ["a0: &a0 [free 1, free 1, free 1, free 1, free 1, free 1, free 1, free 1]"]
    bomb += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 8) + "]" for i in range(1, 9)]
    path = tmp_path / "bomb.yaml"
    path.write_text("x:\n" + "".join(f"  {line}\n" for line in bomb) + "ops: *a8\n")
    code, _, err = run_cli(["alloc-replay", str(path), "--kind", "paged", "--pool", "1GiB",
                            "--kv-bytes-per-token", "1024"])  # fmt: skip
    assert code == 2 and "expands to more than 2,000,000 nodes" in err and str(path) in err


def test_a_bad_op_in_a_json_trace_names_its_line(run_cli, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"ops": [\n  "allocate 1 16",\n  "allocate 2 16",\n  "frees 1"\n]}\n')
    code, _, err = run_cli(["alloc-replay", str(path), "--kind", "paged", "--pool", "1GiB",
                            "--kv-bytes-per-token", "1024"])  # fmt: skip
    assert code == 2
    assert err == (
        f"kvsim: error: {path}:4: unknown op 'frees'; valid: allocate, append, fork, free\n"
    )
    path.write_text('["allocate 1 16",\n "free 1",]\n')
    code, _, err = run_cli(["alloc-replay", str(path), "--kind", "paged", "--pool", "1GiB",
                            "--kv-bytes-per-token", "1024"])  # fmt: skip
    assert code == 2 and err == f"kvsim: error: {path}:2: invalid JSON: Expecting value\n"
