"""``claude_code``: recorded Claude Code sessions replayed through the engine.

Responsibility: turn kv-cache-tester sessions (``sim.prefix.session_trace``; default the
32 shipped ones, ``workloads/data/claude_code/sessions.jsonl.gz``, Apache-2.0) into plans of
the shared trajectory engine (``sim.workload.agent``): each session is a trajectory,
trajectory ``i`` replays session ``i`` (``order: sequential``, wrapping around), a shuffled
one or one drawn at random (stream ``trace``).

- **Prompts from the block ids.** The first prompt is the session's tool definitions and
  system prompt (one leading zone of ``tool_tokens + system_tokens``) and the task. A later
  call whose block ids extend the previous call's is that prompt, the previous reply and
  the new input (``in`` minus the previous ``in`` and ``out``); when it grew by less than
  the reply, only the reply's tail is kept (the reasoning is dropped), and when it did not
  grow, its recorded length is kept from the front. A call whose ids leave the previous
  call's after ``P`` blocks is rebuilt: the first ``P x block_size`` tokens are kept (a
  prefix cache still serves them) and the rest is new. Recorded prompt lengths are
  reproduced exactly (unless ``context_limit`` acts).
- **Shared prefix.** With ``warm_shared_prefix`` (default) the leading zone is fleet-shared
  content: every session (and every subagent of one type) shares it, two sessions sharing
  the shorter one's, as the upstream tester's warm prefix; off, each trajectory's is its
  own.
- **Pauses.** The pause before a call is ``tool`` when its new input is a tool result,
  ``human`` when it is a user message (the request's ``tool_name``, so pause policies keep
  them apart). ``timing`` as the upstream tester defines it: ``think_only`` waits the
  recorded ``think_time``; ``original`` the recorded gap between the two calls' starts
  (``t``, the provider's time included); ``api_scaled`` the previous call's ``api_time``
  x ``api_time_scale`` plus ``think_time``; without the fields, ``original``. Every pause
  is then x ``time_scale`` and capped at ``max_pause_s`` (none by default).
- **Subagents.** Consecutive subagent entries are started together after the parent's
  call before them (a ``SpawnSpec``: concurrent child agents with their own leading zone,
  ``tool_tokens + system_tokens`` of the subagent, shared per ``subagent_type``); the parent
  waits for all of them, then waits what the recording shows after the last one returned
  (the next call's ``t`` minus the latest subagent's ``t``) in every timing mode, since
  the subagents themselves now run in the simulation. Subagents before a session's first
  call start after it; empty ones are skipped.

Invariant: a plan is a pure function of the session, the config and the trajectory index;
the file is read once per path and modification time; ``order`` draws come from ``trace``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.errors import ConfigError
from sim.prefix.session_trace import Entry, Session, SessionCall, Subagent
from sim.workload.agent import Harness, SpawnSpec, TurnSpec, run_trajectory, with_layout
from sim.workload.arrivals import arrival_strategy
from sim.workload.claude_code_trace import SAMPLE as SAMPLE  # the names they had here
from sim.workload.claude_code_trace import recorded as recorded
from sim.workload.claude_code_trace import sessions_path as sessions_path
from sim.workload.context import WorkloadContext
from sim.workload.hints import refuse_tool_times

TIMINGS = ("think_only", "original", "api_scaled")
#: the pause kinds (the requests' ``tool_name``)
TOOL, HUMAN = "tool", "human"


@dataclass(frozen=True, slots=True)
class Timing:
    """How the pause before a call is computed (the upstream tester's strategies)."""

    mode: str = "think_only"
    api_time_scale: float = 1.0
    time_scale: float = 1.0
    max_pause_s: float | None = None

    def pause_s(self, prev: SessionCall, call: SessionCall, returned_s: float | None) -> float:
        """The wait before ``call``; ``returned_s``: when the subagents started after
        ``prev`` returned (None: none ran in between)."""
        think, api = call.think_time_s, prev.api_time_s
        if returned_s is not None:
            raw = call.t_s - returned_s
        elif self.mode == "think_only" and think is not None:
            raw = think
        elif self.mode == "api_scaled" and think is not None and api is not None:
            raw = api * self.api_time_scale + think
        else:  # original, and the fallback without the timing fields
            raw = call.t_s - prev.t_s
        pause = max(0.0, raw) * self.time_scale
        return pause if self.max_pause_s is None else min(pause, self.max_pause_s)


def timing_of(cfg) -> Timing:
    return Timing(cfg.timing, cfg.api_time_scale, cfg.time_scale, cfg.max_pause_s)


def pause_kind(call: SessionCall) -> str:
    return HUMAN if call.after_human else TOOL


def _next_turn(prev: SessionCall, call: SessionCall, block_size: int, pause: float, user: int):
    """(the turn that sends ``call`` after ``prev``, the tail of ``prev``'s reply kept in the
    context or None for all of it)."""
    kind = pause_kind(call)
    tool = "user" if kind == HUMAN else "tool_result"
    common = prev.block_ids.common_prefix(call.block_ids)
    head = TurnSpec(pause, 1, _out(call), tool, kind, user)
    if common == len(prev.block_ids):  # extends the previous prompt
        return grown_turn(head, prev.prompt_tokens, _out(prev), call.prompt_tokens)
    # rewritten after ``common`` blocks: keep them, the rest is new
    return rebuilt_turn(head, call.prompt_tokens, common * block_size), None


def grown_turn(head: TurnSpec, prev_prompt: int, prev_out: int, prompt: int):
    """(``head`` as the turn whose prompt of ``prompt`` tokens extends the previous prompt
    of ``prev_prompt`` tokens and its reply of ``prev_out``, the tail of that reply kept in
    the context or None for all of it): the input is what the prompt adds beyond the
    reply; a prompt that grew by less keeps only the reply's tail (the reasoning dropped);
    one that did not grow keeps its length from the front."""
    grown = prompt - prev_prompt
    if grown > prev_out:
        return replace(head, input_tokens=grown - prev_out), None
    if grown >= 1:  # only the reply's tail is in the history
        return replace(head, input_tokens=1), grown - 1
    return rebuilt_turn(head, prompt, prompt - 1), None


def rebuilt_turn(head: TurnSpec, prompt: int, keep_tokens: int) -> TurnSpec:
    """``head`` as a rebuilt prompt of ``prompt`` tokens that keeps the context's first
    ``keep_tokens`` (at most ``prompt - 1``: the new input is at least one token)."""
    keep = max(0, min(keep_tokens, prompt - 1))
    return replace(head, input_tokens=prompt - keep, rebuild=True, keep_tokens=keep)


@dataclass(frozen=True, slots=True)
class Zones:
    """Names of the leading zones of a trajectory and of its subagents."""

    warm: bool  # fleet-shared (warm_shared_prefix) or the trajectory's own
    traj: int  # the trajectory index (names its own zones)

    def main(self, tokens: int) -> tuple[tuple[str, int], ...]:
        name = "claude_code:prefix" if self.warm else f"claude_code:t{self.traj}:prefix"
        return ((name, tokens),)

    def subagent(self, agent: Subagent, j: int, tokens: int) -> tuple[tuple[str, int], ...]:
        if self.warm:
            return ((f"claude_code:subagent:{agent.agent_type}", tokens),)
        return ((f"claude_code:t{self.traj}:sub{j}", tokens),)


def _first(call: SessionCall, zone_tokens: int) -> tuple[int, TurnSpec]:
    """(the leading zone's tokens, the first turn): the zone never covers the whole prompt."""
    zone = max(0, min(zone_tokens, call.prompt_tokens - 1))
    return zone, TurnSpec(0.0, call.prompt_tokens - zone, _out(call))


def _out(call: SessionCall) -> int:
    """The reply's length (a recorded empty reply is replayed as one token)."""
    return max(1, call.output_tokens)


def line_steps(
    entries: tuple[Entry, ...],
    zone_tokens: int,
    block_size: int,
    timing: Timing,
    zones: Zones,
    counter: list,
) -> tuple[int, tuple]:
    """(the leading zone's tokens, the steps) of one agent's entries: its first step is
    its first call, whose prompt is the zone (``zone_tokens``, less if the prompt is
    shorter) and its task."""
    zone = 0
    steps: list = []
    prev: SessionCall | None = None
    group: list[Subagent] = []
    user = 0
    for e in entries:
        if isinstance(e, Subagent):
            if any(True for _ in _calls(e.entries)):
                group.append(e)
            continue
        if prev is None:
            zone, first = _first(e, zone_tokens)
            steps.append(first)
        else:
            returned = None
            if group:
                steps.append(_spawn(group, block_size, timing, zones, counter))
                returned = max(g.t_s for g in group)
            user += pause_kind(e) == HUMAN
            pause = timing.pause_s(prev, e, returned)
            spec, kept = _next_turn(prev, e, block_size, pause, user)
            if kept is not None:
                i = _last_turn(steps)
                steps[i] = replace(steps[i], kept_output_tokens=kept)
            steps.append(spec)
            group = []
        if prev is None and group:  # subagents before the first call start after it
            steps.append(_spawn(group, block_size, timing, zones, counter))
            group = []
        prev = e
    if group:
        steps.append(_spawn(group, block_size, timing, zones, counter))
    return zone, tuple(steps)


def _calls(entries):
    for e in entries:
        if isinstance(e, Subagent):
            yield from _calls(e.entries)
        else:
            yield e


def _last_turn(steps: list) -> int:
    for i in range(len(steps) - 1, -1, -1):
        if isinstance(steps[i], TurnSpec):
            return i
    raise AssertionError("a kept reply tail needs a turn before it")


def _spawn(group, block_size: int, timing: Timing, zones: Zones, counter: list) -> SpawnSpec:
    children, stable = [], []
    for agent in group:
        j = counter[0] = counter[0] + 1
        tokens = agent.tool_tokens + agent.system_tokens
        zone, steps = line_steps(agent.entries, tokens, block_size, timing, zones, counter)
        children.append(steps)
        stable.append(zones.subagent(agent, j, zone))
    return SpawnSpec(tuple(children), tuple(stable))


def session_plan(session: Session, cfg, traj: int) -> tuple[tuple, Harness]:
    """(steps, harness) of trajectory ``traj`` replaying ``session``."""
    zones = Zones(cfg.warm_shared_prefix, traj)
    tokens = session.tool_tokens + session.system_tokens
    zone, steps = line_steps(
        session.entries, tokens, session.block_size, timing_of(cfg), zones, [0]
    )
    return steps, Harness(cfg.context_limit, zones.main(zone))


class _Order:
    """Which recorded session each started trajectory replays."""

    def __init__(self, cfg, ctx: WorkloadContext, count: int) -> None:
        self.count, self.next, self.mode = count, 0, cfg.order
        rng = ctx.streams("trace")
        self.perm = rng.permutation(count).tolist() if cfg.order == "shuffle" else None
        self.rng = rng

    def pick(self) -> int:
        i, self.next = self.next, self.next + 1
        if self.mode == "sample":
            return int(self.rng.integers(self.count))
        return self.perm[i % self.count] if self.perm is not None else i % self.count


def claude_code_driver(cfg, ctx: WorkloadContext):
    """Start one trajectory per session as the arrival process says."""
    sessions = [s for s in recorded(cfg, ctx) if any(True for _ in s.calls())]
    order = _Order(cfg, ctx, len(sessions))
    if not cfg.harness.layout().is_off:
        raise ConfigError(
            "claude_code replays recorded prompts (their layout is the recording's); "
            "leave workload.harness at its defaults",
            field=f"{ctx.field_prefix}.harness",
        )

    def start(i: int, on_end) -> None:
        ctx.trajectory_started()
        steps, harness = session_plan(sessions[order.pick()], cfg, i)
        h = with_layout(harness, cfg, ctx)
        ctx.env.process(run_trajectory(ctx, "claude_code", i, steps, h, on_end))

    return arrival_strategy(cfg.arrival.kind).run(cfg.arrival, ctx, cfg.num_trajectories, start)


refuse_tool_times("claude_code", "replays recorded pauses (no pause distribution)")
