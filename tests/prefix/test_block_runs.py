"""``BlockRuns``: block ids as runs behave exactly as the expanded tuple of ids, and the
replay's segments from runs equal those built id by id."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sim.prefix.session_trace import BlockRuns, parse_session
from sim.prefix.trace_replay import block_content

RUNS = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 6)), max_size=8)


def _expand(runs) -> tuple[int, ...]:
    return tuple(x for first, n in runs for x in range(first, first + n))


@given(RUNS, st.integers(-60, 60), st.integers(-60, 60))
def test_runs_behave_as_the_expanded_ids(runs, a, b):
    ids = _expand(runs)
    br = BlockRuns(runs)
    assert len(br) == len(ids) and tuple(br) == ids and br == ids
    assert tuple(br[a:b]) == ids[a:b] and tuple(br[a:]) == ids[a:] and tuple(br[:b]) == ids[:b]
    assert tuple(br[::2]) == ids[::2]
    if -len(ids) <= a < len(ids):
        assert br[a] == ids[a]
    # maximal runs: no run starts where the previous one ends, none is empty
    assert all(n >= 1 for _, n in br.runs)
    assert all(f0 + n0 != f1 for (f0, n0), (f1, _) in zip(br.runs, br.runs[1:], strict=False))
    assert br == BlockRuns.of_ids(ids) and hash(br) == hash(BlockRuns.of_ids(ids))


@given(RUNS, RUNS)
def test_common_prefix_counts_shared_leading_ids(r1, r2):
    a, b = _expand(r1), _expand(r2)
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    assert BlockRuns(r1).common_prefix(BlockRuns(r2)) == n


@given(RUNS, st.integers(1, 64))
def test_segments_from_runs_equal_segments_id_by_id(runs, block_size):
    br = BlockRuns(runs)
    assert block_content(7, br, block_size) == block_content(7, tuple(br), block_size)


def test_out_of_range_index_and_repr():
    br = BlockRuns([(5, 2), (7, 1), (1, 1)])
    assert br.runs == ((5, 3), (1, 1)) and tuple(br) == (5, 6, 7, 1)
    assert br[-1] == 1 and repr(br) == "BlockRuns([(5, 3), (1, 1)])"
    try:
        br[4]
    except IndexError:
        pass
    else:
        raise AssertionError("index 4 of 4 ids must raise")


def test_a_long_prompt_stays_a_few_runs():
    # 10 million tokens at 64 per block: 156,250 ids in one run, held as one pair
    s = parse_session(
        {"block_size": 64, "requests": [{"t": 0, "in": 10_000_000, "out": 1,
                                          "hash_runs": [[0, 100_000], [100_000, 56_250]]}]},
        "x.jsonl:1",
    )  # fmt: skip
    (call,) = s.calls()
    assert call.block_ids.runs == ((0, 156_250),) and len(call.block_ids) == 156_250
