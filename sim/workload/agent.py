"""Agent trajectories as SimPy processes: turns, tool pauses, growing context, forks.

A trajectory (SPEC 3.16) is: submit a turn (its prompt is the whole context so far, as
spans: shared system prompt and tool definitions, the task, every reply and observation)
-> wait for its completion -> tool pause (the KV manager's pause hook decides what
happens to the KV meanwhile; default ``hold``) -> append the observation -> next turn.
After a turn it may fork k branches: each child sequence shares the parent's KV
(copy-on-write or a deep copy, as the allocator does it), the parent's own sequence is
released, and every branch runs its own turns. ``join`` waits for all branches and
continues from a chosen one; ``prune`` continues from the first branch to finish and
cancels the others mid-flight. Losers are pruned (their sequences freed). Before each call
the harness applies ``context_limit`` (``sim.workload.context_limit``): near the model's
window it compacts, truncates or stops, as real harnesses do.

Invariant: a trajectory's whole plan (turn count, tokens, pauses, forks) is drawn when it
starts, from the ``turns``, ``tokens``, ``pauses`` and ``forks`` streams, so it does not
depend on how the run unfolds; every content id of a reply or an observation is unique,
so only the shared zones (and a fork's common prefix) can be reused.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.prefix.spans import Segments, concat, n_tokens, segments
from sim.sched.request import FINISHED
from sim.workload.arrivals import arrival_strategy
from sim.workload.context import WorkloadContext, trajectory_row
from sim.workload.context_limit import ContextLimit, fit_window


@dataclass(frozen=True, slots=True)
class TurnSpec:
    """One LLM call: wait ``pause_s`` (tool), append ``input_tokens``, generate ``output_tokens``."""

    pause_s: float
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True, slots=True)
class ForkSpec:
    branches: tuple[tuple[TurnSpec, ...], ...]
    winner: int  # join: the branch the trajectory continues from
    mode: str


@dataclass(frozen=True, slots=True)
class TrajectoryPlan:
    turns: tuple[TurnSpec, ...]  # turns[0].pause_s is 0 and its input is the task
    forks: dict  # turn index -> ForkSpec (fork after that turn)


def sample_plan(cfg, ctx: WorkloadContext) -> TrajectoryPlan:
    """Draw one trajectory's plan."""
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


@dataclass(frozen=True, slots=True)
class _Harness:
    """How the trajectory's harness treats the context window."""

    limit: ContextLimit
    stable_tokens: int  # system prompt + tool definitions: never compacted


@dataclass
class _Line:
    """A line of turns on one sequence (the main line or a branch)."""

    seq: int
    context: Segments
    branch: int = 0
    cancelled: bool = False
    ok: bool = True
    exhausted: bool = False  # ended because the next call could not fit the window
    compactions: int = 0
    current: object = None  # the request in flight
    pause_s: float = 0.0
    requests: list = field(default_factory=list)


def _next_input(ctx: WorkloadContext, line: _Line, harness: _Harness, input_tokens: int) -> bool:
    """Append the next call's new input to ``line``, applying the context limit first.

    A compacted or truncated context is no longer an extension of the KV the line holds,
    so the line moves to a new sequence (the old one is released; a prefix cache still
    serves the stable zones). False = the context is exhausted.
    """
    fitted = fit_window(
        line.context,
        harness.stable_tokens,
        input_tokens,
        ctx.context_window,
        harness.limit,
        ctx.new_content("summary"),
    )
    if fitted.context is None:
        line.exhausted = True
        return False
    if fitted.reduced:
        line.compactions += 1
        ctx.node.release(line.seq)
        line.seq = ctx.new_seq()
    obs = segments([(ctx.new_content("obs"), input_tokens)])
    line.context = concat(fitted.context, obs)
    return True


def _turn(
    ctx: WorkloadContext,
    line: _Line,
    spec: TurnSpec,
    traj_id: int,
    turn: int,
    last: bool,
    first: bool,
    harness: _Harness,
    next_pause_s: float | None = None,
):
    """Run one turn on ``line``; afterwards ``line.ok`` says whether it finished."""
    env = ctx.env
    if not first:
        if spec.pause_s > 0:
            yield env.timeout(spec.pause_s)
            line.pause_s += spec.pause_s
        if line.cancelled or not _next_input(ctx, line, harness, spec.input_tokens):
            line.ok = False
            return
    req = ctx.request(
        line.seq,
        n_tokens(line.context),
        spec.output_tokens,
        line.context,
        traj_id=traj_id,
        turn=turn,
        branch=line.branch,
        last_turn=last,
        next_pause_s=next_pause_s,
    )
    line.current = req
    yield ctx.submit_and_wait(req)
    line.current = None
    line.requests.append(req)
    if req.status != FINISHED or line.cancelled:
        line.ok = False
        return
    line.context = concat(line.context, ((req.output_id, 0, req.num_output),))


def _branch(ctx, line: _Line, turns, traj_id: int, harness: _Harness):
    for t, spec in enumerate(turns):
        nxt = turns[t + 1].pause_s if t + 1 < len(turns) else None
        yield from _turn(ctx, line, spec, traj_id, t, False, False, harness, nxt)
        if not line.ok:
            return


def _fork(ctx: WorkloadContext, main: _Line, fork: ForkSpec, traj_id: int, harness: _Harness):
    """Fork, run the branches, pick the line to continue; returns it (or None)."""
    env, node = ctx.env, ctx.node
    lines = [_Line(ctx.new_seq(), main.context, branch=j + 1) for j in range(len(fork.branches))]
    for line in lines:
        node.fork(main.seq, line.seq)
    node.release(main.seq)
    procs = [
        env.process(_branch(ctx, ln, turns, traj_id, harness))
        for ln, turns in zip(lines, fork.branches, strict=True)
    ]
    winner = None
    if fork.mode == "join":
        yield env.all_of(procs)
        ok = [j for j, ln in enumerate(lines) if ln.ok]
        if ok:
            winner = fork.winner if fork.winner in ok else ok[0]
    else:
        pending = list(range(len(lines)))
        while pending and winner is None:
            yield env.any_of([procs[j] for j in pending])
            done = [j for j in pending if procs[j].triggered]
            pending = [j for j in pending if j not in done]
            winner = next((j for j in done if lines[j].ok), None)
    for j, line in enumerate(lines):
        if j != winner:
            line.cancelled = True
            node.cancel(line.current, line.seq)
    for line in lines:
        main.requests.extend(line.requests)
        main.pause_s += line.pause_s
        main.compactions += line.compactions
    if winner is None:
        main.exhausted = any(line.exhausted for line in lines)
        return None
    return lines[winner]


def agent_trajectory(cfg, ctx: WorkloadContext, traj_id: int, plan: TrajectoryPlan, on_end):
    """SimPy process of one agent trajectory."""
    start = ctx.now
    shared = [("sys", cfg.system_prompt_tokens), ("tools", cfg.tool_tokens)]
    harness = _Harness(cfg.context_limit, cfg.system_prompt_tokens + cfg.tool_tokens)
    task = (ctx.new_content("task"), plan.turns[0].input_tokens)
    line = _Line(ctx.new_seq(), segments([*shared, task]))
    requests, pause_s, branches, done_turns = line.requests, 0.0, 0, 0
    n = len(plan.turns)
    for t, spec in enumerate(plan.turns):
        # the true wait after this turn (oracle prediction); unknown when branches follow
        nxt = plan.turns[t + 1].pause_s if t + 1 < n and t not in plan.forks else None
        yield from _turn(ctx, line, spec, traj_id, t, t == n - 1, t == 0, harness, nxt)
        if not line.ok:
            break
        done_turns += 1
        fork = plan.forks.get(t)
        if fork is not None and t < n - 1:
            branches += len(fork.branches)
            winner = yield from _fork(ctx, line, fork, traj_id, harness)
            if winner is None:
                line.ok = False
                break
            winner.requests, winner.pause_s = line.requests, line.pause_s
            winner.compactions = line.compactions
            winner.branch = 0
            line = winner
    requests, pause_s = line.requests, line.pause_s
    ok = line.ok and done_turns == n
    if not ok:
        ctx.node.release(line.seq)
    status = "completed" if ok else "context_exhausted" if line.exhausted else "failed"
    row = trajectory_row(
        traj_id,
        "agent",
        start,
        ctx.now,
        status,
        done_turns,
        requests,
        branches,
        pause_s,
        line.compactions,
    )
    ctx.trajectory_ended(row, ok)
    on_end()


def agent_driver(cfg, ctx: WorkloadContext):
    """The generator that starts agent trajectories as the arrival process says."""
    env = ctx.env

    def start(i: int, on_end) -> None:
        ctx.trajectory_started()
        plan = sample_plan(cfg, ctx)
        env.process(agent_trajectory(cfg, ctx, i, plan, on_end))

    return arrival_strategy(cfg.arrival.kind).run(cfg.arrival, ctx, cfg.num_trajectories, start)
