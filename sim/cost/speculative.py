"""The drafter's time in a speculative-decoding step, through the one pricing interface.

Responsibility: price the ``k`` sequential drafter forward passes that follow a verify
step (EAGLE head, MTP layer or draft model; ngram drafts on the CPU and costs nothing
here): a run of ``k`` decode steps of the verified sequences on the drafter's own
``StepPricer`` (``price_run``), summed, with no host overhead of their own (they are GPU
work inside the engine step the host already paid for). The verify itself is the target
model's step, priced by the target's pricer like any other (a chunk of ``1 + d`` tokens
per sequence, ``sim.sched.plan``).

``drafter_profile`` makes the drafter's model: a draft model is its own profile; an EAGLE
head or an MTP layer is one decoder layer of the target's geometry (its attention shape,
a ``1 / num_layers`` share of the target's weights; the LM head it shares with the target
is not streamed again, a simplification stated in docs/engine.md).

Invariant: pure; ``draft_s`` is 0 without verified sequences or without drafter steps.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sim.cost.pricer import StepWork
from sim.profiles.schema import ModelProfile


def drafter_profile(target: ModelProfile, method: str, draft: ModelProfile | None) -> ModelProfile:
    """The model the drafter runs: ``draft`` for a draft model, else one layer of the
    target (EAGLE / MTP) with every layer of the plain attention shape."""
    if method == "draft_model":
        if draft is None:
            raise ValueError("method draft_model needs the draft model's profile")
        return draft
    share = 1.0 / target.num_layers
    update: dict[str, Any] = {
        "num_layers": 1,
        "params_total": target.params_total * share,
        "layer_groups": None,
        "layer_pattern": None,
        "sliding_window": None,
    }
    if target.params_active is not None:
        update["params_active"] = target.params_active * share
    return target.model_copy(update=update)


class DraftPricer:
    """Seconds of the drafter's ``steps`` passes over a step's verified sequences."""

    def __init__(self, pricer: Any, steps: int) -> None:
        self.pricer = pricer  # a StepPricer of the drafter's model (no step overhead)
        self.steps = steps  # sequential drafter passes per engine step (k; 0 for ngram)

    def draft_s(self, n_seqs: int, history_tokens: int) -> float:
        """The drafter's seconds for ``n_seqs`` sequences holding ``history_tokens``."""
        if n_seqs == 0 or self.steps == 0:
            return 0.0
        work = StepWork(n_decode=n_seqs, decode_history_tokens=history_tokens)
        return float(self.pricer.price_run(work, self.steps).sum())

    def with_draft(self, cost: Any, n_seqs: int, history_tokens: int) -> Any:
        """``cost`` (a ``StepCost``) with the drafter's seconds added to its total and
        named in its ``extra`` (``draft_s``)."""
        s = self.draft_s(n_seqs, history_tokens)
        if s == 0.0:
            return cost
        return replace(cost, total_s=cost.total_s + s, extra={**cost.extra, "draft_s": s})


__all__ = ["DraftPricer", "drafter_profile"]
