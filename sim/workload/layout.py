"""The harness layout of the engine's agent prompts (rule 3.8): scenario key ``workload.harness``.

Responsibility: turn a line's context (the kind's stable zones, then the task, replies and
observations, as ``sim.workload.agent`` keeps it) into the spans of the call it sends,
with the four rule 3.8 perturbations laid out by ``sim.prefix.prompt``'s rules (the one
zone builder of kvsim, also behind ``build_trajectory``):

1. ``per_call_field_tokens`` (a timestamp, a call id): new content on every call, at the
   ``front`` (before the system prompt) or at the ``end`` (after the new input);
2. ``tool_change_every``: every k calls the next tool definition changes version;
3. ``unstable_tool_order``: the tool definitions are serialized in a random order per call;
4. ``compact_every``: every k calls the history (task included) becomes one summary of
   ``summary_tokens``, keeping the last ``2 x recent_turns + 1`` items.

The tool zone is the kind's tool definitions (``tool_tokens``, function docs), or, for a
kind whose shared prefix holds them (``coding_agent``, ``agent_trace``), that prefix: the
last non-empty stable zone, split into ``tool_definitions`` definitions of equal size.
Threshold compaction near the window is ``workload.context_limit``, not a knob here.

A call's prompt extends the KV its line holds only when its leading zones (the per-call
field at the front, the system prompt, the tools) equal those of the call that filled the
KV and that call put no field at the end; otherwise the line moves to a new sequence
(``sim.workload.agent``) and a prefix cache serves what it can.

Invariant: with every knob off (the default) ``render`` is never called: a call's prompt is
its context, exactly as without this module; tool ids are ``"<zone id>:<i>:v<version>"``,
shared by every trajectory at that version; a per-call field and a summary are new content.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from pydantic import ConfigDict, Field

from sim.config_model import ConfigModel
from sim.prefix.prompt import HarnessLayout, call_zones, compact_items, tool_zone
from sim.prefix.spans import ContentId, Segments, concat, n_tokens, segments, slice_tokens
from sim.workload.distributions import MAX_TOKENS

#: the most calls between two perturbations, and the most tool definitions of a zone
MAX_EVERY, MAX_TOOL_DEFINITIONS = 100_000, 1_000


class HarnessConfig(ConfigModel):
    """Scenario key ``workload.harness`` (every agent kind): how the harness lays out each
    call's prompt. Names as ``sim.prefix.prompt.AgentPromptSpec`` names them."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    per_call_field_tokens: int = Field(0, ge=0, le=MAX_TOKENS)  # 0 = no per-call field
    per_call_field_at: Literal["front", "end"] = "front"
    tool_change_every: int = Field(0, ge=0, le=MAX_EVERY)  # 0 = tools never change
    unstable_tool_order: bool = False
    compact_every: int = Field(0, ge=0, le=MAX_EVERY)  # 0 = no periodic compaction
    recent_turns: int = Field(2, ge=0, le=MAX_EVERY)  # replies/results a compaction keeps
    summary_tokens: int = Field(512, ge=1, le=MAX_TOKENS)
    # the tool zone as this many definitions of equal size (tool_change_every, order)
    tool_definitions: int = Field(8, ge=1, le=MAX_TOOL_DEFINITIONS)

    def layout(self) -> HarnessLayout:
        return HarnessLayout(
            self.per_call_field_tokens,
            self.per_call_field_at,
            self.tool_change_every,
            self.unstable_tool_order,
            self.compact_every,
            self.recent_turns,
            self.summary_tokens,
        )


@dataclass(frozen=True, slots=True)
class Rendered:
    """One call's prompt and what decides whether it extends the line's KV."""

    prompt: Segments
    lead: Segments  # the leading zones: a field at the front, the system prompt, the tools
    tail_field: bool  # the prompt ends with a per-call field (absent from the next context)


class PromptBuilder:
    """Lays out the calls of one workload's trajectories (see the module docstring)."""

    def __init__(self, config: HarnessConfig, stable: tuple[tuple[ContentId, int], ...]) -> None:
        self.layout = config.layout()
        self.stable = tuple((cid, n) for cid, n in stable if n > 0)
        self.stable_tokens = sum(n for _, n in self.stable)
        #: the index of the tool zone in ``stable`` (the last one), None when there is none
        self.tools_at = len(self.stable) - 1 if self.stable else None
        if self.tools_at is not None:
            n = self.stable[self.tools_at][1]
            k = min(config.tool_definitions, n)
            self.tool_tokens = tuple(n // k + (i < n % k) for i in range(k))

    @property
    def field_tokens(self) -> int:
        return self.layout.per_call_field_tokens

    def render(
        self, context: Segments, call: int, field_id: ContentId | None, rng: random.Random | None
    ) -> Rendered:
        """Call number ``call`` (0 = the first of the line and its ancestors) of ``context``."""
        lay = self.layout
        lead_zones = []
        for i, (cid, n) in enumerate(self.stable):
            if i == self.tools_at and lay.perturbs_tools:
                lead_zones.append(("tools", tool_zone(cid, self.tool_tokens, lay, call, rng)))
            else:
                lead_zones.append(("system", [(cid, n)]))
        body = slice_tokens(context, self.stable_tokens, n_tokens(context))
        zones = call_zones(lay, [*lead_zones, ("history", body)], field_id)
        at = next(i for i, (z, _) in enumerate(zones) if z == "history")
        lead = segments([sp for _, spans in zones[:at] for sp in spans])
        tail = segments([sp for _, spans in zones[at:] for sp in spans])
        return Rendered(concat(lead, tail), lead, at < len(zones) - 1)

    def compact(self, context: Segments, call: int, summary_id: ContentId) -> Segments | None:
        """The context after the periodic compaction due at ``call``; None when none is
        due or the history is too short to shrink."""
        if not self.layout.compacts_at(call):
            return None
        total = n_tokens(context)
        history = list(slice_tokens(context, self.stable_tokens, total))
        keep = self.layout.keep_items
        if len(history) <= keep:
            return None
        summary = (summary_id, 0, self.layout.summary_tokens)
        kept = compact_items(history, keep, summary)
        return segments([*slice_tokens(context, 0, self.stable_tokens), *kept])
