"""Issue 27 item 4: a run breaks its KV down by layer group (summary, memory_groups.parquet),
counts a paused sequence's side groups, and a cluster's summary has the same keys.

One-request runs: each group's largest allocated bytes equals ``kvsim plan --json``'s bytes
of that group within block rounding (a table group: its share of the table's last, partly
filled block; a windowed group: the window's ceil(w/B) + 1 blocks against w tokens, and its
side blocks rounded up to one table block; a state group: that table-block rounding).
"""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
import yaml
from engine_helpers import one_request_doc, run

from sim.memory import make_allocator
from sim.memory.kv_manager import KVManager
from sim.profiles import load_model
from sim.run import run_scenario
from sim.sizing.group_demand import GroupDemand, KVGroups, kv_groups
from sim.sizing.group_split import kv_split
from sim.sizing.hybrid_pages import unify_pages

B = 16
# model -> (prompt, output)
CASES = {"gemma-3-27b": (16370, 14), "gpt-oss-20b": (16370, 14), "nemotron-h-8b": (8180, 12)}


def _doc(model: str, prompt: int, output: int) -> dict:
    return one_request_doc(model, prompt, output, B)


def _tolerance(model: str, name: str) -> float:
    """What whole blocks add to group ``name``'s exact bytes (module docstring)."""
    g = kv_groups(load_model(model), 1, 1)
    b = unify_pages(load_model(model), B).block_size_tokens
    table = {t.name: t.bytes_per_token for t in g.table}
    if name in table:
        return b * table[name]
    (side,) = [s for s in g.side if s.name == name]
    return 2 * b * side.bytes_per_token + b * g.table_bytes_per_token


@pytest.mark.parametrize("model", sorted(CASES))
def test_group_peaks_match_plan(model, tmp_path, run_cli):
    prompt, output = CASES[model]
    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump(_doc(model, prompt, output)))
    code, out, _ = run_cli(f"kvsim plan --model {model} --gpu h200-141gb --num-gpus 1 "
                           f"--context {prompt + output} --json")  # fmt: skip
    assert code == 0
    plan = {g["name"]: g["peak_bytes"] for g in json.loads(out)["contexts"][0]["groups"]}
    r = run_scenario(str(path), **{"engine.check_invariants": True})
    peaks = r.summary["peak_allocated_bytes_by_group"]
    assert set(peaks) == set(plan)
    for name, want in plan.items():
        assert want <= peaks[name] <= want + _tolerance(model, name), (name, peaks[name], want)
    # every memory row's groups add up to its allocated bytes
    mg, mem = r.memory_groups, r.memory
    assert list(mg.columns) == ["t_s", "group", "kind", "allocated_bytes", "node"]
    sums = mg.groupby("t_s", sort=True).allocated_bytes.sum().to_numpy()
    assert np.allclose(sums, mem.groupby("t_s", sort=True).allocated_bytes.last().to_numpy())
    # the means add up to the time-weighted allocated bytes
    t = mem.t_s.to_numpy()
    dt = np.diff(np.append(t, r.summary["sim_time_s"]))
    mean = float((mem.allocated_bytes.to_numpy() * dt).sum() / r.summary["sim_time_s"])
    assert sum(r.summary["allocated_bytes_by_group_mean"].values()) == pytest.approx(mean)


def test_dense_model_has_no_group_split(tmp_path):
    path = tmp_path / "dense.yaml"
    path.write_text(yaml.safe_dump(_doc("llama-3.1-8b", 1000, 8)))
    r = run_scenario(str(path))
    assert "peak_allocated_bytes_by_group" not in r.summary
    assert r.memory_groups is None
    folder = r.write(tmp_path / "run")
    assert not (folder / "memory_groups.parquet").exists()


def test_written_hybrid_folder_follows_the_schema(tmp_path):
    from sim.metrics.schema import check_run_folder

    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(_doc("gpt-oss-20b", 3000, 8)))
    folder = run_scenario(str(path)).write(tmp_path / "run")
    assert (folder / "memory_groups.parquet").is_file()
    assert check_run_folder(folder) == []


# ------------------------------------------------------------------------- the split
SLIDING = GroupDemand("sliding", "sliding_window", 3000.0, 100, 0.0)
STATE = GroupDemand("state", "mamba", 0.0, 0, 70_000.0)
FULL = GroupDemand("full", "full", 800.0, 0, 0.0)
INDEX = GroupDemand("index", "indexer", 200.0, 0, 0.0)
GROUPS = KVGroups(1000.0, (SLIDING, STATE), 4000.0, (FULL, INDEX))


def test_split_of_a_counting_allocator():
    """Table bytes by bytes per token (800:200), a drafter's 250 B per token beside them,
    side bytes shared by the given weights (1:3)."""
    split = kv_split(GROUPS, 1250.0, counted=True)
    assert split.names == ("full", "index", "sliding", "state", "draft")
    parts = split.split(12_500.0 + 4000.0, 4000.0, (1.0, 3.0))
    assert parts == pytest.approx([8000.0, 2000.0, 1000.0, 3000.0, 2500.0])
    assert sum(parts) == pytest.approx(16_500.0)


def test_split_of_a_kind_that_charges_every_layer():
    """No side blocks: every token group's per-token share (800, 200, 3000 of 4000); the
    state group holds nothing."""
    split = kv_split(GROUPS, 4000.0, counted=False)
    assert split.split(40_000.0, 0.0) == pytest.approx([8000.0, 2000.0, 30_000.0, 0.0])


def test_a_kind_that_charges_every_layer_splits_by_real_layers_not_padded_ones():
    """gemma-3-27b runs its 52 sliding layers as 60 in vLLM's groups, but an allocator that
    does not count groups charges F1's real 10 + 52 layers: the parts are 10 : 52 of the
    allocated bytes and sum to them (with padded shares they summed to 1,129,032,258)."""
    groups = kv_groups(load_model("gemma-3-27b"), 1, 1, num_gpus=1)
    split = kv_split(groups, groups.all_bytes_per_token, counted=False)
    assert split.names == ("full", "sliding")  # no phantom drafter share either
    parts = split.split(1e9, 0.0)
    assert parts == pytest.approx([1e9 * 10 / 62, 1e9 * 52 / 62], rel=1e-12)
    assert sum(parts) == pytest.approx(1e9, rel=1e-12)
    # a counting allocator's table still pays the padded layers it holds
    counted = kv_split(groups, groups.table_bytes_per_token, counted=True)
    assert counted.split(1e9, 2e8) == pytest.approx([8e8, 2e8], rel=1e-12)


def test_one_group_has_no_split():
    assert kv_split(KVGroups(1000.0, (), 1000.0, (FULL,)), 1000.0, counted=True) is None


# --------------------------------------------------------------------- paused bytes
def _kv() -> KVManager:
    alloc = make_allocator("paged", pool_bytes=10e6, kv_bytes_per_token=1000.0,
                           kv_groups=GROUPS, block_size=B)  # fmt: skip
    return KVManager(alloc)


def test_paused_bytes_count_the_side_groups():
    """A paused sequence of 250 tokens: 250 x 1,000 B in the table, the window's last
    blocks (ceil(250/16) - floor(150/16) = 16 - 9 = 7 blocks of 16 x 3,000 B = 336,000 B)
    and one state of 70,000 B."""
    kv = _kv()
    assert kv.alloc.allocate("a", 250)
    kv.hold("a", owner=1, key="p")
    assert kv.paused_bytes == 250 * 1000 + 7 * 16 * 3000 + 70_000
    kv.set_time(2.0)
    kv.resume("a")
    assert kv.paused_bytes == 0
    held = kv.held_token_seconds(2.0)
    assert held.total == 500.0 and held.side_byte_s == 2.0 * (7 * 16 * 3000 + 70_000)
    assert held.side_by_owner == {1: held.side_byte_s}
    kv.check_invariants()


def test_side_bytes_by_group_sum_the_live_sequences():
    kv = _kv()
    assert kv.alloc.allocate("a", 250) and kv.alloc.allocate("b", 20)
    # b: 2 blocks of the window (its 20 tokens), one state each
    assert kv.side_bytes_by_group() == (7 * 16 * 3000 + 2 * 16 * 3000, 2 * 70_000.0)


def test_hybrid_hold_counts_what_the_paused_sequence_holds():
    """E24 on gemma: the one pause holds 32,768 table tokens and the windows' blocks; the
    logical paused KV and F29 over every hold are that state (no forks: hold_gb_s equals
    the pause table's figure)."""
    model = "gemma-3-27b"
    r = run("seed_tool_wait_45s.yaml", **{"model.profile": model, "pause_policy.kind": "hold"})
    (p,) = r.pauses.itertuples()
    g = kv_groups(load_model(model), 8, 1, num_gpus=8)
    want = 32768 * g.table_bytes_per_token + g.side_bytes(32768, B)
    assert r.summary["paused_kv_bytes_peak"] == round(want)
    assert math.isclose(r.summary["hold_gb_s"], r.summary["paused_hbm_gb_s"], rel_tol=1e-9)
    # and per trajectory (trajectories.parquet hold_byte_s adds up to it)
    assert r.summary["hold_gb_s"] == pytest.approx(r.trajectories.hold_byte_s.sum() / 1e9)


# --------------------------------------------------------------------------- cluster
def test_cluster_summary_has_the_hybrid_keys():
    """Two gemma nodes: the cluster has allocator_kv_bytes_per_token (node 0's, as
    kv_bytes_per_token) and its KV by group is the nodes' added up."""
    doc = _doc("gemma-3-27b", 4000, 8)
    doc["workload"]["requests"][0].update(count=4, interval_s=0.5)
    doc["cluster"] = {"nodes": [{"count": 2}], "router": {"kind": "round_robin"}}
    s = run_scenario(copy.deepcopy(doc)).summary
    nodes = s["nodes"]
    assert s["allocator_kv_bytes_per_token"] == nodes[0]["allocator_kv_bytes_per_token"]
    for key in ("peak_allocated_bytes_by_group", "allocated_bytes_by_group_mean"):
        assert set(s[key]) == {"full", "sliding"}
        for name, v in s[key].items():
            assert v == pytest.approx(sum(n[key][name] for n in nodes))


# ---------------------------------------------------------------------------- report
def test_report_shows_kv_by_group_for_a_hybrid_model_only(tmp_path):
    """report.html gets a KV-by-group section (table + embedded stacked area) for a model
    of several groups; its stack is the table's split; a dense run's report has none."""
    from sim.report import series
    from sim.report.data import load_run
    from sim.report.render import groups_section, render_report

    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(_doc("gpt-oss-20b", 3000, 8)))
    r = run_scenario(str(path))
    st = series.group_stack(r.memory_groups)
    assert list(st.layers) == ["full (full)", "sliding (sliding_window)"]
    total = sum(st.layers.values()) * 1e9
    assert np.allclose(total, r.memory.allocated_bytes.to_numpy())
    section = groups_section(load_run(r))
    assert section[0] == "<h2>KV by layer group</h2>" and "<td>sliding</td>" in section[1]
    render_report(r, tmp_path)
    assert "KV by layer group" in (tmp_path / "report.html").read_text(encoding="utf-8")
    dense = tmp_path / "d.yaml"
    dense.write_text(yaml.safe_dump(_doc("llama-3.1-8b", 1000, 8)))
    assert groups_section(load_run(run_scenario(str(dense)))) == []


def test_recorder_shares_the_side_bytes_of_several_side_groups():
    """Two side groups (a window and a state): the recorder asks the KV manager what each
    holds for the live sequences and shares the side blocks by it; the table's bytes go
    800:200 to its two groups; the row's parts sum to its allocated bytes."""
    from sim.metrics import Recorder

    kv = _kv()
    rec = Recorder(pool_bytes=10e6, groups=kv_split(GROUPS, 1000.0, counted=True))
    rec.side_weights = kv.side_bytes_by_group
    assert kv.alloc.allocate("a", 250)
    m = kv.metrics()
    rec.memory(0.0, m, 0.0, 0, 1, 0)
    frame = rec.group_frame()
    got = dict(zip(frame.group, frame.allocated_bytes, strict=True))
    table = m.allocated_bytes - m.side_allocated_bytes
    assert table == 16 * 16 * 1000  # ceil(250 / 16) blocks of 16 x 1,000 B
    window, state = 7 * 16 * 3000, 70_000
    assert got == pytest.approx({
        "full": 0.8 * table, "index": 0.2 * table,
        "sliding": m.side_allocated_bytes * window / (window + state),
        "state": m.side_allocated_bytes * state / (window + state)})  # fmt: skip
    assert sum(got.values()) == pytest.approx(m.allocated_bytes)
    s = rec.group_summary(1.0)
    assert s["peak_allocated_bytes_by_group"]["full"] == round(0.8 * table)
    assert s["allocated_bytes_by_group_mean"]["index"] == pytest.approx(0.2 * table)
