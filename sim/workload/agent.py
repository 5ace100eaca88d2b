"""Agent trajectories as SimPy processes: turns, tool pauses, growing context, nested forks.

The one trajectory engine of every agent kind (``agent``, ``coding_agent``,
``function_calling``, ``human_in_loop``, ``multi_agent_team``, ``tree_search``,
``agent_trace``, ``claude_code``, ``interactive_coding_agent``): a kind is a *plan
sampler* (a pure function of its config and the named RNG streams) and this shared process
runs the plan. A plan is a line of steps: a turn (``TurnSpec``), a fork (``ForkSpec``) or
a spawn of subagents (``SpawnSpec``); a fork's branches and a spawn's children are lines
themselves, so forks nest (a branch may fork again: tree search). A spawn starts child
agents on their own sequences with their own leading zones (Claude Code's Task tool) and
the line waits for all of them, keeping its own context and KV (paused meanwhile); a
child's first call carries its task and its last call frees its sequence.

A turn (rule 3.16): wait its ``pause_s`` (the tool, or the user, that produced its input;
the KV manager's pause hook decides what happens to the KV meanwhile; default ``hold``)
-> append its new input -> submit the call (its prompt is the whole context so far, as
spans: shared system prompt and tool definitions, the task, every reply and observation)
-> wait for the completion -> append the reply (or only its tail, ``kept_output_tokens``:
harnesses that drop the reasoning of earlier calls). A rebuilt turn keeps the stable
zones (or its ``keep_tokens`` leading tokens) and appends its input. A fork gives each
branch the parent's KV (copy-on-write or a deep copy, as the allocator does it), releases the
parent's own sequence, and runs every branch; ``join`` waits for all and continues from the
chosen one, ``prune`` continues from the first to finish and cancels the others
mid-flight; a branch the verifier rejects (``ForkSpec.pruned``) is freed as soon as its
steps end and never wins. The line that continues keeps its branch id; losers are freed.
Before each call the harness applies ``context_limit`` (``sim.workload.context_limit``):
near the model's window it compacts, truncates or stops, as real harnesses do; then its
layout (``workload.harness``, ``sim.workload.layout``) may compact periodically and render
the call's prompt with a per-call field, changed or reordered tool definitions. A call whose
prompt is not an extension of the KV its line holds (a rebuilt prompt, a dropped reply
tail, a compaction, other leading zones, a per-call field) moves the line to a new
sequence; a prefix cache still serves the common prefix. With ``workload.provider_cache``
every call is also billed by a provider's prompt cache (``sim.workload.billing``).

Branch ids are unique within a trajectory: 0 is the main line, forks number their branches
1, 2, ... in creation order; ``Request.branch`` keeps its older meaning (the branch's index
within its fork, 1-based; 0 on the main line).

Invariant: a trajectory's whole plan is drawn when it starts, from the kind's named streams
(``turns``, ``tokens``, ``pauses``, ``forks``, ...), so it does not depend on how the run
unfolds; every content id of a reply or an observation is unique, so only the shared zones
(and a fork's common prefix) can be reused; every sequence a trajectory creates is freed
exactly once (by a last turn, a release, or a cancel).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Union

from sim.errors import ConfigError
from sim.prefix.spans import Segments, concat, n_tokens, segments, slice_tokens
from sim.sched.request import FINISHED
from sim.workload.arrivals import arrival_strategy
from sim.workload.billing import Bill, Provider
from sim.workload.context import WorkloadContext, trajectory_row
from sim.workload.context_limit import ContextLimit, fit_window
from sim.workload.hints import HintEmitter, hint_emitter, register_tool_times
from sim.workload.layout import PromptBuilder


@dataclass(frozen=True, slots=True)
class TurnSpec:
    """One LLM call: wait ``pause_s``, append ``input_tokens``, generate ``output_tokens``."""

    pause_s: float  # the wait before this call (0 on the first call of a trajectory)
    input_tokens: int  # new input: the task, a tool result, a user message
    output_tokens: int  # the reply's target length
    tool: str = "tool"  # the tool (or "user") whose wait and output precede this call
    category: str = "tool"  # its category: the previous call's ``Request.tool_name``
    user_turn: int = 0  # the user turn this call serves (conversational kinds)
    kept_output_tokens: int | None = None  # the reply's tail kept in the context; None = all
    rebuild: bool = False  # the prompt is rebuilt: stable zones + ``input_tokens`` of new content
    # with rebuild: the leading tokens of the context kept (None: the stable zones); a
    # replayed harness that rewrote the end of its history keeps the common prefix
    keep_tokens: int | None = None


#: a fleet-shared content name, or None for content new to this fork
PrefixSpan = tuple[Union[str, None], int]  # noqa: UP007


@dataclass(frozen=True, slots=True)
class ForkSpec:
    """Fork the line into ``len(branches)`` branches, each a line of steps."""

    branches: tuple[tuple, ...]  # each branch: a tuple of TurnSpec / ForkSpec steps
    winner: int  # join: the branch the line continues from (if it finished)
    mode: str  # join: wait for all; prune: the first to finish wins, the others are cancelled
    prefix: tuple[PrefixSpan, ...] = ()  # content every branch shares after the parent's context
    rebuild: bool = False  # the parent's context after the stable zones is dropped first
    pruned: tuple[bool, ...] = ()  # branch j is rejected by a verifier when its steps end


@dataclass(frozen=True, slots=True)
class SpawnSpec:
    """Start subagents and wait for all of them; the line keeps its context and sequence.

    Each child is a line of steps on its own new sequence whose first prompt is its own
    leading zones (fleet-shared names, ``stable``) and its first turn's input (its task);
    children run concurrently and the line's next turn starts when the last one ends (its
    KV is paused meanwhile, so the pause before that turn covers the children's run).
    """

    children: tuple[tuple, ...]  # each child: a tuple of steps (the first a TurnSpec)
    stable: tuple[tuple[tuple[str, int], ...], ...]  # each child's leading zones


Step = Union[TurnSpec, ForkSpec, SpawnSpec]  # noqa: UP007


@dataclass(frozen=True, slots=True)
class TrajectoryPlan:
    """The manual ``agent`` kind's plan: main-line turns and the forks after some of them."""

    turns: tuple[TurnSpec, ...]  # turns[0].pause_s is 0 and its input is the task
    forks: dict  # turn index -> ForkSpec (fork after that turn)

    def steps(self) -> tuple[Step, ...]:
        """The plan as one line of steps (a fork after the last turn never runs)."""
        out: list[Step] = []
        last = len(self.turns) - 1
        for t, turn in enumerate(self.turns):
            out.append(turn)
            if t in self.forks and t < last:
                out.append(self.forks[t])
        return tuple(out)


# ------------------------------------------------------------------ the agent kind's plan
def sample_plan(cfg, ctx: WorkloadContext) -> TrajectoryPlan:
    """Draw one ``agent`` trajectory's plan (the fully manual generator)."""
    tok, pau, frk = ctx.streams("tokens"), ctx.streams("pauses"), ctx.streams("forks")
    n = int(cfg.turns.sample_tokens(ctx.streams("turns"), 1)[0])
    task = int(cfg.task_tokens.sample_tokens(tok, 1)[0])
    turns = _turns(cfg, tok, pau, n)
    turns[0] = TurnSpec(0.0, task, turns[0].output_tokens)
    forks = {}
    fc = cfg.fork
    if fc is not None and fc.probability > 0 and n > 1:
        for t in (frk.random(n - 1) < fc.probability).nonzero()[0].tolist():
            k = max(2, int(fc.branches.sample_tokens(frk, 1)[0]))
            lengths = fc.branch_turns.sample_tokens(frk, k).tolist()
            branches = tuple(tuple(_turns(cfg, tok, pau, b)) for b in lengths)
            forks[t] = ForkSpec(branches, int(frk.integers(k)), fc.mode)
    return TrajectoryPlan(tuple(turns), forks)


def _turns(cfg, tok, pau, n: int) -> list[TurnSpec]:
    outs = cfg.output_tokens.sample_tokens(tok, n).tolist()
    obs = cfg.observation_tokens.sample_tokens(tok, n).tolist()
    pauses = cfg.pause_s.sample(pau, n).clip(min=0.0).tolist()
    return [TurnSpec(p, i, o) for p, i, o in zip(pauses, obs, outs, strict=True)]


# ------------------------------------------------------------------------ the process
@dataclass(frozen=True, slots=True)
class Harness:
    """How a trajectory's harness builds prompts: stable zones, the window policy, the
    layout (None: the plain append-only layout) and the provider view (None: none)."""

    limit: ContextLimit
    stable: tuple[tuple[str, int], ...]  # leading spans shared fleet-wide, never compacted
    builder: PromptBuilder | None = None  # workload.harness, when any knob is on
    provider: Provider | None = None  # workload.provider_cache
    hints: HintEmitter | None = None  # workload.hints: the KV hint each call carries

    @property
    def stable_tokens(self) -> int:
        return sum(n for _, n in self.stable)

    @property
    def field_tokens(self) -> int:
        """Tokens of the per-call field every prompt carries (0: none)."""
        return 0 if self.builder is None else self.builder.field_tokens


@dataclass
class _Traj:
    """What a trajectory's lines share while it runs."""

    traj_id: int
    harness: Harness
    next_branch_id: int = 1
    branches: int = 0
    pruned: int = 0
    max_depth: int = 0
    order_seed: int = 0  # seeds the tool order of each call (unstable_tool_order)
    bill: Bill | None = None  # the provider view's bill (workload.provider_cache)


@dataclass
class _Line:
    """A line of steps on one sequence (the main line or a branch)."""

    seq: int
    context: Segments
    branch: int = 0  # index within its fork (Request.branch); 0 on the main line
    branch_id: int = 0
    parent_branch_id: int = -1
    depth: int = 0
    cancelled: bool = False
    released: bool = False  # its sequence was freed by a cancel or a verifier's rejection
    rejected: bool = False  # a verifier rejected it
    ok: bool = True
    exhausted: bool = False  # ended because the next call could not fit the window
    trimmed: bool = False  # the context is not an extension of the KV the sequence holds
    compactions: int = 0
    calls: int = 0  # calls this line's context has seen (its ancestors' included)
    lead: Segments | None = None  # leading zones of the prompt its KV holds (layout on)
    tail_field: bool = False  # that prompt ended with a per-call field
    current: object = None  # the request in flight
    children: list | None = None  # the branches of its fork in flight
    pause_s: float = 0.0
    requests: list = field(default_factory=list)
    stable_tokens: int | None = None  # a subagent's own leading zones (None: the harness's)
    # (a context, its tokens): ``_context_tokens``' memory, valid while ``context`` is that
    # very tuple (contexts are rebuilt, never changed in place)
    counted: tuple[Segments | None, int] = (None, 0)


def _context_tokens(line: _Line, context: Segments) -> int:
    """``n_tokens(context)``, read from ``line.counted`` when that is this very tuple (a
    new call's context is the last one plus an observation, the last reply's plus its kept
    output: ``_extended`` counts it by one addition instead of a pass over every segment)."""
    seen, tokens = line.counted
    if seen is not context:
        tokens = n_tokens(context)
        line.counted = (context, tokens)
    return tokens


def _extended(line: _Line, base: Segments, part: Segments) -> Segments:
    """``concat(base, part)``; its count is remembered on ``line`` when ``base``'s is
    (``n_tokens(part)``: one segment, one read)."""
    seen, tokens = line.counted
    context = concat(base, part)
    if seen is base:
        line.counted = (context, tokens + n_tokens(part))
    return context


def _next_input(ctx: WorkloadContext, line: _Line, harness: Harness, spec: TurnSpec) -> bool:
    """Append the next call's new input to ``line``, applying the context limit first.

    A compacted, truncated or rebuilt context (or one whose last reply was trimmed) is no
    longer an extension of the KV the line holds, so the line moves to a new sequence (the
    old one is released; a prefix cache still serves the stable zones). False = the
    context is exhausted.
    """
    context = line.context
    stable = harness.stable_tokens if line.stable_tokens is None else line.stable_tokens
    if spec.rebuild:
        context = slice_tokens(context, 0, stable if spec.keep_tokens is None else spec.keep_tokens)
    total = _context_tokens(line, context)
    fitted = fit_window(
        context,
        stable,
        spec.input_tokens + harness.field_tokens,
        ctx.context_window,
        harness.limit,
        ctx.new_content("summary"),
        total_tokens=total,
    )
    if fitted.context is None:
        line.exhausted = True
        return False
    if fitted.reduced:
        line.compactions += 1
    moved = fitted.reduced or spec.rebuild or line.trimmed
    obs = segments([(ctx.new_content("obs"), spec.input_tokens)])
    context = _extended(line, fitted.context, obs)  # counted unless fit_window cut it
    if harness.builder is not None and harness.builder.layout.compacts_at(line.calls):
        compacted = harness.builder.compact(context, line.calls, ctx.new_content("summary"))
        if compacted is not None:  # the periodic compaction (rule 3.8 (4))
            context, moved = compacted, True
            line.compactions += 1
    if moved:
        _new_sequence(ctx, line)
        line.trimmed = False
    line.context = context
    return True


def _new_sequence(ctx: WorkloadContext, line: _Line) -> None:
    """Release the line's sequence and continue on a new, empty one."""
    ctx.node.release(line.seq)
    line.seq = ctx.new_seq()
    line.lead = None


def _render(ctx: WorkloadContext, line: _Line, traj: _Traj, builder: PromptBuilder) -> Segments:
    """The next call's prompt under the harness layout; moves the line to a new sequence
    when the prompt does not extend the KV it holds (other leading zones, or a per-call
    field at the end of the prompt that filled it)."""
    lay = builder.layout
    field_id = ctx.new_content("call") if lay.per_call_field_tokens else None
    rng = None
    if lay.unstable_tool_order:
        rng = random.Random(f"kvsim/harness/{traj.order_seed}/{line.branch_id}/{line.calls}")
    r = builder.render(line.context, line.calls, field_id, rng)
    if line.lead is not None and (r.lead != line.lead or line.tail_field):
        _new_sequence(ctx, line)
    line.lead, line.tail_field = r.lead, r.tail_field
    return r.prompt


def _breakpoints(line: _Line, harness: Harness, prompt: Segments) -> tuple[int, ...]:
    """Where a harness puts its cache breakpoints (provider view): after the leading zones
    (system prompt, tools), after the conversation, and at the end of the prompt (after a
    per-call field at the end, if any)."""
    total = n_tokens(prompt)
    lead = harness.stable_tokens if line.lead is None else n_tokens(line.lead)
    body_end = total - harness.field_tokens if line.tail_field else total
    return (lead, body_end, total)


def _turn(ctx, line: _Line, spec: TurnSpec, traj: _Traj, turn: int, last: bool, first: bool, nxt):
    """Run one turn on ``line``; afterwards ``line.ok`` says whether it finished."""
    env = ctx.env
    if not first:
        if spec.pause_s > 0:
            yield env.timeout(spec.pause_s)
            line.pause_s += spec.pause_s
        if line.cancelled or not _next_input(ctx, line, traj.harness, spec):
            line.ok = False
            return
    harness = traj.harness
    prompt = line.context
    if harness.builder is not None:
        prompt = _render(ctx, line, traj, harness.builder)
    if traj.bill is not None:
        harness.provider.call(traj.bill, prompt, _breakpoints(line, harness, prompt), ctx.now)
    line.calls += 1
    req = ctx.request(
        line.seq,
        _context_tokens(line, prompt) if prompt is line.context else n_tokens(prompt),
        spec.output_tokens,
        prompt,
        traj_id=traj.traj_id,
        turn=turn,
        branch=line.branch,
        last_turn=last,
        # the true wait after this turn (oracle prediction); unknown when branches follow
        next_pause_s=None if nxt is None else nxt.pause_s,
        tool_name="tool" if nxt is None else nxt.category,
        branch_id=line.branch_id,
        parent_branch_id=line.parent_branch_id,
        depth=line.depth,
    )
    if harness.hints is not None:
        req.hint = harness.hints.hint(nxt, last)
    ctx.call_submitted(req, None if nxt is None else nxt.tool, spec.user_turn)
    line.current = req
    yield ctx.submit_and_wait(req)
    line.current = None
    line.requests.append(req)
    if traj.bill is not None:
        harness.provider.output(traj.bill, req.num_output)
    if req.status != FINISHED or line.cancelled:
        line.ok = False
        return
    out = req.num_output
    kept = out if spec.kept_output_tokens is None else min(spec.kept_output_tokens, out)
    line.context = _extended(line, line.context, ((req.output_id, out - kept, kept),))
    line.trimmed = line.trimmed or kept < out


def _run_line(ctx, line: _Line, steps: tuple, traj: _Traj, main: bool):
    """Run a line's steps; returns the number of calls it completed."""
    done = turn = 0
    n = len(steps)
    for i, step in enumerate(steps):
        if isinstance(step, SpawnSpec):
            yield from _spawn(ctx, line, step, traj)
            if line.cancelled:
                line.ok = False
                return done
            continue
        if isinstance(step, ForkSpec):
            winner = yield from _fork(ctx, line, step, traj)
            if winner is None:
                line.ok = False
                return done
            line.seq, line.context, line.trimmed = winner.seq, winner.context, winner.trimmed
            line.calls, line.lead, line.tail_field = winner.calls, winner.lead, winner.tail_field
            continue
        nxt = steps[i + 1] if i + 1 < n and isinstance(steps[i + 1], TurnSpec) else None
        last = main and i == n - 1
        yield from _turn(ctx, line, step, traj, turn, last, main and i == 0, nxt)
        turn += 1
        if not line.ok:
            return done
        done += 1
    return done


def _branch(ctx, line: _Line, steps: tuple, traj: _Traj, rejected: bool):
    yield from _run_line(ctx, line, steps, traj, False)
    if rejected and line.ok and not line.released:
        # the verifier rejects the branch as soon as it ends: its KV is freed at once
        line.rejected = line.released = True
        traj.pruned += 1
        ctx.node.cancel(None, line.seq)


def _cancel(ctx, line: _Line) -> None:
    """Cancel a line mid-flight (or a finished loser) and free what it holds."""
    if line.released:
        return
    line.cancelled = line.released = True
    if line.children is not None:  # its own sequence was released when it forked
        for child in line.children:
            _cancel(ctx, child)
    else:
        ctx.node.cancel(line.current, line.seq)


def _fork(ctx: WorkloadContext, main: _Line, fork: ForkSpec, traj: _Traj):
    """Fork, run the branches, pick the line to continue; returns it (or None)."""
    env, node = ctx.env, ctx.node
    base = main.context
    if fork.rebuild:
        base = slice_tokens(base, 0, traj.harness.stable_tokens)
    if fork.prefix:
        spans = [
            (ctx.shared_id(name) if name else ctx.new_content("shared"), n)
            for name, n in fork.prefix
        ]
        base = concat(base, segments(spans))
    # children of a rebuilt or trimmed context cannot share the parent's KV: they start on
    # new sequences (a prefix cache shares what it can)
    fresh = fork.rebuild or main.trimmed
    k = len(fork.branches)
    lines = []
    for j in range(k):
        lines.append(
            _Line(
                ctx.new_seq(),
                base,
                branch=j + 1,
                branch_id=traj.next_branch_id + j,
                parent_branch_id=main.branch_id,
                depth=main.depth + 1,
                calls=main.calls,
                # a child that shares the parent's KV holds what the parent's last call left
                lead=None if fresh else main.lead,
                tail_field=main.tail_field and not fresh,
            )
        )
    traj.next_branch_id += k
    traj.branches += k
    traj.max_depth = max(traj.max_depth, main.depth + 1)
    if not fresh:
        for line in lines:
            node.fork(main.seq, line.seq)
    node.release(main.seq)
    main.children = lines
    rejected = fork.pruned or (False,) * k
    procs = [
        env.process(_branch(ctx, ln, steps, traj, rej))
        for ln, steps, rej in zip(lines, fork.branches, rejected, strict=True)
    ]
    winner = yield from _pick(env, fork, lines, procs)
    main.children = None
    for j, line in enumerate(lines):
        if j != winner:
            _cancel(ctx, line)
    for line in lines:
        main.requests.extend(line.requests)
        main.pause_s += line.pause_s
        main.compactions += line.compactions
    if winner is None:
        main.exhausted = any(line.exhausted for line in lines)
        return None
    return lines[winner]


def _spawn(ctx: WorkloadContext, parent: _Line, spawn: SpawnSpec, traj: _Traj):
    """Run the subagents of ``spawn`` to their ends (each a main-like line: its first call
    is its task, its last call frees its sequence); the parent's line is unchanged."""
    k = len(spawn.children)
    lines = []
    for j, (steps, stable) in enumerate(zip(spawn.children, spawn.stable, strict=True)):
        spans = [*((ctx.shared_id(name), n) for name, n in stable)]
        spans.append((ctx.new_content("task"), steps[0].input_tokens))
        child = _Line(
            ctx.new_seq(),
            segments(spans),
            branch=j + 1,
            branch_id=traj.next_branch_id + j,
            parent_branch_id=parent.branch_id,
            depth=parent.depth + 1,
            stable_tokens=sum(n for _, n in stable),
        )
        lines.append(child)
    traj.next_branch_id += k
    traj.branches += k
    traj.max_depth = max(traj.max_depth, parent.depth + 1)
    procs = [
        ctx.env.process(_run_line(ctx, ln, steps, traj, True))
        for ln, steps in zip(lines, spawn.children, strict=True)
    ]
    yield ctx.env.all_of(procs)
    for line, steps in zip(lines, spawn.children, strict=True):
        if not line.ok or not isinstance(steps[-1], TurnSpec):
            ctx.node.release(line.seq)  # no last turn released it
        parent.requests.extend(line.requests)
        parent.pause_s += line.pause_s
        parent.compactions += line.compactions


def _pick(env, fork: ForkSpec, lines: list[_Line], procs: list):
    """Wait for the branches as the fork's mode says; the index of the winner (or None)."""

    def alive(j: int) -> bool:
        ln = lines[j]
        return ln.ok and not ln.cancelled and not ln.rejected

    if fork.mode == "join":
        yield env.all_of(procs)
        ok = [j for j in range(len(lines)) if alive(j)]
        if not ok:
            return None
        return fork.winner if fork.winner in ok else ok[0]
    pending = list(range(len(lines)))
    while pending:
        yield env.any_of([procs[j] for j in pending])
        done = [j for j in pending if procs[j].triggered]
        pending = [j for j in pending if j not in done]
        winner = next((j for j in done if alive(j)), None)
        if winner is not None:
            return winner
    return None


def run_trajectory(
    ctx: WorkloadContext, kind: str, traj_id: int, steps: tuple, harness: Harness, on_end
):
    """SimPy process of one trajectory: its first step is a turn whose input is the task."""
    start = ctx.now
    traj = _Traj(traj_id, harness)
    if harness.builder is not None and harness.builder.layout.unstable_tool_order:
        traj.order_seed = int(ctx.streams("harness").integers(1 << 62))
    if harness.provider is not None:
        traj.bill = Bill()
    task = (ctx.new_content("task"), steps[0].input_tokens)
    stable = [(ctx.shared_id(name), n) for name, n in harness.stable]
    line = _Line(ctx.new_seq(), segments([*stable, task]))
    done = yield from _run_line(ctx, line, steps, traj, True)
    ok = line.ok
    if not ok or not isinstance(steps[-1], TurnSpec):
        ctx.node.release(line.seq)  # no last turn released it
    status = "completed" if ok else "context_exhausted" if line.exhausted else "failed"
    main_turns = sum(isinstance(s, TurnSpec) for s in steps)
    row = trajectory_row(
        traj_id,
        kind,
        start,
        ctx.now,
        status,
        min(done, main_turns),
        line.requests,
        traj.branches,
        line.pause_s,
        line.compactions,
        depth=traj.max_depth,
        pruned=traj.pruned,
        bill=traj.bill,
    )
    ctx.trajectory_ended(row, ok)
    on_end()


PlanSampler = Callable[[Any, WorkloadContext], tuple]


def trajectory_driver(
    kind: str, plan: PlanSampler, harness: Callable[[Any, WorkloadContext], Harness]
):
    """A driver (``(cfg, ctx) -> generator``) that starts trajectories of ``kind`` as the
    arrival process says; each draws its steps from ``plan(cfg, ctx)`` when it starts."""

    def driver(cfg, ctx: WorkloadContext):
        env = ctx.env
        h = with_layout(harness(cfg, ctx), cfg, ctx)

        def start(i: int, on_end) -> None:
            ctx.trajectory_started()
            steps = plan(cfg, ctx)
            env.process(run_trajectory(ctx, kind, i, steps, h, on_end))

        return arrival_strategy(cfg.arrival.kind).run(
            cfg.arrival, ctx, cfg.num_trajectories, start
        )

    return driver


def with_layout(h: Harness, cfg, ctx: WorkloadContext) -> Harness:
    """``h`` with the config's prompt layout (``workload.harness``; only when a knob is on,
    so the default layout is the plain one) and provider view (``workload.provider_cache``)."""
    builder = provider = None
    if not cfg.harness.layout().is_off:
        stable = tuple((ctx.shared_id(name), n) for name, n in h.stable)
        builder = PromptBuilder(cfg.harness, stable)
        if builder.layout.perturbs_tools and builder.tools_at is None:
            raise ConfigError(
                f"{cfg.kind} prompts have no shared tool definitions to change or reorder "
                "(no stable zone); set tool_change_every: 0 and unstable_tool_order: false",
                field=f"{ctx.field_prefix}.harness",
            )
    if cfg.provider_cache is not None:
        provider = Provider(cfg.provider_cache)
    return replace(h, builder=builder, provider=provider, hints=hint_emitter(cfg, ctx))


def _agent_harness(cfg, ctx: WorkloadContext) -> Harness:
    stable = (("sys", cfg.system_prompt_tokens), ("tools", cfg.tool_tokens))
    return Harness(cfg.context_limit, stable)


def _agent_steps(cfg, ctx: WorkloadContext) -> tuple:
    return sample_plan(cfg, ctx).steps()


#: the manual ``agent`` kind's driver
agent_driver = trajectory_driver("agent", _agent_steps, _agent_harness)
register_tool_times("agent", lambda cfg, ctx: ({"*": cfg.pause_s}, 1.0))
