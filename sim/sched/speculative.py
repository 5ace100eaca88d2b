"""Speculative decoding as vLLM V1 schedules it: the scenario key and the per-step arithmetic.

Responsibility: the ``speculative`` scenario section (``SpeculativeConfig``) and the rules
the scheduler applies to a request's decode when it is on (docs/engine.md, "Speculative
decoding"):

* a decode becomes a *verify*: the target model runs on the last sampled token plus ``d``
  draft tokens (``d = num_speculative_tokens``, fewer only where the context window or the
  step's token budget cuts it: vLLM's ``max_model_len - 1 - num_computed_tokens`` cap);
  the ``1 + d`` tokens count against the token budget;
* its KV slots: ``1 + d`` plus ``lookahead_tokens`` (vLLM's ``num_lookahead_tokens``: ``k``
  for a drafter that writes its own KV ahead, EAGLE / MTP / draft model; 0 for ngram);
  slots of rejected drafts stay allocated and are overwritten by the next step, as in
  vLLM (``num_computed_tokens`` goes back by the rejected count, the blocks stay);
* accepted tokens: the *expected value*, no random draw. With per-position acceptance
  ``a`` a draft at position ``i`` survives only if every draft before it did
  (probability ``a**i``), so a verify of ``d`` drafts accepts ``E(d) = sum_{i=1..d} a**i``
  drafts on average, plus the bonus token the target samples. A request carries the
  fraction it has not taken yet (``Request.spec_credit``) and takes the whole part each
  step (``accept``): integer tokens per step, the exact expected rate over a request, and
  no random stream at all, so a run is deterministic and a seed changes nothing here.

Invariant: ``0 <= accepted <= d`` and ``0 <= credit < 1`` after every ``accept``; a
scenario without the section runs exactly as before (nothing here is consulted).
"""

from __future__ import annotations

from pydantic import ConfigDict, Field, model_validator

from sim.config_model import ConfigModel
from sim.sizing.speculative import (
    DRAFTER_METHODS,
    MAX_SPECULATIVE_TOKENS,
    METHODS,
    SpeculativeMethod,
    lookahead_tokens,
)

#: whole-part tolerance of the credit (a float sum such as 0.8 + 0.64 + 0.512 may land a
#: hair under an integer it equals in exact arithmetic)
_EPS = 1e-9


class SpeculativeConfig(ConfigModel):
    """Scenario key ``speculative``: speculative decoding (absent: off)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    method: SpeculativeMethod  # one of ``METHODS`` (``sim.sizing.speculative``)
    num_speculative_tokens: int = Field(ge=1, le=MAX_SPECULATIVE_TOKENS)  # k: drafts per step
    # per-position acceptance a: draft i is accepted with probability a**i
    acceptance_rate: float = Field(ge=0.0, le=1.0)
    draft_model: str | None = None  # a model profile name, for method draft_model only

    @model_validator(mode="after")
    def _draft_model_named(self) -> SpeculativeConfig:
        if self.method == "draft_model" and not self.draft_model:
            raise ValueError("method draft_model needs draft_model: <a model profile name>")
        if self.method != "draft_model" and self.draft_model is not None:
            raise ValueError(f"draft_model is only for method draft_model, not {self.method}")
        return self

    @property
    def lookahead_tokens(self) -> int:
        """Slots reserved per request per step beyond the verified tokens (vLLM V1
        ``Scheduler.num_lookahead_tokens``: ``k`` for a drafter with its own KV).

        Checked against vLLM's ``Scheduler.__init__`` (``vllm/v1/core/sched/scheduler.py``):
        ``num_lookahead_tokens = num_spec_tokens`` when ``speculative_config.use_eagle()``
        (EAGLE, EAGLE-3, MTP) or ``uses_draft_model()``; 0 for ngram. So a draft model
        reserves the same ``k`` as EAGLE / MTP."""
        return lookahead_tokens(self.method, self.num_speculative_tokens)

    @property
    def drafter_steps(self) -> int:
        """Sequential drafter forward passes per engine step (ngram drafts on the CPU)."""
        return self.num_speculative_tokens if self.method in DRAFTER_METHODS else 0

    def expected_accepted(self, drafts: int) -> float:
        """``E(d) = sum_{i=1..d} a**i``: drafts a verify of ``drafts`` accepts on average."""
        a, total, term = self.acceptance_rate, 0.0, 1.0
        for _ in range(drafts):
            term *= a
            total += term
        return total

    def expected_tokens_per_step(self) -> float:
        """Tokens one verify of ``k`` drafts emits on average: ``1 + E(k)``."""
        return 1.0 + self.expected_accepted(self.num_speculative_tokens)


def accept(credit: float, expected: float, drafts: int) -> tuple[int, float]:
    """(drafts accepted this step, credit carried): the whole part of ``credit +
    expected``, at most ``drafts``."""
    total = credit + expected
    taken = min(int(total + _EPS), drafts)
    return taken, max(0.0, total - taken)


__all__ = ["DRAFTER_METHODS", "METHODS", "SpeculativeConfig", "accept"]
