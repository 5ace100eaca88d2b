"""A run's ``accuracy`` section (``sim.cost.accuracy``), after a run or before one.

Invariant: reads only the resolved scenario, the cost model the run priced its steps with
and its steps table; adds the top-level ``accuracy`` object (a cluster's is its least
trusted node's), nothing else.
"""

from __future__ import annotations

from typing import Any

from sim.cost.accuracy import BASES, accuracy_section


def run_accuracy(resolved, cost, steps=None, share_steps=None) -> dict[str, Any]:
    """The ``accuracy`` object of a run whose engine priced its steps with ``cost``: its
    largest step from its ``steps`` table and the share of step time its calibration does
    not measure from ``share_steps`` (default: ``steps``; a cluster's nodes priced by the
    same calibration pool theirs), or before a run the scheduler's token budget (and no
    share)."""
    sc = resolved.scenario
    if steps is not None:  # ``Columns`` or a DataFrame: read by column
        batch = steps["batch_tokens"]
        largest = int(batch.max()) if len(batch) else None
    else:
        largest = getattr(sc.scheduler, "max_num_batched_tokens", None)
    return accuracy_section(
        getattr(cost, "calibration", None),
        accelerator=resolved.accelerator.name,
        model=resolved.model,
        tp=sc.hardware.tp,
        max_step_tokens=largest,
        steps=steps if share_steps is None else share_steps,
    )


def _least_trusted(sections: list[dict[str, Any]]) -> dict[str, Any]:
    """The weakest evidence (roofline before a table before a calibration), then the
    largest median error: a cluster's answer is as trustworthy as its weakest node."""
    return max(sections, key=lambda s: (BASES.index(s["basis"]), s["median_rel_error"] or 0.0))


def add_accuracy(summary: dict[str, Any], engines: list[tuple[Any, Any, Any]]) -> None:
    """Put ``accuracy`` into ``summary``: the least trusted of the ``(resolved, cost, steps
    table)`` engines (one for a run, one per node of a cluster). Its out-of-domain warning
    (``sim.cost.accuracy.accuracy_warning``) is ``kvsim run``'s to print: ``warnings``
    stays the list of what makes a run pathological. A cluster's ``not_measured`` shares
    are over the steps of every node priced by the chosen node's calibration."""
    sections = [run_accuracy(r, c, s) for r, c, s in engines]
    chosen = _least_trusted(sections)
    same = [e for e, s in zip(engines, sections, strict=True)
            if s["source"] == chosen["source"] and s["basis"] == chosen["basis"]]  # fmt: skip
    if len(same) > 1 and chosen["not_measured"]:
        import pandas as pd

        r, c, s = engines[sections.index(chosen)]
        chosen = run_accuracy(r, c, s, share_steps=pd.concat([e[2] for e in same]))
    summary["accuracy"] = chosen
