"""What a report reads: one run's summary and tables, from a ``RunResult`` or a run folder.

Responsibility: give the plots one shape of input (``RunData``) whether the run is in
memory (a ``sim.run.RunResult``, right after ``kvsim run``) or on disk (a run folder
written by ``sim.run.output``). Tables a folder lacks are empty DataFrames. A cluster
run (``nodes`` in its summary, a ``node`` column in every table) is one ``RunData``;
``node_ids`` lists its nodes and ``select_node`` cuts out one node as a single-node run.

Invariant: loading never changes the run folder; a path that is not a run folder, and a
node the run does not have, are one-line ``KvsimError``s naming it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sim.errors import ConfigError, KvsimError
from sim.run.output import utf8_path
from sim.yamlio import json_value, read_bytes_bounded

#: summary keys the report reads unconditionally (every kvsim run writes them): a run
#: folder's summary.json without one is refused in one line
SUMMARY_NEEDED = ("kv_pool_bytes", "kv_bytes_per_token")
#: memory_groups: a model of several layer groups only (absent otherwise: empty)
TABLE_NAMES = ("requests", "steps", "memory", "trajectories", "pauses", "memory_groups")


@dataclass
class RunData:
    """A run's summary and record tables (each a DataFrame, possibly empty)."""

    summary: dict
    requests: pd.DataFrame
    steps: pd.DataFrame
    memory: pd.DataFrame
    trajectories: pd.DataFrame
    pauses: pd.DataFrame
    memory_groups: pd.DataFrame  # KV by layer group over time (empty: one group)
    folder: Path | None = None  # where it was read from (None: in memory)
    config: dict | None = None  # the resolved scenario (config.resolved.yaml), when known

    @property
    def name(self) -> str:
        return str(self.summary.get("scenario") or (self.folder.name if self.folder else "run"))


def load_run(run: Any) -> RunData:
    """``run``: a ``RunData``, a ``RunResult`` (anything with ``summary`` and the tables as
    attributes) or a run folder path."""
    if isinstance(run, RunData):
        return run
    if isinstance(run, str | Path):
        return read_run_folder(Path(run))
    if not hasattr(run, "summary"):
        raise KvsimError(f"not a run: {run!r} (give a RunResult or a run folder)")
    frames = {n: getattr(run, n, None) for n in TABLE_NAMES}
    config = getattr(run, "config", None)
    config = config if isinstance(config, dict) else None
    return RunData(run.summary, config=config, **{n: _frame(f) for n, f in frames.items()})


def read_run_folder(folder: Path) -> RunData:
    """The run folder's summary.json and tables (a missing table is empty)."""
    path = folder / "summary.json"
    if not path.is_file():
        raise KvsimError(f"{folder}: not a run folder (no summary.json)")
    utf8_path(folder, "RUN_DIR:")  # pyarrow reads the tables at UTF-8 paths only
    try:
        summary = json_value(read_bytes_bounded(path), str(path), lines=True)
    except ConfigError as exc:
        raise KvsimError(f"{exc.location or path}: cannot read: {exc.message}") from None
    if not isinstance(summary, dict):  # ``[1, 2]``: kvsim run writes one JSON object
        raise KvsimError(f"{path}: cannot read: not a JSON object (a {type(summary).__name__}; "
                         "kvsim run writes one object of summary keys)")  # fmt: skip
    for key in SUMMARY_NEEDED:  # the report's pool figures divide by them (KeyError before)
        if key not in summary:
            raise KvsimError(f"{path}: {key}: missing (every kvsim run writes it: the file "
                             "is damaged; run the scenario again with kvsim run)")  # fmt: skip
    wrong = summary_type_problem(summary)
    if wrong is not None:  # a hand-edited value of the wrong type (a traceback before)
        raise KvsimError(f"{path}: {wrong} (kvsim run writes it so: the file is damaged; "
                         "run the scenario again with kvsim run)")  # fmt: skip
    frames = {}
    for name in TABLE_NAMES:
        table = folder / f"{name}.parquet"
        try:
            frames[name] = pd.read_parquet(table) if table.is_file() else pd.DataFrame()
        except Exception as exc:  # a damaged parquet file: say which, in one line
            raise KvsimError(f"{table}: cannot read: {type(exc).__name__}") from None
    return RunData(summary, folder=folder, config=_resolved_config(folder), **frames)


#: what each declared value kind must be, in words (``summary_type_problem``'s message)
_EXPECTED = {
    "int": "a whole number",
    "float": "a number",
    "str": "a string",
    "bool": "true or false",
    "dist": "an object of numbers or nulls (mean, p50, p90, p95, p99)",
    "counts": "an object of whole numbers",
    "texts": "a list of strings",
    "argv": "a list of strings",
    "versions": "an object of strings",
    "nodes": "a list of objects, each with node_id",
    "accuracy": "an object (basis, source, median_rel_error, ...)",
    "floats": "an object of numbers",
}


def summary_type_problem(summary: dict, where: str = "") -> str | None:
    """The first declared ``summary.json`` key (``sim.metrics.schema``; a cluster's
    ``nodes`` entries too) whose value has the wrong type, as ``"KEY: expected ..., found
    ..."``; None when every value the report may read has its type. Undeclared and absent
    keys are not problems here (a newer or an older kvsim's), nor is null where the schema
    allows it (the report shows "-")."""
    from sim.metrics.schema import SUMMARY_KEYS, value_type_ok

    for key in SUMMARY_KEYS:
        v = summary.get(key.name)
        if v is None and (key.nullable or key.name not in summary):
            continue
        if v is not None and value_type_ok(key.kind, v, loose=True):  # (an older kvsim's too)
            continue
        found = json.dumps(v)
        found = found if len(found) <= 60 else found[:57] + "..."
        want = _EXPECTED[key.kind] + (", not null" if v is None else "")
        return f"{where}{key.name}: expected {want}, found {found}"
    for entry in summary.get("nodes") or []:
        wrong = summary_type_problem(entry, f"{where}nodes[{entry['node_id']}].")
        if wrong is not None:
            return wrong
    return None


def _resolved_config(folder: Path) -> dict | None:
    """The folder's config.resolved.yaml (safe, bounded YAML), None when absent."""
    path = folder / "config.resolved.yaml"
    if not path.is_file():
        return None
    from sim.yamlio import load_yaml

    data, _ = load_yaml(path)  # a damaged file is a one-line ConfigError naming it
    return data if isinstance(data, dict) else None


def node_ids(run: RunData) -> list[int]:
    """The run's node ids: its summary's ``nodes`` (a cluster run), else the ids in its
    tables' ``node`` column (``[0]`` for a single-node run, ``[]`` for one without it)."""
    nodes = run.summary.get("nodes")
    if isinstance(nodes, list) and nodes:
        return [int(n.get("node_id", i)) for i, n in enumerate(nodes)]
    ids: set[int] = set()
    for name in TABLE_NAMES:
        frame = getattr(run, name)
        if len(frame) and "node" in frame:
            ids.update(int(v) for v in frame["node"].unique())
    return sorted(ids)


def is_cluster(run: RunData) -> bool:
    """More than one node: the report draws per node (or the cluster's sum)."""
    return len(node_ids(run)) > 1


def node_summary(run: RunData, node: int) -> dict:
    """The summary of one node: its ``nodes`` entry (a cluster run), else the summary."""
    for entry in run.summary.get("nodes") or []:
        if int(entry.get("node_id", -1)) == node:
            return entry
    return run.summary


def select_node(run: Any, node: int) -> RunData:
    """One node of a run as a single-node ``RunData``: each table's rows of that node, the
    node's summary and allocator (a single-node run and node 0 give the run itself)."""
    run = load_run(run)
    ids = node_ids(run)
    if isinstance(node, np.integer):
        node = int(node)
    if isinstance(node, bool) or not isinstance(node, int) or node not in (ids or [0]):
        raise KvsimError(f"{run.name}: no node {node!r} (nodes: {', '.join(map(str, ids or [0]))})")
    if not run.summary.get("nodes"):
        return run
    frames = {n: _rows_of(getattr(run, n), node) for n in TABLE_NAMES}
    summary = {"scenario": run.summary.get("scenario"), **node_summary(run, node)}
    return RunData(summary, folder=run.folder, config=_node_config(run.config, node), **frames)


def _rows_of(frame: pd.DataFrame, node: int) -> pd.DataFrame:
    if not len(frame) or "node" not in frame:
        return frame
    return frame[frame["node"].to_numpy() == node].reset_index(drop=True)


def _node_config(config: dict | None, node: int) -> dict | None:
    """The resolved config with the node's group allocator applied (a changed kind drops
    the top-level kind's options, as ``sim.cluster.config.group_overrides`` does)."""
    groups = ((config or {}).get("cluster") or {}).get("nodes") or []
    owner = [g for g in groups if isinstance(g, dict) for _ in range(int(g.get("count") or 0))]
    own = owner[node].get("allocator") if node < len(owner) else None
    if not own:
        return config
    base = dict(config.get("allocator") or {})
    if own.get("kind", base.get("kind")) != base.get("kind"):
        base = {}
    return {**config, "allocator": {**base, **own}}


def _frame(f: pd.DataFrame | None) -> pd.DataFrame:
    return pd.DataFrame() if f is None else f
