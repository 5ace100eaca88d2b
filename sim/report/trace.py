"""``trace.json``: a run as Chrome / Perfetto trace events (opens in ui.perfetto.dev).

Responsibility: turn the run's tables into trace events: engine steps on the ``engine``
track (a coalesced run of identical decode steps is one slice, its step count in the
name), prefill chunks of each step on a ``prefill`` track beside it, zero-time decisions
(preemptions, rejections, held drops) as instants, each tool pause as an async slice with
its tier moves (copy out, reload) nested inside, every copy on the ``copy engines``
process (device-to-host and host-to-device tracks), and memory counters. A cluster run:
one process per node instead, named ``node N`` (pid N + 1: Perfetto treats pid 0 as the
kernel's), with the node's steps, prefill, tool pauses and copies as its threads and its
counters; async ids carry the node (``n0.p3``), since nodes number their pauses alike.

Size cap: at most ``MAX_EVENTS`` events (about 150 bytes each, so ~75 MB). A longer run
keeps its events in time order up to the cap (a slice is kept or dropped whole, never cut)
and says where it stopped in ``otherData.truncated_at_s``. Times are microseconds
(``ts``/``dur``), the trace format's unit.

Invariant: every ``B``/``b`` event has its matching end; the file is valid JSON written
whole (a temporary renamed over the target).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np

from sim.report.data import is_cluster, load_run, node_ids, select_node

#: the most events a trace holds (see the module docstring)
MAX_EVENTS = 500_000
TRACE_FILE = "trace.json"
US = 1e6
ENGINE, PAUSES, COPIES = 1, 2, 3  # process ids


def _meta(pid: int, name: str, threads: dict[int, str]) -> list[dict]:
    out = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}]
    out += [{"ph": "M", "name": "thread_name", "pid": pid, "tid": t, "args": {"name": n}}
            for t, n in threads.items()]  # fmt: skip
    return out


def _step_groups(steps, pid: int = ENGINE) -> list[tuple[float, list[dict]]]:
    groups = []
    cols = ("start_s", "duration_s", "n_steps", "n_decode", "n_prefill", "prefill_tokens",
            "preempted", "rejected", "held_drops", "bound")  # fmt: skip
    rows = zip(*(steps[c].to_numpy() for c in cols), strict=True) if len(steps) else []
    for start, dur, n, dec, npf, pft, pre, rej, drops, bound in rows:
        ts = float(start) * US
        if n == 0:  # a decision that ran no step
            what = ", ".join(f"{int(v)} {k}" for k, v in
                             (("preempted", pre), ("rejected", rej), ("held drops", drops)) if v)  # fmt: skip
            groups.append((ts, [{"ph": "i", "name": what or "decision", "cat": "event",
                                 "pid": pid, "tid": 1, "ts": ts, "s": "t"}]))  # fmt: skip
            continue
        name = f"decode run x{int(n)}" if n > 1 else ("step" if npf else "decode step")
        ev = [{"ph": "X", "name": name, "cat": "step", "pid": pid, "tid": 1, "ts": ts,
               "dur": float(dur) * US, "args": {"n_steps": int(n), "n_decode": int(dec),
                                                "prefill_tokens": int(pft), "bound": str(bound),
                                                "preempted": int(pre)}}]  # fmt: skip
        if npf:
            ev.append({"ph": "X", "name": f"prefill {int(npf)} chunk(s), {int(pft)} tokens",
                       "cat": "prefill", "pid": pid, "tid": 2, "ts": ts,
                       "dur": float(dur) * US / n})  # fmt: skip
        groups.append((ts, ev))
    return groups


def _async(name: str, cat: str, pid: int, ident: str, t0: float, t1: float, args=None,
           tid: int = 1):  # fmt: skip
    b = {"ph": "b", "name": name, "cat": cat, "pid": pid, "tid": tid, "id": ident, "ts": t0 * US}
    if args:
        b["args"] = args
    return [b, {"ph": "e", "name": name, "cat": cat, "pid": pid, "tid": tid, "id": ident,
                "ts": t1 * US}]  # fmt: skip


def _ok(*ts: float) -> bool:
    return all(t is not None and not math.isnan(t) for t in ts)


def _pause_groups(pauses, where: tuple[int, int, int, int] = (PAUSES, 1, COPIES, 1),
                  ns: str = "") -> list[tuple[float, list[dict]]]:  # fmt: skip
    """Pause slices on ``where`` = (pid, tid) of the pauses, (pid, tid) of the copies;
    ``ns`` prefixes the async ids (a cluster's nodes number their pauses alike)."""
    ppid, ptid, cpid, ctid = where
    groups = []
    for p in pauses.itertuples(index=False) if len(pauses) else []:
        pid = f"{ns}p{p.pause_id}"
        end = p.ended_s if _ok(p.ended_s) else p.resident_s
        ev = _async(f"pause {p.tool_name}: {p.decision} -> {p.moved_to}", "pause", ppid, pid,
                    p.start_s, max(end, p.start_s),
                    {"traj_id": int(p.traj_id), "tokens": int(p.tokens), "outcome": p.outcome},
                    ptid)  # fmt: skip
        moved = p.bytes_offloaded_host + p.bytes_offloaded_nvme
        if moved and _ok(p.copy_out_done_s):
            ev[1:1] = _async("copy out", "pause", ppid, pid, p.start_s, p.copy_out_done_s,
                             tid=ptid)  # fmt: skip
            ev += _async(f"d2h {moved / 1e6:,.1f} MB", "copy", cpid, f"{ns}o{p.pause_id}",
                         p.start_s, p.copy_out_done_s, tid=ctid)  # fmt: skip
        back = p.bytes_reloaded_host + p.bytes_reloaded_nvme
        if back and _ok(p.reload_start_s, p.copy_in_done_s):
            i = 3 if moved and _ok(p.copy_out_done_s) else 1  # inside the pause slice
            ev[i:i] = _async("reload", "pause", ppid, pid, p.reload_start_s, p.copy_in_done_s,
                             tid=ptid)  # fmt: skip
            ev += _async(f"h2d {back / 1e6:,.1f} MB", "copy", cpid, f"{ns}i{p.pause_id}",
                         p.reload_start_s, p.copy_in_done_s, tid=ctid)  # fmt: skip
        groups.append((float(p.start_s) * US, ev))
    return groups


def _counter_groups(memory, pid: int = ENGINE) -> list[tuple[float, list[dict]]]:
    if not len(memory):
        return []
    t = memory.t_s.to_numpy(float) * US
    alloc = memory.allocated_bytes.to_numpy(float) / 1e9
    useful = memory.useful_bytes.to_numpy(float) / 1e9
    run, wait = memory.n_running.to_numpy(), memory.n_waiting.to_numpy()
    return [(float(t[i]), [
        {"ph": "C", "name": "KV GB", "pid": pid, "tid": 0, "ts": float(t[i]),
         "args": {"allocated": float(alloc[i]), "token states": float(useful[i])}},
        {"ph": "C", "name": "requests", "pid": pid, "tid": 0, "ts": float(t[i]),
         "args": {"running": int(run[i]), "waiting": int(wait[i])}},
    ]) for i in range(len(t))]  # fmt: skip


def node_pid(node: int) -> int:
    """A cluster node's process id in the trace (pid 0 is special to Perfetto)."""
    return node + 1


def _cluster_groups(data) -> tuple[list[dict], list[tuple[float, list[dict]]]]:
    """A cluster run: one process per node ("node N", pid ``node_pid(N)``, sorted by node)
    holding its steps, prefill, tool pauses, copies and counters."""
    head: list[dict] = []
    groups: list[tuple[float, list[dict]]] = []
    for node in node_ids(data):
        sub, pid = select_node(data, node), node_pid(node)
        head += _meta(pid, f"node {node}", {1: "steps", 2: "prefill", 3: "tool pauses",
                                            4: "copies"})  # fmt: skip
        head.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                     "args": {"sort_index": pid}})  # fmt: skip
        groups += (_step_groups(sub.steps, pid)
                   + _pause_groups(sub.pauses, (pid, 3, pid, 4), ns=f"n{node}.")
                   + _counter_groups(sub.memory, pid))  # fmt: skip
    return head, groups


def trace_events(run, max_events: int = MAX_EVENTS) -> dict:
    """The trace as a dict (``traceEvents``, ``otherData``) for a RunResult or run folder."""
    data = load_run(run)
    if is_cluster(data):
        head, groups = _cluster_groups(data)
    else:
        head = (_meta(ENGINE, "engine", {1: "steps", 2: "prefill"})
                + _meta(PAUSES, "pauses", {1: "tool pauses"})
                + _meta(COPIES, "copy engines", {1: "copies"}))  # fmt: skip
        groups = (_step_groups(data.steps) + _pause_groups(data.pauses)
                  + _counter_groups(data.memory))  # fmt: skip
    order = np.argsort(np.array([g[0] for g in groups]), kind="stable") if groups else []
    events, truncated_at = list(head), None
    for i in order:
        ts, ev = groups[i]
        if len(events) + len(ev) > max_events:
            truncated_at = ts / US
            break
        events += ev
    other = {"scenario": data.summary.get("scenario"), "max_events": max_events,
             "truncated_at_s": truncated_at}  # fmt: skip
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def write_trace(run, folder: str | Path, max_events: int = MAX_EVENTS) -> Path:
    """Write ``folder/trace.json`` (whole: a temporary renamed over it)."""
    path = Path(folder) / TRACE_FILE
    tmp = path.with_name(f".{TRACE_FILE}.partial")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(trace_events(run, max_events), f, separators=(",", ":"))
    os.replace(tmp, path)
    return path
