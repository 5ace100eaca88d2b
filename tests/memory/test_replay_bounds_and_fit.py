"""``kvsim alloc-replay``'s rough edges from a user trial (h111 findings 5 and 8): the pool
bound a run applies (``MAX_POOL_TOKENS`` tokens), refused in one line naming the flag,
and one definition of ``phi_ext`` (SPEC F9: 0 for block kinds by construction), with
whether the request fits under its own name (``fits``)."""

from __future__ import annotations

import pytest

from sim.errors import ConfigError
from sim.memory.registry import MAX_POOL_TOKENS
from sim.memory.replay import Op, allocator_from_settings, format_table, replay, row_record

KiB = 1024


def test_the_bound_is_the_one_a_run_applies():
    import importlib

    resolve = importlib.import_module("sim.scenario.resolve")  # the package's resolve is a function
    assert resolve.MAX_POOL_TOKENS == MAX_POOL_TOKENS == 2e8


@pytest.mark.parametrize("pool", [1e30, 1e15, MAX_POOL_TOKENS + 1])
def test_a_pool_beyond_the_bound_is_refused_naming_the_flag(pool):
    settings = {"kind": "paged", "pool_bytes": pool, "kv_bytes_per_token": 1}
    with pytest.raises(ConfigError) as err:
        allocator_from_settings(settings, "flags", {"pool_bytes": "--pool"})
    text = str(err.value)
    assert "\n" not in text and text.startswith("--pool: ") and "2e+08 tokens" in text
    assert "--kv-bytes-per-token" not in text  # that one came from the file: its own name
    assert "allocator.kv_bytes_per_token" in text
    # from a trace file's allocator section: the file's key and where it is
    with pytest.raises(ConfigError, match=r"^t.yaml: allocator: allocator.pool_bytes: "):
        allocator_from_settings(settings, "t.yaml: allocator")


def test_the_bound_is_in_tokens_so_bytes_per_token_count():
    # 1e15 B is 1e15 tokens at 1 B per token (refused) but 3.05e9 at 320 KiB (still
    # refused), and 2e8 x 2 KiB at 2 KiB per token is exactly the bound (accepted)
    with pytest.raises(ConfigError):
        allocator_from_settings({"kind": "static", "pool_bytes": 1e15,
                                 "kv_bytes_per_token": 320 * KiB})  # fmt: skip
    a = allocator_from_settings({"kind": "static", "pool_bytes": 2e8 * 2 * KiB,
                                 "kv_bytes_per_token": 2 * KiB, "max_tokens": 2048})  # fmt: skip
    assert a.pool_bytes == 2e8 * 2 * KiB


def test_cli_refuses_in_one_line(run_cli, tmp_path):
    trace = tmp_path / "t.yaml"
    trace.write_text("- allocate a 10\n", encoding="utf-8")
    code, out, err = run_cli(["alloc-replay", str(trace), "--kind", "paged", "--pool", "1e30",
                              "--kv-bytes-per-token", "1"])  # fmt: skip
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("kvsim: error: --pool: ")
    assert "Traceback" not in err


def test_paged_short_of_memory_has_no_fragmentation_but_does_not_fit():
    """The trial's trace: a 64 KiB paged pool (B = 4, 1 KiB per token: 16 blocks of 4 KiB)
    after a 10-, a 20-token sequence, a fork and appends: 4 KiB left free when ``d`` asks
    for 30 tokens; a 16 KiB request: F9 is 0 (any free block serves), it does not fit."""
    a = allocator_from_settings({"kind": "paged", "pool_bytes": 64 * KiB,
                                 "kv_bytes_per_token": KiB, "block_size": 4})  # fmt: skip
    ops = [Op("allocate", "a", 10), Op("allocate", "b", 20), Op("append", "a", 3),
           Op("fork", "b", child="c"), Op("append", "c", 1), Op("append", "b", 1),
           Op("free", "a"), Op("allocate", "d", 30)]  # fmt: skip
    rows = replay(a, ops, request_bytes=16 * KiB)
    # blocks of 4 tokens: a 3, b 5 (8 used), a grows to 13 tokens: 4 (9), the fork shares
    # b's 5 full blocks, c's and b's 21st tokens open a block each (11), freeing a gives 4
    # back (7), d takes ceil(30 / 4) = 8 (15 of 16): one 4 KiB block free
    last = rows[-1].metrics
    assert rows[-1].ok is True
    assert last.free_bytes == 4 * KiB and last.free_extents == (4 * KiB,)
    assert last.phi_ext == 0.0
    record = row_record(rows[-1])
    assert record["phi_ext"] == 0.0 and record["request_fits"] is False
    assert row_record(rows[0])["request_fits"] is True  # 13 blocks (52 KiB) free then
    table = format_table(rows, "KiB").splitlines()
    head = table[0].split()
    assert head[head.index("phi_ext") + 1] == "fits"
    cells = table[-1].split()  # "7 allocate d 30 ok ...": the op is 3 cells, its head 1
    assert cells[head.index("phi_ext") + 2] == "0.0%" and cells[head.index("fits") + 2] == "no"
