"""The error band of a capacity answer: the same search at step times -/+ the cost model's
error (``kvsim capacity``; docs/capacity_planning.md, "Error band").

The cost model's error is the run's ``accuracy`` (``sim.cost.accuracy``): the median
held-out relative error of its calibration, or the median difference of its end-to-end
validation table. The search runs twice more with ``cost.step_time_scale`` at ``1 - e``
(steps faster: the optimistic answer) and ``1 + e`` (slower: the pessimistic one), same
seeds, SLOs and options, so the band shows how far the answer moves if every step is off
by the typical error; the replication interval of each is kept beside it. Unvalidated step
times (roofline) have no error to band by: said so, nothing more is run.

Invariant: adds runs, never changes the main answer; writes nothing (no ``out``).
"""

from __future__ import annotations

from typing import Any

#: the scenario key the band scales (sim.cost.config.CostConfig.step_time_scale)
SCALE_KEY = "cost.step_time_scale"


def _answer(result, scale: float) -> dict[str, Any]:
    c = result.capacity
    return {"step_time_scale": scale, "value": c["value"], "ci95_low": c["ci95_low"],
            "ci95_high": c["ci95_high"], "converged": c["converged"]}  # fmt: skip


def capacity_error_band(find, scenario, slos, *, sets: dict[str, Any], **options) -> dict:
    """``{"accuracy", "step_time_error", "faster", "slower", "note"}``: ``find`` is
    ``sim.sweep.find_capacity`` (called with the main search's ``options``, without
    ``out``); ``faster`` / ``slower`` are None when there is no error to band by."""
    from sim.run.runner import scenario_accuracy
    from sim.sweep.capacity import one_node

    # a node search runs a one-node cluster of a scenario without ``cluster:`` (the sets
    # may name its router): its accuracy is that cluster's
    acc_sets = one_node(scenario, sets) if options.get("search") == "nodes" else sets
    acc = scenario_accuracy(scenario, **acc_sets)
    err = acc["median_rel_error"]
    band: dict[str, Any] = {"accuracy": acc, "step_time_error": err, "faster": None,
                            "slower": None, "note": ""}  # fmt: skip
    if not err or err >= 1.0:
        band["note"] = f"no error band: {acc['basis']} ({acc['detail']})"
        return band
    options = {**options, "out": None}
    for name, scale in (("faster", 1.0 - err), ("slower", 1.0 + err)):
        result = find(scenario, slos, sets={**sets, SCALE_KEY: scale}, **options)
        band[name] = _answer(result, scale)
    unmeasured = ", ".join(acc.get("not_measured") or {})  # named before a run, no share
    band["note"] = (f"step times -/+ {err:.1%} ({acc['basis']}, {acc['source']}; worst "
                    f"held-out {acc['worst_rel_error']:+.1%}"
                    + (f"; not measured, so outside the band: {unmeasured}" if unmeasured else "")
                    + ")")  # fmt: skip
    return band
