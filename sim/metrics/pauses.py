"""pauses.parquet and its summary aggregates: one row per tool-call pause.

Responsibility: the pause table's schema (``PAUSE_COLUMNS``, beside the other tables'
schemas), turning the engine's pause records into rows, and the ``summary.json``
aggregates of the pauses (counts by decision and outcome, resume latency and stall, HBM
byte-seconds held, recompute FLOPs, bytes moved), each pause's cost beside the pause
oracle's (``sim.policy.oracle``: seconds = HBM pool-seconds + recompute + exposed reload)
and the agent hints given and refused.

Invariant: one row per pause, in pause-id order, each with its ``outcome`` (how it ended,
``open`` if it had not when the run ended) and ``ended_s``; times are simulated seconds
(NaN = did not happen), bytes are bytes, ``paused_hbm_gb_s`` is GB (10^9 B) x seconds of KV held in
HBM while the pause lasted (F29); a pause still open at the end has NaN costs and is left
out of the cost sums (``pause_cost_priced`` counts the priced ones). Every column has the
type ``PAUSE_DTYPES`` declares (= ``sim.metrics.schema.PAUSE_TABLE``'s, a test checks);
an empty table's columns are untyped (object), as pandas made them from no rows.

The table is numpy ``Columns`` (``pause_table``), its summary computed with numpy
(``pause_summary`` also takes a DataFrame: a cluster's); this module does not import
pandas (``pause_frame`` does, when called).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from sim.metrics.stats import describe
from sim.metrics.table import Columns, to_frame
from sim.policy import oracle_cost, realised_cost
from sim.units import GB

if TYPE_CHECKING:
    import pandas as pd

NAN = math.nan

PAUSE_COLUMNS = [
    "pause_id", "traj_id", "seq_id", "req_id", "turn", "tool_name", "tokens", "state_bytes",
    "decision", "reason", "moved_to", "note", "predicted_wait_s", "actual_wait_s", "start_s",
    "copy_out_done_s", "blocks_freed_s", "tool_return_s", "reload_start_s", "copy_in_done_s",
    "resident_s", "first_token_s", "resume_stall_s", "resume_latency_s", "paused_hbm_gb_s",
    "bytes_offloaded_host", "bytes_offloaded_nvme", "bytes_reloaded_host",
    "bytes_reloaded_nvme", "recompute_tokens", "recompute_flops", "recompute_s", "outcome",
    "ended_s", "hint", "hint_refused", "oracle_action", "oracle_cost_s", "policy_cost_s",
]  # fmt: skip
_I, _F, _S = np.int64, np.float64, object
#: each column's dtype, in ``PAUSE_COLUMNS`` order (text: Python strings)
PAUSE_DTYPES = (
    _I, _I, _S, _I, _I, _S, _I, _F, _S, _S, _S, _S, _F, _F, _F, _F, _F, _F, _F, _F, _F, _F,
    _F, _F, _F, _F, _F, _F, _F, _I, _F, _F, _S, _F, _S, _S, _S, _F, _F,
)  # fmt: skip
#: ``outcome`` values: how a pause ended ("open" = still open when the run ended, cut at
#: its ``duration_s``; "refused": its next turn was refused, at submission, at admission
#: or by a cluster's router; "cancelled": its sequence, or its next turn before that
#: turn's context was resident again, was cancelled)
PAUSE_OUTCOMES = (
    "resumed", "reloaded", "recomputed", "released", "cancelled", "open", "refused"
)


def pause_row(p: Any, held_byte_s: float, recompute_flops: float) -> tuple:
    """A pause record's row, in ``PAUSE_COLUMNS`` order (``recompute_flops``: for its
    recomputed tokens; ``p.recompute_s``: their seconds, both the run's step pricer's price
    of that prefill alone, so ``resume_stall_s - recompute_s`` of a recomputed pause is the
    time its turn waited or shared its steps)."""
    ret = p.tool_return_s
    first = NAN
    if p.next_req is not None and p.next_req.first_token_s is not None:
        first = p.next_req.first_token_s
    stall = p.resident_s - ret
    host = p.pool is not None and p.pool.tier.name == "HOST"
    recompute = p.moved_to == "recompute"
    return (
        p.pause_id, p.req.traj_id, str(p.seq), p.req.req_id, p.req.turn, p.req.tool_name,
        p.tokens, p.bytes_total, p.action, p.reason, p.moved_to, p.note,
        NAN if p.predicted_wait_s is None else p.predicted_wait_s, ret - p.start_s, p.start_s,
        p.copy_out_done_s, p.freed_s, ret, p.reload_start_s, p.copy_in_done_s, p.resident_s,
        first, stall, first - ret, held_byte_s / GB,
        p.bytes_out if host else 0.0, 0.0 if host else p.bytes_out,
        p.bytes_in if host else 0.0, 0.0 if host else p.bytes_in,
        p.recompute_tokens if recompute else 0,
        recompute_flops if recompute else 0.0,
        p.recompute_s if recompute else 0.0,
        p.outcome or "open",
        p.resident_s if math.isnan(p.ended_s) else p.ended_s,
        _hint_text(p), p.hint_refused,
        *pause_costs(p, held_byte_s, recompute_flops),
    )  # fmt: skip


def _hint_text(p: Any) -> str:
    hint = None if p.facts is None else p.facts.hint
    return "" if hint is None else hint.describe() or "empty"


#: the outcomes of a pause whose next turn never ran (refused, cancelled) or never came
#: (released, cancelled before its tool returned): the oracle prices them never resumed
NOT_RESUMED = ("released", "cancelled", "refused")


def pause_costs(p: Any, held_byte_s: float, recompute_flops: float) -> tuple[str, float, float]:
    """(the oracle's action, its cost, the policy's realised cost), seconds; ("", NaN, NaN)
    for a pause still open (its true wait is unknown). A pause whose next turn ran is
    priced resumed, with the tool's wait; one that ended without its next turn running
    (``NOT_RESUMED``: the workload let the sequence go or cancelled it, or the turn was
    refused, also after its tool returned) is priced never resumed, over the time it
    lasted (``ended_s``): its context was never needed again, so the oracle drops it at
    once, for free (before 2026-12-05 a refused or cancelled pause whose tool had
    returned was priced resumed: the oracle paid for a resume that never ran)."""
    if p.outcome in NOT_RESUMED and math.isfinite(p.ended_s):
        wait, resumed = p.ended_s - p.start_s, False
    elif math.isfinite(p.tool_return_s):
        wait, resumed = p.tool_return_s - p.start_s, True
    elif math.isfinite(p.ended_s):
        wait, resumed = p.ended_s - p.start_s, False
    else:
        return "", NAN, NAN
    if p.facts is None:
        return "", NAN, NAN
    action, best = oracle_cost(p.facts, max(0.0, wait), resumed)
    stall = p.resident_s - _reload_from(p) if _waited_for_reload(p) else 0.0
    spent = realised_cost(p.facts, held_byte_s, recompute_flops, stall, p.recompute_s)
    return action, best.total_s, spent.total_s


#: the states a pause ends in once its context was copied back for its turn (a reload at
#: or after its tool's return): ``sim.engine.pauses.state.PauseState`` RESIDENT, STREAMING
_RELOAD_ENDS = ("resident", "streaming")


def _waited_for_reload(p: Any) -> bool:
    """Its next turn waited for a reload, the stall ``pause_costs`` prices: outcome
    ``reloaded``, or ``refused`` / ``cancelled`` once its context was copied back (or while
    it streamed in) for that turn, a pause that would otherwise have ended reloaded (its
    refusal or cancellation changes the outcome, not the wait: before 2026-12-05 such a
    pause read ``reloaded``)."""
    if p.outcome == "reloaded":
        return True
    state = getattr(getattr(p, "state", None), "value", None)
    ended = p.outcome in ("refused", "cancelled")
    return ended and p.moved_to != "recompute" and state in _RELOAD_ENDS


def _reload_from(p: Any) -> float:
    """Where a reload's exposed stall starts: the tool's return, or, when the engine took
    the next turn in only at a later step boundary (busy with a step), then: the wait for
    that boundary is every policy's (a held context's turn waits for it too), not the
    reload's."""
    taken_in = getattr(p, "taken_in_s", NAN)
    return p.tool_return_s if not taken_in > p.tool_return_s else taken_in


def pause_table(records: Sequence[tuple[Any, float, float]]) -> Columns:
    """pauses.parquet from the engine's records: (pause, held byte-seconds, recompute
    FLOPs) each (``PauseLifecycle.records``)."""
    if not records:
        return {name: np.empty(0, dtype=object) for name in PAUSE_COLUMNS}
    columns = zip(*(pause_row(*r) for r in records), strict=True)
    return {
        name: np.array(values, dtype=dtype)
        for name, dtype, values in zip(PAUSE_COLUMNS, PAUSE_DTYPES, columns, strict=True)
    }


def pause_frame(records: Sequence[tuple[Any, float, float]]) -> pd.DataFrame:
    """``pause_table(records)`` as a DataFrame (imports pandas)."""
    return to_frame(pause_table(records))


def _floats(table: Any, name: str) -> np.ndarray:
    """A number column of ``table`` (``Columns`` or a DataFrame) as float64."""
    return np.asarray(table[name], dtype=np.float64)


def _texts(table: Any, name: str) -> np.ndarray:
    """A text column of ``table`` (``Columns`` or a DataFrame) as Python objects."""
    return np.asarray(table[name], dtype=object)


def nansum(values: np.ndarray) -> float:
    """The sum of ``values`` with NaN as 0: bit for bit pandas' ``Series.sum()`` (NaN set
    to 0, then numpy's pairwise sum over the same array)."""
    v = np.asarray(values, dtype=np.float64)
    return float(np.where(np.isnan(v), 0.0, v).sum())


def _counts(values: np.ndarray) -> dict[str, int]:
    """How often each value occurs, by value (``value_counts().sort_index()``)."""
    keys, counts = np.unique(values, return_counts=True)
    return {k: int(n) for k, n in zip(keys.tolist(), counts.tolist(), strict=True)}


#: the words every note of a pause whose held KV memory pressure dropped has (the engine's
#: ``PauseLifecycle``: at tool return, after a prefetch, or while its turn waited)
DROPPED_NOTE = "dropped under memory pressure"


def _dropped(notes: np.ndarray) -> np.ndarray:
    """Which notes say memory pressure dropped the pause's held KV (``DROPPED_NOTE``)."""
    return np.array([DROPPED_NOTE in str(n) for n in notes], dtype=bool)


def pause_summary(frame: Any) -> dict:
    """The summary.json aggregates of the pauses (``frame``: ``pause_table``'s
    ``Columns``, or a DataFrame of its columns)."""
    outcome = _texts(frame, "outcome")
    moved = (_floats(frame, "bytes_offloaded_host") + _floats(frame, "bytes_offloaded_nvme"),
             _floats(frame, "bytes_reloaded_host") + _floats(frame, "bytes_reloaded_nvme"))  # fmt: skip
    return {
        "pause_count": len(outcome),
        "pause_endings": {o: int((outcome == o).sum()) for o in PAUSE_OUTCOMES},
        "pauses_recomputed_after_drop": int(
            ((outcome == "recomputed") & _dropped(_texts(frame, "note"))).sum()
        ),
        "resume_latency_s": describe(_floats(frame, "resume_latency_s")),
        "resume_stall_s": describe(_floats(frame, "resume_stall_s")),
        "paused_hbm_gb_s": nansum(_floats(frame, "paused_hbm_gb_s")),
        "recompute_flops": nansum(_floats(frame, "recompute_flops")),
        "bytes_offloaded": round(nansum(moved[0])),
        "bytes_reloaded": round(nansum(moved[1])),
        "pause_decisions": _counts(_texts(frame, "decision")),
        "pause_outcomes": _counts(_texts(frame, "moved_to")),
        **cost_summary(frame),
    }


def cost_summary(frame: Any) -> dict:
    """The pause costs beside the oracle's, and the hints given and refused (``frame`` as
    in ``pause_summary``)."""
    oracle_s, policy_s = _floats(frame, "oracle_cost_s"), _floats(frame, "policy_cost_s")
    priced = ~np.isnan(oracle_s) & ~np.isnan(policy_s)
    policy = nansum(policy_s[priced])
    oracle = nansum(oracle_s[priced])
    return {
        "pause_cost_policy_s": policy,
        "pause_cost_oracle_s": oracle,
        "pause_cost_gap_ratio": policy / oracle if oracle > 0 else None,
        "pause_cost_priced": int(priced.sum()),
        "hints_given": int((_texts(frame, "hint") != "").sum()),
        "hints_refused": int((_texts(frame, "hint_refused") != "").sum()),
    }
