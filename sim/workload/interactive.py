"""``interactive_coding_agent``: a coding assistant and a developer taking turns, fitted on
real Claude Code sessions (``sim/workload/fitted/interactive_coding_agent.yaml``).

A session is ``user_turns`` user messages (the task is the first), each answered by
``calls_per_user_turn`` LLM calls (fitted by the session's length: longer sessions have
shorter turns; one session's turns alike by ``calls_session_correlation``); every call but a turn's last issues tools, whose results are the next
call's input. The pause before a call is ``think_s`` of its input kind: ``tool`` (a tool
result: seconds, with a tail of minutes) or ``human`` (a user message: minutes, with a tail
of hours), the request's ``tool_name``. The first prompt is ``first_prompt_tokens``: the
fleet-shared ``shared_prefix_tokens`` (system prompt and tool definitions) and the task.
From call to call the prompt changes by ``delta_tokens`` of the input kind (it grows by the
previous reply and the new input; by less when the reply's reasoning is dropped), except
with ``compaction_share``, when it is rebuilt as the shared prefix and a summary
(``compacted_prompt_tokens`` in all). Each reply is ``completion_tokens`` of what follows
it (a tool call, a user message, or the end). After a call that issues tools, with
``spawn_share``, ``fan_out`` subagents start together (their own shared prefix, first
prompt, calls, growth, replies and tool times) and the session waits for all of them.

Also here: the fit (``kvsim workload fit --kind interactive_coding_agent``, from Claude
Code sessions in the kv-cache-tester format) and the observables its evidence compares
(``session_observables``: the main line through ``sim.workload.observe``, plus the
subagents').

Invariant: a plan is a pure function of the config, the fit and the named streams
``turns`` (counts), ``tokens`` (sizes), ``pauses`` (think times) and ``subagents``
(spawns and everything drawn for them).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np

from sim.errors import ConfigError
from sim.prefix.session_trace import SessionCall, Subagent, load_sessions
from sim.workload.agent import Harness, SpawnSpec, TurnSpec, run_trajectory, with_layout
from sim.workload.arrivals import arrival_strategy
from sim.workload.claude_code import HUMAN, TOOL, grown_turn, rebuilt_turn
from sim.workload.context import WorkloadContext
from sim.workload.empirical import (
    count_table,
    intraclass_correlation,
    normal_scores,
    quantile_table,
    shared_factor_uniforms,
)
from sim.workload.hints import ToolTimes, register_tool_times
from sim.workload.observe import observables
from sim.workload.params import InteractiveCodingAgentParams, calls_for, load_params

KIND = "interactive_coding_agent"
#: a call whose prompt is below this share of the previous one is a compaction
COMPACTED_BELOW = 0.5
#: user-turn bins of calls per user turn (sessions of at most 2, 5, 15 and more turns)
TURN_BINS = (2, 5, 15)


def fitted(cfg, ctx: WorkloadContext | None = None) -> InteractiveCodingAgentParams:
    """The fit a config uses (its ``params`` file, or the shipped one)."""
    if cfg.params is None:
        return load_params(KIND)
    path = ctx.resolve(cfg.params.path) if ctx is not None else cfg.params.path
    return load_params(KIND, path)


# ---------------------------------------------------------------------------- the plan
def _tokens(dist, rng, n: int) -> list[int]:
    return np.clip(np.rint(dist.sample(rng, n)), 1, None).astype(np.int64).tolist()


def _pauses(fit, cfg, kinds: list[str], rng) -> list[float]:
    """One pause per kind (drawn for both kinds, so the streams' use is fixed)."""
    n = len(kinds)
    tool, human = fit.think_s[TOOL].sample(rng, n), fit.think_s[HUMAN].sample(rng, n)
    out = np.where(np.asarray(kinds) == HUMAN, human, tool).clip(min=0.0) * cfg.time_scale
    if cfg.max_pause_s is not None:
        out = np.minimum(out, cfg.max_pause_s)
    return out.tolist()


def _prompts(first: int, floor: int, kinds: list[str], fit, rng) -> tuple[list[int], list[bool]]:
    """Each call's prompt length and whether it is a compaction."""
    n = len(kinds) + 1
    u = rng.random(n).tolist()
    deltas = {k: fit.delta_tokens[k].sample(rng, n).tolist() for k in (TOOL, HUMAN)}
    compacted = fit.compacted_prompt_tokens.sample(rng, n).tolist()
    prompts, comp = [first], [False]
    for k, kind in enumerate(kinds, start=1):
        if u[k] < fit.compaction_share.get(kind, 0.0):
            prompts.append(max(floor, round(compacted[k])))
            comp.append(True)
        else:
            prompts.append(max(floor, prompts[-1] + round(deltas[kind][k])))
            comp.append(False)
    return prompts, comp


def _line(prompts, comp, outs, pauses, kinds, zone: int) -> list[TurnSpec]:
    """Turns that send ``prompts`` (the first after a zone of ``zone`` tokens)."""
    steps = [TurnSpec(0.0, prompts[0] - zone, outs[0])]
    user = 0
    for k in range(1, len(prompts)):
        kind = kinds[k - 1]
        user += kind == HUMAN
        head = TurnSpec(
            pauses[k - 1], 1, outs[k], "user" if kind == HUMAN else "tool_result", kind, user
        )
        if comp[k]:  # rebuilt: the shared prefix and a summary
            spec, kept = rebuilt_turn(head, prompts[k], zone), None
        else:
            spec, kept = grown_turn(head, prompts[k - 1], outs[k - 1], prompts[k])
        if kept is not None:
            steps[-1] = _keep(steps[-1], kept)
        steps.append(spec)
    return steps


def _keep(spec: TurnSpec, kept: int) -> TurnSpec:
    return replace(spec, kept_output_tokens=kept)


def _calls_per_turn(cfg, fit, users: int, rng) -> np.ndarray:
    """Calls answering each of ``users`` user turns. The fitted table is drawn through a
    session-level factor (``calls_session_correlation``): one session's turns are alike
    (drawn alone, sums of heavy-tailed turns crowd the mean, and the median session had
    53-59 calls against the data's 46); a configured distribution, or a fitted one without
    a quantile function (a hand-written parametric one), is drawn turn by turn."""
    dist = cfg.calls_per_user_turn or calls_for(fit.calls_per_user_turn, users)
    if cfg.calls_per_user_turn is not None or not hasattr(dist, "ppf"):
        return dist.sample_tokens(rng, users)
    u = shared_factor_uniforms(rng.standard_normal(users + 1), fit.calls_session_correlation)
    return dist.tokens_at(u)


def _main_plan(cfg, fit, ctx: WorkloadContext) -> tuple[int, list, list[str]]:
    """(the shared zone's tokens, the main line's turns, each later call's input kind)."""
    rng_n, tok, pau = ctx.streams("turns"), ctx.streams("tokens"), ctx.streams("pauses")
    users = int((cfg.user_turns or fit.user_turns).sample_tokens(rng_n, 1)[0])
    per_turn = _calls_per_turn(cfg, fit, users, rng_n)
    kinds = [HUMAN if j == 0 else TOOL for c in per_turn.tolist() for j in range(max(1, c))][1:]
    first = int((cfg.first_prompt_tokens or fit.first_prompt_tokens).sample_tokens(tok, 1)[0])
    shared = (
        fit.shared_prefix_tokens if cfg.shared_prefix_tokens is None else cfg.shared_prefix_tokens
    )
    first = max(first, 2)
    zone = min(shared, first - 1)
    prompts, comp = _prompts(first, zone + 1, kinds, fit, tok)
    follows = [*kinds, "final"]
    outs_by = {
        k: _tokens(fit.completion_tokens[k], tok, len(follows)) for k in (TOOL, HUMAN, "final")
    }
    outs = [outs_by[f][i] for i, f in enumerate(follows)]
    pauses = _pauses(fit, cfg, kinds, pau)
    return zone, _line(prompts, comp, outs, pauses, kinds, zone), kinds


def _subagent(fit, cfg, rng) -> tuple[int, tuple]:
    """(its zone's tokens, its steps): a subagent is tool calls only."""
    sub = fit.subagents
    n = int(sub.calls.sample_tokens(rng, 1)[0])
    first = max(2, _tokens(sub.first_prompt_tokens, rng, 1)[0])
    zone = min(sub.shared_prefix_tokens, first - 1)
    kinds = [TOOL] * (n - 1)
    deltas = sub.delta_tokens.sample(rng, n).tolist()
    prompts = [first]
    for k in range(1, n):
        prompts.append(max(zone + 1, prompts[-1] + round(deltas[k])))
    outs = _tokens(sub.completion_tokens, rng, n)
    pauses = (sub.think_s.sample(rng, n).clip(min=0.0) * cfg.time_scale).tolist()
    if cfg.max_pause_s is not None:
        pauses = [min(p, cfg.max_pause_s) for p in pauses]
    return zone, tuple(_line(prompts, [False] * n, outs, pauses, kinds, zone))


def interactive_plan(cfg, ctx: WorkloadContext) -> tuple[tuple, int]:
    """(one session's steps, its shared zone's tokens)."""
    fit = fitted(cfg, ctx)
    zone, turns, kinds = _main_plan(cfg, fit, ctx)
    rng = ctx.streams("subagents")
    u = rng.random(len(turns)).tolist()
    sub = fit.subagents
    steps: list = []
    for k, turn in enumerate(turns):
        steps.append(turn)
        if not cfg.subagents or k >= len(kinds) or kinds[k] != TOOL or u[k] >= sub.spawn_share:
            continue
        fan = max(1, int(sub.fan_out.sample_tokens(rng, 1)[0]))
        made = [_subagent(fit, cfg, rng) for _ in range(fan)]
        name = f"{KIND}:subagent"
        steps.append(SpawnSpec(tuple(s for _, s in made), tuple(((name, z),) for z, _ in made)))
    return tuple(steps), zone


def interactive_driver(cfg, ctx: WorkloadContext):
    """Start sessions as the arrival process says (each with its own zone length)."""
    fitted(cfg, ctx)  # a bad params file fails before the simulation starts
    if not cfg.harness.layout().is_off:
        raise ConfigError(
            f"{KIND} has subagents with their own prompts; leave workload.harness at its defaults",
            field=f"{ctx.field_prefix}.harness",
        )

    def start(i: int, on_end) -> None:
        ctx.trajectory_started()
        steps, zone = interactive_plan(cfg, ctx)
        h = with_layout(Harness(cfg.context_limit, ((f"{KIND}:prefix", zone),)), cfg, ctx)
        ctx.env.process(run_trajectory(ctx, KIND, i, steps, h, on_end))

    return arrival_strategy(cfg.arrival.kind).run(cfg.arrival, ctx, cfg.num_trajectories, start)


# ------------------------------------------------------------------------ observables
#: the main line's observables kept in the fixture (``sim.workload.observe``)
MAIN_OBSERVABLES = (
    "calls", "user_turns", "calls_per_user_turn", "first_prompt", "completion:tool",
    "completion:human", "delta:within", "delta:user", "tool_s:tool", "tool_s:human",
)  # fmt: skip
PLOT_PANELS = (
    "calls", "calls_per_user_turn", "first_prompt", "completion:tool", "delta:within",
    "delta:user", "tool_s:tool", "tool_s:human", "subagent:calls",
)  # fmt: skip


def session_observables(trajs: list[dict]) -> dict[str, list[list]]:
    """Per observable, one list per session: the main line's (``MAIN_OBSERVABLES``) and
    the subagents': ``spawns`` (groups started together), ``fan_out``, and
    ``subagent:calls``, ``:first_prompt``, ``:completion``, ``:delta``, ``:tool_s``. A group
    is the subagents whose first call comes after the same main-line call."""
    main = [{"id": t["id"], "turns": [c for c in t["turns"] if c["branch_id"] == 0]} for t in trajs]
    obs = observables(main)
    out = {k: obs.get(k, [[] for _ in trajs]) for k in MAIN_OBSERVABLES}
    extra: dict[str, list[list]] = defaultdict(lambda: [[] for _ in trajs])
    for i, t in enumerate(trajs):
        groups: dict[int, int] = {}
        lines: dict[int, list[dict]] = defaultdict(list)
        seen_main = 0
        for c in t["turns"]:
            b = c["branch_id"]
            if b == 0:
                seen_main += 1
                continue
            if b not in lines:
                groups[seen_main] = groups.get(seen_main, 0) + 1
            lines[b].append(c)
        extra["spawns"][i].append(len(groups))
        extra["fan_out"][i].extend(groups.values())
        for calls in lines.values():
            extra["subagent:calls"][i].append(len(calls))
            extra["subagent:first_prompt"][i].append(calls[0]["prompt_tokens"])
            for a, b in zip(calls, calls[1:], strict=False):
                extra["subagent:delta"][i].append(b["prompt_tokens"] - a["prompt_tokens"])
            for c in calls:
                extra["subagent:completion"][i].append(c["completion_tokens"])
                if c["tool_s"] is not None:
                    extra["subagent:tool_s"][i].append(c["tool_s"])
    for k in ("spawns", "fan_out", "subagent:calls", "subagent:first_prompt",
              "subagent:completion", "subagent:delta", "subagent:tool_s"):  # fmt: skip
        out[k] = extra[k]
    return out


# -------------------------------------------------------------------------------- fit
def _kind(call: SessionCall) -> str:
    return HUMAN if call.after_human else TOOL


def _collect(path) -> tuple[dict, list]:
    """Per-quantity samples of the main lines, and the subagent groups."""
    v: dict[str, list] = defaultdict(list)
    groups: list[list[Subagent]] = []
    for s in load_sessions(path):
        main = [e for e in s.entries if isinstance(e, SessionCall)]
        if not main:
            continue
        v["shared"].append(s.tool_tokens + s.system_tokens)
        v["first"].append(main[0].prompt_tokens)
        per = [1]
        for a, b in zip(main, main[1:], strict=False):
            kind = _kind(b)
            if kind == HUMAN:
                per.append(1)
            else:
                per[-1] += 1
            v[f"out:{kind}"].append(a.output_tokens)
            if b.prompt_tokens < COMPACTED_BELOW * a.prompt_tokens:
                v[f"compact:{kind}"].append(1)
                v["compacted"].append(b.prompt_tokens)
            else:
                v[f"compact:{kind}"].append(0)
                v[f"delta:{kind}"].append(b.prompt_tokens - a.prompt_tokens)
        v["out:final"].append(main[-1].output_tokens)
        v["turns"].append(per)
        _pause_samples(s.entries, v, groups)
    return v, groups


def _pause_samples(entries, v: dict, groups: list) -> None:
    """Think times by kind (not the pauses that follow subagents: those hold their run),
    the subagent groups, and how many calls issued tools."""
    group: list[Subagent] = []
    prev = None
    for e in entries:
        if isinstance(e, Subagent):
            if any(isinstance(x, SessionCall) for x in e.entries):
                group.append(e)
            continue
        if prev is not None:
            if _kind(e) == TOOL:
                v["tool_calls"].append(1)
            if group:
                groups.append(group)
            elif e.think_time_s is not None:
                v[f"think:{_kind(e)}"].append(e.think_time_s)
        group, prev = [], e


def _subagent_params(groups: list[list[Subagent]], tool_calls: int) -> dict:
    s: dict[str, list] = defaultdict(list)
    for g in groups:
        for agent in g:
            calls = [e for e in agent.entries if isinstance(e, SessionCall)]
            s["shared"].append(agent.tool_tokens + agent.system_tokens)
            s["calls"].append(len(calls))
            s["first"].append(calls[0].prompt_tokens)
            for a, b in zip(calls, calls[1:], strict=False):
                s["delta"].append(b.prompt_tokens - a.prompt_tokens)
                if b.think_time_s is not None:
                    s["think"].append(b.think_time_s)
            s["out"].extend(max(1, c.output_tokens) for c in calls)
    # sessions without subagents: a zero spawn share (the rest is a placeholder)
    return {
        "spawn_share": round(len(groups) / max(1, tool_calls), 6),
        "fan_out": count_table([len(g) for g in groups] or [1]),
        "shared_prefix_tokens": int(np.median(s["shared"] or [0])),
        "calls": count_table(s["calls"] or [1]),
        "first_prompt_tokens": quantile_table(s["first"] or [1]),
        "delta_tokens": quantile_table(s["delta"] or [0]),
        "completion_tokens": quantile_table(s["out"] or [1]),
        "think_s": quantile_table(s["think"] or [0.0]),
    }


def _length_bins(turns: list[list[int]]) -> list[tuple[int, list[list[int]]]]:
    """(the bin's most user turns, its sessions' calls per turn) for each non-empty bin."""
    out, lo = [], 0
    for hi in (*TURN_BINS, max(len(t) for t in turns)):
        sessions = [t for t in turns if lo < len(t) <= hi]
        if sessions:
            out.append((int(hi), sessions))
        lo = hi
    return out


def _calls_by_length(turns: list[list[int]]) -> list[dict]:
    return [
        {"max_user_turns": hi, "calls": count_table([c for t in s for c in t])}
        for hi, s in _length_bins(turns)
    ]


def _session_correlation(turns: list[list[int]]) -> float:
    """The intraclass correlation of a session's turns' normal scores (each turn scored
    within its length bin's pool: the scale ``_calls_per_turn`` draws them on)."""
    scores = []
    for _, sessions in _length_bins(turns):
        pool = [c for t in sessions for c in t]
        scores.extend(normal_scores(pool, t) for t in sessions)
    return round(intraclass_correlation(scores), 4)


def fit_interactive_coding_agent(
    path: str | Path, licence: str = "unknown", data: str | None = None
) -> dict:
    """Fit ``interactive_coding_agent`` parameters from Claude Code sessions."""
    from sim.workload.params import fit_source, validate_params

    v, groups = _collect(path)
    n_calls = sum(sum(t) for t in v["turns"])
    out = {
        "kind": KIND,
        "source": fit_source(data or str(path), licence, len(v["first"]), n_calls,
                          "main lines fitted; subagents separately (docs/workloads.md)"),
        "shared_prefix_tokens": int(np.median(v["shared"])),
        "user_turns": count_table([len(t) for t in v["turns"]]),
        "calls_per_user_turn": _calls_by_length(v["turns"]),
        "calls_session_correlation": _session_correlation(v["turns"]),
        "first_prompt_tokens": quantile_table(v["first"]),
        "completion_tokens": {
            k: quantile_table([max(1, x) for x in v[f"out:{k}"]]) for k in (TOOL, HUMAN, "final")
        },
        "delta_tokens": {k: quantile_table(v[f"delta:{k}"]) for k in (TOOL, HUMAN)},
        "compaction_share": {k: round(float(np.mean(v[f"compact:{k}"])), 6) for k in (TOOL, HUMAN)},
        "compacted_prompt_tokens": quantile_table(v["compacted"] or [0]),
        "think_s": {k: quantile_table(v[f"think:{k}"]) for k in (TOOL, HUMAN)},
        "subagents": _subagent_params(groups, len(v["tool_calls"])),
    }  # fmt: skip
    validate_params(KIND, out, str(path))
    return out


def _tool_times(cfg, ctx: WorkloadContext) -> ToolTimes:
    """The main line's think times by input kind (``tool``, ``human``), scaled and capped as
    the plan does. A subagent's pauses (category ``tool`` too) get the main line's tool
    estimate: the hint knows a pause by its category only."""
    fit = fitted(cfg, ctx)
    return ToolTimes({TOOL: fit.think_s[TOOL], HUMAN: fit.think_s[HUMAN]}, cfg.time_scale,
                     cfg.max_pause_s)  # fmt: skip


register_tool_times(KIND, _tool_times)
