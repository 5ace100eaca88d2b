"""What an agent harness does when its next call would not fit the model's context window.

Real harnesses never send a prompt the server would refuse: Claude Code and Codex CLI
compact the conversation automatically when it nears the window (a summary replaces the
history), SWE-agent ends the run (``exit_context``), sliding-window harnesses (OpenHands'
conversation-window condenser, Aider) drop the oldest messages. ``workload.context_limit``
chooses one of them for every agent kind:

- ``compact``: when the next prompt would pass ``threshold`` x window, everything after the
  stable zones (system prompt, tool definitions), the task included, becomes one summary of
  ``ratio`` x its size; the summary is new content, so that part is lost for prefix reuse
  (rule 3.8 (4)). No LLM call is simulated for the summary itself.
- ``stop``: the trajectory ends with status ``context_exhausted``.
- ``truncate_oldest``: the oldest history items after the task are dropped until the items
  after the task hold at most ``ratio`` x the history's size (the task and the newest item
  always stay; when nothing can go, nothing changes).

If the reduced prompt still leaves no room for one output token in the window, the
trajectory ends with status ``context_exhausted``. The first call of a trajectory is sent as
it is: a task that alone exceeds the window is rejected by the server
(``rejected_too_long``), as a real API does.

Invariant: the stable zones are never changed; a context this module returns plus the new
input is shorter than the window; the compaction itself is ``sim.prefix.prompt``'s
``compact_items`` / ``truncate_items`` (one mechanism for the whole project).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from pydantic import ConfigDict, Field

from sim.config_model import ConfigModel
from sim.prefix.prompt import compact_items, truncate_items
from sim.prefix.spans import ContentId, Segments, n_tokens, segments, slice_tokens


class ContextLimit(ConfigModel):
    """Scenario key ``workload.context_limit`` (every agent kind)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    # compact (Claude Code / Codex CLI auto-compaction), stop (SWE-agent's exit_context),
    # truncate_oldest (sliding-window harnesses)
    policy: Literal["compact", "stop", "truncate_oldest"] = "compact"
    # act when the next prompt passes this share of the window (auto-compaction fires at
    # ~90-95 % of the window in the harnesses above)
    threshold: float = Field(0.9, gt=0, le=1)
    # the reduced history's size as a share of the history it replaces
    ratio: float = Field(0.2, gt=0, lt=1)


@dataclass(frozen=True, slots=True)
class Fitted:
    """The harness's answer for the next call."""

    context: Segments | None  # the context to append the new input to; None = exhausted
    reduced: bool  # the history was compacted or truncated (a new KV sequence is needed)


def fit_window(
    context: Segments,
    stable_tokens: int,
    input_tokens: int,
    window: int | None,
    limit: ContextLimit,
    summary_id: ContentId,
    total_tokens: int | None = None,
) -> Fitted:
    """Apply ``limit`` before a call whose prompt is ``context`` + ``input_tokens``.

    ``stable_tokens`` are the leading tokens (system prompt, tool definitions) a harness
    never rewrites; ``summary_id`` names the summary's content if one is made;
    ``total_tokens``, when the caller knows it, is ``n_tokens(context)`` (a pass over
    every segment saved). A context that fits comes back as the same tuple.
    """
    total = n_tokens(context) if total_tokens is None else total_tokens
    if window is None or total + input_tokens <= limit.threshold * window:
        return Fitted(context, False)
    if limit.policy == "stop":
        return Fitted(None, False)
    stable = slice_tokens(context, 0, stable_tokens)
    history = list(slice_tokens(context, stable_tokens, total))
    history_tokens = total - stable_tokens
    target = max(1, math.ceil(limit.ratio * history_tokens))
    if limit.policy == "compact":
        kept = compact_items(history, 0, (summary_id, 0, target))
    else:
        kept = truncate_items(history, target, keep_first=1)
    reduced = segments([*stable, *kept])
    n_reduced = n_tokens(reduced)
    if n_reduced == total:  # nothing could go (truncate: only the task and the newest item)
        reduced = context
    if n_reduced + input_tokens + 1 > window:
        return Fitted(None, n_reduced < total)
    return Fitted(reduced, n_reduced < total)
