"""Agent prompts as ordered zones, with the harness perturbations that break prefix reuse.

Responsibility: turn a harness description into the span content of each LLM call of a
trajectory (rule 3.8): ``[system][tools][history][recent observations][new input]``, plus
the four perturbations (1) a per-call field (timestamp, call id), (2) a tool list that
changes, (3) nondeterministic serialization (tool definitions in a random order per call),
(4) compaction (history rewritten into a summary). Each zone's content ids carry a
priority for the ``priority`` eviction strategy (system above tools above history ...).

Content ids: ``"sys"`` and ``"tool:<i>:v<version>"`` are shared by every trajectory (a
fleet with one system prompt); the rest are private, ``"<trajectory>:<kind>:<turn>"``.

The layout rules are the one harness builder of kvsim: ``HarnessLayout`` holds the
perturbation knobs alone, ``tool_versions`` / ``tool_zone`` / ``call_zones`` lay out one
call's zones and ``compact_items`` compacts; this module's ``build_trajectory`` and the
engine's agent kinds (``sim.workload.layout``, scenario key ``workload.harness``) both
build their prompts with them.

Invariant: the same spec, trajectory name and seed give the same prompts in every process
(``random.Random`` seeded from a string is deterministic); no tokens are materialised.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from sim.prefix.spans import ContentId, Segments, n_tokens, segments

T = TypeVar("T", bound=tuple)

ZONES = ("per_call", "system", "tools", "history", "recent", "input")

#: higher = kept longer by the ``priority`` eviction strategy (editable per spec)
DEFAULT_ZONE_PRIORITY: dict[str, float] = {
    "system": 5,
    "tools": 4,
    "history": 3,
    "recent": 2,
    "input": 1,
    "per_call": 0,
}


#: where a per-call field goes: "front" (before the system prompt: breaks every reuse) or
#: "end" (after the new input: the layout fix)
FIELD_PLACES = ("front", "end")


@dataclass(frozen=True)
class HarnessLayout:
    """The rule 3.8 harness choices alone (all off by default): what ``AgentPromptSpec``
    perturbs and what the engine's ``workload.harness`` sets, under the same names."""

    per_call_field_tokens: int = 0  # (1) a field re-rendered on every call; 0 = none
    per_call_field_at: str = "front"  # "front" (breaks reuse) or "end" (the layout fix)
    tool_change_every: int = 0  # (2) every k calls the next tool definition (0, 1, ...) changes
    unstable_tool_order: bool = False  # (3) tools serialized in a random order on each call
    compact_every: int = 0  # (4) every k calls the history becomes one summary
    recent_turns: int = 2  # replies/results of the last turns a compaction keeps
    summary_tokens: int = 512  # size of that summary

    def __post_init__(self) -> None:
        if self.per_call_field_at not in FIELD_PLACES:
            raise ValueError(
                f"per_call_field_at must be 'front' or 'end', got {self.per_call_field_at!r}"
            )

    @property
    def is_off(self) -> bool:
        """No perturbation: every prompt is the plain append-only layout."""
        return not (
            self.per_call_field_tokens
            or self.tool_change_every
            or self.unstable_tool_order
            or self.compact_every
        )

    @property
    def perturbs_tools(self) -> bool:
        return bool(self.tool_change_every or self.unstable_tool_order)

    @property
    def keep_items(self) -> int:
        """History items a compaction keeps: the recent replies/results and the new input."""
        return 2 * self.recent_turns + 1

    def compacts_at(self, call: int) -> bool:
        """Whether call ``call`` (0 = the first) compacts the history before it is sent."""
        return bool(self.compact_every and call and call % self.compact_every == 0)


def tool_versions(n_tools: int, every: int, call: int) -> list[int]:
    """Each tool definition's version at call ``call``: every ``every`` calls the next
    definition (0, 1, ..., wrapping) changes once, the change counting from that call on."""
    changes = call // every if every else 0
    return [(changes - i + n_tools - 1) // n_tools for i in range(n_tools)]


def tool_zone(
    base: ContentId,
    tool_tokens: Sequence[int],
    layout: HarnessLayout,
    call: int,
    rng: random.Random | None,
) -> list[tuple[ContentId, int]]:
    """The tool definitions of call ``call``: ``"<base>:<i>:v<version>"`` (shared by every
    trajectory at that version), shuffled by ``rng`` when the order is unstable."""
    n = len(tool_tokens)
    versions = tool_versions(n, layout.tool_change_every, call)
    order = list(range(n))
    if layout.unstable_tool_order and rng is not None:
        rng.shuffle(order)
    return [(f"{base}:{i}:v{versions[i]}", tool_tokens[i]) for i in order]


Zone = tuple[str, list]  # (zone name, its spans)


def call_zones(
    layout: HarnessLayout, zones: list[Zone], field_id: ContentId | None
) -> list[Zone]:
    """A call's zones with the per-call field (``field_id``) put where the layout says:
    before everything (``front``) or after the new input (``end``)."""
    if not layout.per_call_field_tokens:
        return zones
    call = ("per_call", [(field_id, layout.per_call_field_tokens)])
    at = 0 if layout.per_call_field_at == "front" else len(zones)
    return [*zones[:at], call, *zones[at:]]


@dataclass(frozen=True)
class AgentPromptSpec:
    """Zone sizes (tokens) and harness perturbations of one agent's prompts."""

    system_tokens: int = 2048
    tool_tokens: tuple[int, ...] = (256,) * 8  # one entry per tool definition
    task_tokens: int = 256  # the user's task: the first call's new input
    output_tokens: int = 128  # each model reply (then part of the history)
    observation_tokens: int = 512  # each tool result: the next call's new input
    recent_turns: int = 2  # replies/results of the last turns kept in the "recent" zone
    zone_priority: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_ZONE_PRIORITY))
    # --- rule 3.8 perturbations (all off by default) ---
    per_call_field_tokens: int = 0  # (1) a field re-rendered on every call; 0 = none
    per_call_field_at: str = "front"  # "front" (breaks reuse) or "end" (the layout fix)
    tool_change_every: int = 0  # (2) every k calls the next tool definition (0, 1, ...) changes
    unstable_tool_order: bool = False  # (3) tools serialized in a random order on each call
    compact_every: int = 0  # (4) every k calls the history zone becomes one summary
    summary_tokens: int = 512  # size of that summary

    def __post_init__(self) -> None:
        if self.per_call_field_at not in FIELD_PLACES:
            raise ValueError(
                f"per_call_field_at must be 'front' or 'end', got {self.per_call_field_at!r}"
            )
        sizes = (
            self.system_tokens,
            self.task_tokens,
            self.output_tokens,
            self.observation_tokens,
            self.summary_tokens,
            *self.tool_tokens,
        )
        counts = (
            self.recent_turns,
            self.per_call_field_tokens,
            self.tool_change_every,
            self.compact_every,
        )
        if min(sizes) < 1 or min(counts) < 0:
            raise ValueError("zone sizes must be >= 1 token and counts >= 0")

    @property
    def layout(self) -> HarnessLayout:
        """The harness choices of this spec (the same rules drive the engine's prompts)."""
        return HarnessLayout(
            self.per_call_field_tokens,
            self.per_call_field_at,
            self.tool_change_every,
            self.unstable_tool_order,
            self.compact_every,
            self.recent_turns,
            self.summary_tokens,
        )


@dataclass(frozen=True)
class Prompt:
    """One LLM call: its content, zone boundaries and the reply it generates."""

    trajectory: str
    turn: int
    segments: Segments
    zones: tuple[tuple[str, int, int], ...]  # (zone, start token, end token)
    output: Segments  # the reply generated by this call (cacheable as its blocks fill)
    priorities: dict[ContentId, float]  # content id -> zone priority

    @property
    def n_tokens(self) -> int:
        return n_tokens(self.segments)

    def zone_tokens(self, zone: str) -> int:
        """Tokens of one zone in this prompt (0 when absent)."""
        return sum(b - a for z, a, b in self.zones if z == zone)


class _Trajectory:
    """State of one trajectory while its prompts are built (its history items)."""

    def __init__(self, spec: AgentPromptSpec, name: str, seed: int):
        self.spec, self.name, self.layout = spec, name, spec.layout
        self.rng = random.Random(f"kvsim/prompt/{seed}/{name}")
        self.items: list[tuple[ContentId, int]] = [(f"{name}:task", spec.task_tokens)]

    def perturb(self, turn: int) -> None:
        if self.layout.compacts_at(turn):
            summary = (f"{self.name}:summary:{turn}", self.spec.summary_tokens)
            self.items = compact_items(self.items, self.layout.keep_items, summary)

    def zones(self, turn: int) -> list[Zone]:
        spec = self.spec
        tools = tool_zone("tool", spec.tool_tokens, self.layout, turn, self.rng)
        cut = max(0, len(self.items) - 2 * spec.recent_turns - 1)
        zones: list[Zone] = [
            ("system", [("sys", spec.system_tokens)]),
            ("tools", tools),
            ("history", self.items[:cut]),
            ("recent", self.items[cut:-1]),
            ("input", self.items[-1:]),
        ]
        return call_zones(self.layout, zones, f"{self.name}:call:{turn}")

    def prompt(self, turn: int) -> Prompt:
        self.perturb(turn)
        spans, bounds, prio = [], [], {}
        pos = 0
        for zone, items in self.zones(turn):
            for cid, _ in items:
                prio[cid] = self.spec.zone_priority.get(zone, 0)
            n_zone = sum(n for _, n in items)
            if n_zone:
                bounds.append((zone, pos, pos + n_zone))
            spans.extend(items)
            pos += n_zone
        out_id = f"{self.name}:out:{turn}"
        prio[out_id] = self.spec.zone_priority.get("history", 0)
        self.items += [
            (out_id, self.spec.output_tokens),
            (f"{self.name}:obs:{turn}", self.spec.observation_tokens),
        ]
        return Prompt(
            self.name,
            turn,
            segments(spans),
            tuple(bounds),
            segments([(out_id, self.spec.output_tokens)]),
            prio,
        )


def compact_items(items: Sequence[T], keep_last: int, summary: T) -> list[T]:
    """Compaction (rule 3.8 (4)): every history item but the last ``keep_last`` becomes one
    ``summary`` item (a new content id, so nothing after the stable zones is reused).

    The one compaction mechanism of kvsim: the periodic ``compact_every`` of this module
    and the engine workloads' ``context_limit`` (``sim.workload.context_limit``) both call
    it. Items are ``(content_id, n_tokens)`` spans or ``(content_id, start, n)`` segments.
    """
    if len(items) <= keep_last:
        return list(items)
    return [summary, *items[len(items) - keep_last :]] if keep_last else [summary]


def truncate_items(items: Sequence[T], max_tokens: int, keep_first: int = 0) -> list[T]:
    """Drop the oldest items after the first ``keep_first`` until the rest holds at most
    ``max_tokens`` tokens (a sliding-window harness); the newest item always stays.
    The token count of an item is its last field."""
    head, tail = list(items[:keep_first]), list(items[keep_first:])
    total = sum(it[-1] for it in tail)
    while len(tail) > 1 and total > max_tokens:
        total -= tail.pop(0)[-1]
    return head + tail


def build_trajectory(
    spec: AgentPromptSpec, n_turns: int, name: str = "a", seed: int = 0
) -> list[Prompt]:
    """The prompts of ``n_turns`` successive calls of one trajectory."""
    traj = _Trajectory(spec, name, seed)
    return [traj.prompt(t) for t in range(n_turns)]
