"""The allocation-trace replay tool and ``kvsim alloc-replay``."""

from __future__ import annotations

import json

import pytest

from sim.errors import ConfigError, KvsimError
from sim.memory import make_allocator
from sim.memory.replay import (
    Op,
    loads_trace,
    parse_bytes,
    parse_op,
    random_ops,
    replay,
    row_record,
)
from sim.units import GB, GiB, KiB

TRACE = """\
allocator:
  kind: contiguous
  pool_bytes: 200 KiB
  kv_bytes_per_token: 1KiB
  placement: first_fit
ops:
  - allocate 1 40
  - allocate 2 40
  - {op: append, seq: 1, tokens: 1}
  - fork 2 3
  - free 2
  - append 3 5
"""


def test_parse_ops_in_both_forms():
    assert parse_op("allocate 1 40") == Op("allocate", 1, 40)
    assert parse_op("append r7") == Op("append", "r7", 1)
    assert parse_op({"op": "fork", "parent": 1, "child": "c"}) == Op("fork", 1, child="c")
    assert parse_op({"op": "free", "seq": 2}) == Op("free", 2)
    assert str(Op("fork", 1, child=2)) == "fork 1 2"


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("alloc 1 2", "unknown op 'alloc'; valid: allocate, append, fork, free"),
        ("allocate 1", "expected 'allocate SEQ TOKENS'"),
        ("free 1 2", "expected 'free SEQ'"),
        ("append 1 x", "tokens must be a whole number"),
        ({"op": "append", "seq": 1, "n": 3}, "unknown field 'n'"),
        (42, "an op is a string"),
    ],
)
def test_malformed_ops_name_the_place(item, message):
    with pytest.raises(ConfigError) as exc:
        parse_op(item, "t.yaml:7")
    assert str(exc.value).startswith("t.yaml:7: ")
    assert message in str(exc.value)


def test_parse_bytes():
    assert parse_bytes("10 GiB") == 10 * GiB
    assert parse_bytes("1.5GB") == 1.5 * GB
    assert parse_bytes("320KiB") == 320 * KiB
    assert parse_bytes(2048) == 2048 and parse_bytes("1e3") == 1000
    with pytest.raises(ConfigError, match="byte size"):
        parse_bytes("ten GiB")
    with pytest.raises(ConfigError, match="byte size"):
        parse_bytes("10 parsecs")


def test_replay_a_trace_file_text():
    trace = loads_trace(TRACE, "t.yaml")
    assert trace.allocator["kind"] == "contiguous"
    assert trace.ops[2] == Op("append", 1, 1, where="t.yaml:9")
    from sim.memory.replay import allocator_from_settings

    a = allocator_from_settings(trace.allocator)
    rows = replay(a, trace.ops, check=True, request_bytes=80 * KiB)
    assert [r.ok for r in rows] == [True, True, True, True, True, False]
    # 3 needs 80 contiguous slots to grow; 80 are free, but as two 40-slot holes
    last = rows[-1].metrics
    assert last.free_extents == (40 * KiB, 40 * KiB) and last.phi_ext == 1.0
    assert last.num_sequences == 2
    assert last.bytes_copied == 40 * KiB + 40 * KiB  # growth copy + deep-copy fork
    assert row_record(rows[-1])["op"] == "append 3 5"


def test_dropped_sequences_are_skipped_until_they_come_back():
    a = make_allocator("static", pool_bytes=100, kv_bytes_per_token=1, max_tokens=60)
    ops = [parse_op(s) for s in ("allocate 1 10", "allocate 2 10", "append 2 5",
                                 "fork 2 3", "free 2", "free 1", "allocate 2 3", "free 2")]  # fmt: skip
    rows = replay(a, ops)
    assert [r.ok for r in rows] == [True, False, None, None, None, True, True, True]
    assert rows[-1].metrics.num_sequences == 0


def test_misuse_in_a_trace_names_the_line():
    trace = loads_trace("- allocate 1 4\n- free 1\n- free 1\n", "t.yaml")
    a = make_allocator("paged", pool_bytes=1024, kv_bytes_per_token=1)
    with pytest.raises(KvsimError, match=r"^t.yaml:3: free 1: paged: free: sequence 1 is not"):
        replay(a, trace.ops)


def test_bad_trace_shapes():
    with pytest.raises(ConfigError, match="list of ops"):
        loads_trace("ops: 3\n", "t.yaml")
    with pytest.raises(ConfigError, match="t.yaml:1: opz: unknown field"):
        loads_trace("opz: []\n", "t.yaml")


def test_every_samples_metrics_and_always_the_last_row():
    a = make_allocator("paged", pool_bytes=1 << 20, kv_bytes_per_token=1)
    rows = replay(a, random_ops(25, seed=1), every=10)
    assert [r.step for r in rows if r.metrics is not None] == [9, 19, 24]


def test_random_ops_are_deterministic_and_well_formed():
    ops = random_ops(500, seed=7)
    assert ops == random_ops(500, seed=7) and ops != random_ops(500, seed=8)
    assert {o.op for o in ops} == {"allocate", "append", "fork", "free"}
    a = make_allocator("paged", pool_bytes=1 << 18, kv_bytes_per_token=1)
    rows = replay(a, ops, every=100)  # a pool larger than the trace ever needs
    assert all(r.ok for r in rows)
    a.check_invariants()
    assert any(
        o.op == "allocate" and o.seq in {p.seq for p in ops[:i] if p.op == "free"}
        for i, o in enumerate(ops)
    )  # fmt: skip  (freed ids come back)


def test_cli_replays_a_file(tmp_path, run_cli):
    path = tmp_path / "t.yaml"
    path.write_text(TRACE)
    code, out, err = run_cli(["alloc-replay", str(path), "--unit", "KiB", "--request", "80KiB"])
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["step", "op", "ok", "seqs"]
    assert lines[-1].split()[:5] == ["5", "append", "3", "5", "MISS"]
    code, out, _ = run_cli(["alloc-replay", str(path), "--kind", "paged", "-o", "block_size=8",
                            "--json"])  # fmt: skip
    doc = json.loads(out)
    assert code == 0 and doc["kind"] == "paged" and doc["ops"] == 6 and doc["misses"] == 0
    assert doc["rows"][-1]["num_sequences"] == 2


def test_cli_random_and_errors(run_cli):
    code, out, _ = run_cli("alloc-replay --random 30 --kind buddy --pool 1MiB "
                           "--kv-bytes-per-token 256 --every 10 --check")  # fmt: skip
    assert code == 0 and len(out.splitlines()) == 2 + 3
    code, _, err = run_cli("alloc-replay --random 5 --kind paged --pool 1MiB")
    assert code == 2 and "needs --kind, --pool and --kv-bytes-per-token" in err
    code, _, err = run_cli("alloc-replay --random 5 --kind paged --pool 1MiB "
                           "--kv-bytes-per-token 1 -o bogus=3")  # fmt: skip
    assert code == 2 and err.strip() == (
        "kvsim: error: bogus: unknown option of kind 'paged'; valid: block_size"
    )
    code, _, err = run_cli("alloc-replay")
    assert code == 2 and "exactly one" in err
