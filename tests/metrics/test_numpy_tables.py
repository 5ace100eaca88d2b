"""A run's record tables stay numpy (``sim.metrics.table.Columns``) from the recorder to
the Parquet files (issue 25 item 4: ``kvsim run`` without pandas), and nothing moves:
the Arrow tables written from the columns are the ones ``DataFrame.to_parquet`` wrote,
the summary read from the columns is the one read from DataFrames (a cluster's), and a
``RunResult`` hands out the DataFrames pandas made before, on first access."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.errors import InvariantError
from sim.metrics import summarize
from sim.metrics.pauses import PAUSE_COLUMNS, nansum, pause_summary
from sim.metrics.recorder import OBJECT_COLUMNS
from sim.metrics.summary import provider_view, run_warnings
from sim.metrics.table import to_arrow, to_frame
from sim.run import build, run_scenario
from sim.run.node import RunResult, run_workload

AGENTS = ("workloads/agent_swarm.yaml", {"workload.num_trajectories": 4})

#: every kind of column a record table has, and the edge cases of each
COLUMNS = {
    "i4": np.array([1, -2, 3], dtype=np.int32),
    "i8": np.array([2**40, 0, -1], dtype=np.int64),
    "f8": np.array([0.5, math.nan, 1e300]),
    "f8_all_nan": np.full(3, math.nan),
    "b": np.array([True, False, True]),
    "text": np.array(["stop", "length", ""], dtype=object),
    "unicode": np.array(["é", "漢字", "a"], dtype=object),
    "text_null": np.array(["x", None, "yz"], dtype=object),
    "all_null": np.array([None, None, None], dtype=object),
    "finish_reason": np.array([None, "stop", "abort"], dtype=object),
}


def _both(columns, tmp_path):
    """(what pyarrow wrote from the columns, what pandas wrote from their DataFrame)."""
    ours, theirs = tmp_path / "ours.parquet", tmp_path / "theirs.parquet"
    pq.write_table(to_arrow(columns, OBJECT_COLUMNS), ours)
    to_frame(columns, OBJECT_COLUMNS).to_parquet(theirs, index=False)
    return ours, theirs


@pytest.mark.parametrize("rows", [3, 0])
def test_arrow_table_is_the_one_to_parquet_wrote(tmp_path, rows):
    """Column for column the same Arrow types and values (NaN and None as null), and read
    back with pandas the same DataFrame (dtypes, RangeIndex, column order)."""
    columns = {n: c[:rows] for n, c in COLUMNS.items()}
    ours, theirs = _both(columns, tmp_path)
    a, b = pq.read_table(ours), pq.read_table(theirs)
    assert a.schema.remove_metadata() == b.schema.remove_metadata()
    assert a.replace_schema_metadata(None).equals(b.replace_schema_metadata(None))
    fa, fb = pd.read_parquet(ours), pd.read_parquet(theirs)
    assert fa.equals(fb) and list(fa.dtypes) == list(fb.dtypes)
    assert isinstance(fa.index, pd.RangeIndex) and list(fa.columns) == list(columns)


def test_a_text_column_holding_something_else_is_refused_in_one_line():
    with pytest.raises(InvariantError, match=r"^a text column holds 3 \(int\), not a str$"):
        to_arrow({"reason": np.array(["a", 3], dtype=object)})


def test_to_frame_keeps_a_nullable_text_column_as_objects():
    frame = to_frame(COLUMNS, OBJECT_COLUMNS)
    assert frame.finish_reason.dtype == object and frame.finish_reason[0] is None
    assert frame.text.dtype == pd.DataFrame({"t": COLUMNS["text"]}).t.dtype  # inferred


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.floats(-1e12, 1e12), st.just(math.nan)), max_size=300))
def test_nansum_is_pandas_series_sum_bit_for_bit(values):
    v = np.array(values, dtype=np.float64)
    assert nansum(v).hex() == float(pd.Series(v).sum()).hex()


@pytest.fixture(scope="module")
def recorded():
    """A run's recorder after the run, before its tables are taken (``collect``'s start)."""
    sim = build(AGENTS[0], **AGENTS[1])
    run_workload(sim.env, [sim.node], sim.ctx, sim.driver)
    sim.kv.flush_all()
    return sim


def test_the_summary_of_columns_is_the_summary_of_their_dataframes(recorded):
    """``summarize`` reads a run's ``Columns`` and a cluster's DataFrames with the same
    numpy reductions: bit for bit the same summary."""
    sim = recorded
    tables = sim.recorder.tables()
    frames = {n: to_frame(t, OBJECT_COLUMNS) for n, t in tables.items()}
    kw = {"sim_time_s": sim.node.end_s, "kv": sim.kv, "meta": {}}
    got = summarize(sim.recorder, tables, **kw)
    want = summarize(sim.recorder, frames, **kw)
    assert json.dumps(got) == json.dumps(want)
    assert got["requests_submitted"] == len(tables["requests"]["req_id"]) > 0
    traj = tables["trajectories"]
    assert provider_view(traj) == provider_view(frames["trajectories"])
    assert run_warnings(got, tables["requests"]) == run_warnings(got, frames["requests"])


def test_pause_summary_of_columns_is_that_of_their_dataframe():
    result = run_scenario(AGENTS[0], **AGENTS[1])
    pauses = result.table("pauses")
    assert isinstance(pauses, dict) and len(pauses["pause_id"]) == result.summary["pause_count"] > 0
    assert json.dumps(pause_summary(pauses)) == json.dumps(pause_summary(to_frame(pauses)))
    empty = {n: np.empty(0, dtype=object) for n in PAUSE_COLUMNS}
    assert pause_summary(empty) == pause_summary(pd.DataFrame([], columns=PAUSE_COLUMNS))


def test_a_run_result_makes_each_dataframe_once_on_first_access(tmp_path):
    result = run_scenario(AGENTS[0], **AGENTS[1])
    assert all(isinstance(result.table(n), dict) for n in ("requests", "steps", "pauses"))
    requests = result.requests
    assert isinstance(requests, pd.DataFrame) and isinstance(requests.index, pd.RangeIndex)
    assert result.requests is requests and result.table("requests") is requests
    assert requests.finish_reason.dtype == object and list(requests.columns)[-1] == "node"
    assert result.memory_groups is None and isinstance(result.table("steps"), dict)
    requests["extra"] = 1  # a DataFrame read (and changed) is the one written
    result.write(tmp_path / "run")
    assert "extra" in pd.read_parquet(tmp_path / "run" / "requests.parquet").columns
    assert pd.read_parquet(tmp_path / "run" / "steps.parquet").equals(result.steps)


def test_a_run_result_built_from_dataframes_keeps_them():
    """The way a cluster (and older code) builds one: DataFrames in, the same out."""
    frame = pd.DataFrame({"a": [1, 2]})
    r = RunResult({}, frame, frame, frame, frame, {}, None, frame)
    assert r.requests is frame and r.pauses is frame and r.memory_groups is None
    r.steps = frame.head(1)  # set: held as it is
    assert r.table("steps").equals(frame.head(1))
