"""``kvsim workload fit``: fitted parameters of a workload kind from recorded data.

Responsibility: read a source in its own format and fit the parameters of one kind
(``sim.workload.params``), keeping tails: every continuous quantity is a quantile table
(``sim.workload.empirical.QUANTILE_KNOTS``: p0.5, p99, p99.9 and the maximum included),
counts keep their exact shares, and the coding agent's tool-time timeouts are a
mixture component of their own.

- ``coding_agent``: a ``turns.jsonl`` file (``sim.workload.turns_file``; the SWE-agent
  DeepSeek data or a user's own logs);
- ``function_calling``: a BFCL ``steps.csv`` (``run, model, id, turn, step,
  input_tokens, output_tokens, tool_calls``);
- ``human_in_loop``: a tau-bench ``messages.jsonl`` (``task_id, trial, idx, role,
  est_tokens, tool_names, tool_name``);
- ``multi_agent_team``: a folder of Parrot MetaGPT logs (``log_*.jsonl``);
- ``interactive_coding_agent``: Claude Code sessions (kv-cache-tester ``.jsonl[.gz]`` or a
  folder of ``.json``; ``sim.workload.interactive``).

Invariant: every value a fit reads is checked first: a negative or NaN token count or
time, text where a number belongs, or bytes that are not UTF-8 text, is a one-line
error naming the file, line and field (``sim.workload.turns_file``); a fit is a pure
function of the file's content (no randomness, no clock), so
re-running ``workloads/fit/fit_all.py`` on the same data writes the same files; every
result validates against its params model before it is returned.
"""

from __future__ import annotations

import io
import json
import math
from collections import Counter
from pathlib import Path

import numpy as np

from sim.errors import ConfigError, UnknownNameError
from sim.workload.distributions import MAX_TOKENS
from sim.workload.empirical import count_table, quantile_table, shares, spearman
from sim.workload.interactive import fit_interactive_coding_agent
from sim.workload.params import FITTED_KINDS, fit_source, validate_params
from sim.workload.turns_file import Call, growth, read_turns, text_line
from sim.yamlio import json_value, read_bytes_bounded

#: a category with fewer tool calls than this is pooled into ``other``
MIN_CATEGORY_CALLS = 20
#: tool names kept per category (the rest pooled as ``other``)
TOP_TOOLS = 6


# ----------------------------------------------------------------------- coding agent
def fold_categories(trajs: dict[str, list[Call]]) -> dict[str, list[str]]:
    """Each trajectory's call categories: rare ones pooled as ``other``, the last call
    (the submission; no tool follows) ``final``."""
    counts = Counter(c.category for calls in trajs.values() for c in calls[:-1])
    keep = {k for k, n in counts.items() if n >= MIN_CATEGORY_CALLS}
    out = {}
    for key, calls in trajs.items():
        cats = [c.category if c.category in keep else "other" for c in calls[:-1]]
        out[key] = [*cats, "final"]
    return out


def _timeout_s(timed: list[float]) -> float:
    """The harness timeout behind the killed calls: their shortest time, floored to 5 s."""
    if not timed:
        return 60.0  # mini-swe-agent's default; no call in the data hit it
    return max(5.0, 5.0 * np.floor(min(timed) / 5.0))


def fit_coding_agent(path: str | Path, licence: str = "unknown", data: str | None = None) -> dict:
    """Fit ``coding_agent`` parameters from a ``turns.jsonl`` file."""
    trajs = read_turns(path)
    cats = fold_categories(trajs)
    per: dict[str, dict[str, list]] = {}
    start: Counter = Counter()
    trans: dict[str, Counter] = {}
    timed: list[float] = []
    firsts, finals, turns, hits = [], [], [], []
    for key, calls in trajs.items():
        cat = cats[key]
        turns.append(len(calls))
        firsts.append(calls[0].prompt_tokens)
        finals.append(calls[-1].completion_tokens)
        if calls[0].cache_hit_tokens is not None:
            hits.append(calls[0].cache_hit_tokens)
        if len(calls) > 1:
            start[cat[0]] += 1
        for t, call in enumerate(calls[:-1]):
            c = per.setdefault(cat[t], {"comp": [], "tool": [], "grow": [], "pair": [], "n": 0})
            c["n"] += 1
            c["comp"].append(call.completion_tokens)
            g = growth(calls, t)
            if g is not None and g >= 1:
                c["grow"].append(g)
            c.setdefault("names", []).append(call.tool)
            if call.timed_out and call.tool_s is not None:
                timed.append(call.tool_s)
                c["timeouts"] = c.get("timeouts", 0) + 1
            elif call.tool_s is not None and call.tool_s >= 0:  # < 0: clock skew, dropped
                c["tool"].append(call.tool_s)
                if g is not None and g >= 1:
                    c["pair"].append((call.tool_s, g))
            if cat[t + 1] != "final":
                trans.setdefault(cat[t], Counter())[cat[t + 1]] += 1
    if not per:
        raise ConfigError("no trajectory has two calls: nothing to fit", location=str(path))
    timeout = _timeout_s(timed)
    n_tool = sum(c["n"] for c in per.values())
    categories = {}
    for name in sorted(per, key=lambda k: -per[k]["n"]):
        c = per[name]
        pairs = np.asarray(c["pair"], dtype=np.float64).reshape(-1, 2)
        categories[name] = {
            "share": round(c["n"] / n_tool, 6),
            "start": round(start[name] / max(1, sum(start.values())), 6),
            "next": _normalised(trans.get(name)) or _normalised(start),
            "tools": shares(c["names"], TOP_TOOLS),
            "completion_tokens": quantile_table(c["comp"], 1),
            "tool_s": quantile_table(c["tool"] or [0.0]),
            "growth_tokens": quantile_table(c["grow"] or [1], 1),
            "rank_correlation": round(spearman(pairs[:, 0], pairs[:, 1]), 4),
            "timeout_share": round(c.get("timeouts", 0) / c["n"], 6),
        }
    overhead = [t - timeout for t in timed] or [0.0]
    sys_tokens = int(Counter(hits).most_common(1)[0][0]) if hits else 0
    out = {
        "kind": "coding_agent",
        "source": fit_source(
            data or Path(path).name,
            licence,
            len(trajs),
            sum(len(v) for v in trajs.values()),
            f"{len(timed)} tool calls killed at the {timeout:g} s timeout",
        ),
        "system_prompt_tokens": sys_tokens,
        "turns": quantile_table(turns, 1),
        "first_prompt_tokens": quantile_table(firsts, 1),
        "final_completion_tokens": quantile_table(finals, 1),
        "timeout_s": float(timeout),
        "timeout_overhead_s": quantile_table(overhead),
        "categories": categories,
    }
    validate_params("coding_agent", out, str(path))
    return out


def _normalised(counter: Counter | None) -> dict[str, float]:
    if not counter:
        return {}
    total = sum(counter.values())
    return {k: round(v / total, 6) for k, v in sorted(counter.items())}


# ------------------------------------------------------------------- function calling
def _read_csv(path: Path, columns: list[str]):
    import pandas as pd

    if not path.is_file():
        raise ConfigError("no such file", location=str(path))
    try:
        frame = pd.read_csv(io.BytesIO(read_bytes_bounded(path)), usecols=lambda c: c in columns)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text (a binary file?): byte {exc.object[exc.start]:#04x} "
                          f"at byte {exc.start:,}", location=str(path)) from None  # fmt: skip
    except (ValueError, OSError, pd.errors.ParserError) as exc:
        raise ConfigError(f"cannot read: {str(exc).splitlines()[0]}", location=str(path)) from None
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ConfigError(f"no column {missing[0]!r}", location=str(path))
    return frame


def _check_counts(frame, path: Path, columns: dict[str, int]) -> None:
    """Each column a whole number >= its low bound on every row (no negative or NaN token
    count, no text); the first bad cell is a one-line error at its line of the CSV (the
    header is line 1)."""
    import pandas as pd

    for col, low in columns.items():
        values = pd.to_numeric(frame[col], errors="coerce")
        bad = ~values.between(low, MAX_TOKENS) | (values != values.round())
        if bad.any():
            row = int(bad.to_numpy().argmax())
            cell = frame[col].iloc[row]
            cell = cell.item() if hasattr(cell, "item") else cell  # numpy -> plain for the text
            raise ConfigError(f"expected a whole number in [{low}, {MAX_TOKENS:,}], got {cell!r}",
                              location=f"{path}:{row + 2}", field=col)  # fmt: skip


def fit_function_calling(path: str | Path, licence: str = "unknown", data: str | None = None):
    """Fit ``function_calling`` parameters from a BFCL ``steps.csv``."""
    path = Path(path)
    cols = ["run", "model", "id", "turn", "step", "input_tokens", "output_tokens", "tool_calls"]
    d = _read_csv(path, cols)
    _check_counts(d, path, {"turn": 0, "step": 0, "input_tokens": 1, "output_tokens": 0})
    d = d.sort_values(["run", "model", "id", "turn", "step"], kind="stable")
    g = d.groupby(["run", "model", "id"], sort=False)
    nxt_in, nxt_turn = g.input_tokens.shift(-1), g.turn.shift(-1)
    delta = nxt_in - d.input_tokens
    within = (nxt_turn == d.turn).to_numpy()
    boundary = (nxt_turn.notna() & (nxt_turn != d.turn)).to_numpy()
    first = g.input_tokens.first().to_numpy()
    user_growth = np.maximum(1, delta[boundary].to_numpy())
    names = [n for cell in d.tool_calls.dropna() for n in str(cell).split("|") if n]
    calls = d.groupby(["run", "model", "id", "turn"], sort=False).step.max() + 1
    per_task = [v.tolist() for _, v in calls.groupby(level=[0, 1, 2], sort=False)]
    turns_per_task = [len(v) for v in per_task]
    out = {
        "kind": "function_calling",
        "source": fit_source(
            data or path.name,
            licence,
            g.ngroups,
            len(d),
            f"{int((delta[boundary] <= 0).sum())} of {int(boundary.sum())} user-turn prompts "
            "shrink (earlier reasoning dropped); their growth is taken as 1 token",
        ),
        "doc_tokens": int(max(0, np.percentile(first, 1) - np.median(user_growth))),
        "first_prompt_tokens": quantile_table(first, 1),
        "user_turns": count_table((g.turn.max() + 1).to_numpy()),
        "calls_per_user_turn": _calls_by_length(per_task, turns_per_task),
        "completion_tokens": quantile_table(d.output_tokens.to_numpy(), 1),
        "call_growth_tokens": quantile_table(delta[within].to_numpy(), 1),
        "user_growth_tokens": quantile_table(user_growth, 1),
        "observation_min_tokens": int(max(1, delta[within].min())),
        "rank_correlation": round(
            spearman(d.output_tokens[within].to_numpy(), delta[within].to_numpy()), 4
        ),
        "tools": shares(names, 15),
    }
    validate_params("function_calling", out, str(path))
    return out


# ---------------------------------------------------------------------- human in loop
def _read_jsonl(path: Path) -> list[tuple[int, dict]]:
    """(line number, object) of every non-blank line; a line that is not a JSON object
    (or not UTF-8 text) is a one-line error naming it."""
    if not path.is_file():
        raise ConfigError("no such file", location=str(path))
    rows = []
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            if raw.strip():
                where = f"{path}:{lineno}"
                obj = json_value(text_line(raw, where), where)  # syntax, depth, digits, a key twice
                if not isinstance(obj, dict):
                    raise ConfigError("expected a JSON object per line", location=where)
                rows.append((lineno, obj))
    return rows


def _count(value, where: str, field: str, low: int = 0) -> int:
    """A token count read from a log: a whole number in [low, MAX_TOKENS] (no negative
    count, no NaN), else a one-line error naming the file, line and field."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value != int(value) or not low <= value <= MAX_TOKENS:
        raise ConfigError(f"expected a whole number in [{low}, {MAX_TOKENS:,}], got {value!r}",
                          location=where, field=field)  # fmt: skip
    return int(value)


def conversations(path: Path) -> list[list[dict]]:
    """tau-bench messages grouped by (task, trial), in message order."""
    rows = _read_jsonl(path)
    need = ("task_id", "trial", "idx", "role", "est_tokens")
    groups: dict[tuple, list[dict]] = {}
    for lineno, r in rows:
        for f in need:
            if f not in r:
                raise ConfigError("missing field", location=f"{path}:{lineno}", field=f)
        _count(r["est_tokens"], f"{path}:{lineno}", "est_tokens")
        groups.setdefault((r["task_id"], r["trial"]), []).append(r)
    return [sorted(v, key=lambda r: r["idx"]) for v in groups.values()]


def fit_human_in_loop(path: str | Path, licence: str = "unknown", data: str | None = None):
    """Fit ``human_in_loop`` parameters from a tau-bench ``messages.jsonl``."""
    path = Path(path)
    convs = conversations(path)
    user_turns, first_calls, later_calls, users, replies, policy = [], [], [], [], [], []
    pairs: list[tuple[int, int]] = []  # (a reply, the answered user message after it)
    tools: dict[str, dict[str, list]] = {}
    calls_total: list[int] = []
    for msgs in convs:
        per_turn = []
        for i, m in enumerate(msgs):
            role, tokens = m["role"], max(1, int(m["est_tokens"]))
            if role == "system":
                policy.append(tokens)
            elif role == "user":
                if i + 1 < len(msgs) and msgs[i + 1]["role"] == "assistant":
                    users.append(tokens)  # an unanswered last message (###STOP###) starts no turn
                per_turn.append(0)
            elif role == "assistant" and per_turn:
                per_turn[-1] += 1
                if not m.get("tool_names"):
                    replies.append(tokens)
                    if i + 2 < len(msgs) and msgs[i + 1]["role"] == "user" and (
                        msgs[i + 2]["role"] == "assistant"
                    ):
                        pairs.append((tokens, max(1, int(msgs[i + 1]["est_tokens"]))))
                    continue
                result, j = 0, i + 1
                while j < len(msgs) and msgs[j]["role"] == "tool":
                    result, j = result + int(msgs[j]["est_tokens"]), j + 1
                t = tools.setdefault(str(m["tool_names"][0]), {"call": [], "result": []})
                t["call"].append(tokens)
                t["result"].append(max(1, result))
        per_turn = [k for k in per_turn if k]
        if per_turn:
            first_calls.append(per_turn[0])
            later_calls.append(per_turn[1:])
            user_turns.append(len(per_turn))
            calls_total.append(sum(per_turn))
    if not policy or not user_turns:
        raise ConfigError("no system message or no assistant call", location=str(path))
    out = {
        "kind": "human_in_loop",
        "source": fit_source(
            data or path.name,
            licence,
            len(convs),
            len(replies) + sum(len(t["call"]) for t in tools.values()),
            "message tokens are chars/4 estimates; the data has no timings",
        ),
        "policy_prompt_tokens": int(np.median(policy)),
        "user_turns": count_table(user_turns),
        "first_turn_calls": count_table(first_calls),
        "calls_per_user_turn": _calls_by_length(later_calls, user_turns),
        "user_message_tokens": quantile_table(users, 1),
        "reply_tokens": quantile_table(replies or [1], 1),
        "reply_user_rank_correlation": round(
            spearman([r for r, _ in pairs], [q for _, q in pairs]), 4
        ),
        "tools": _service_tools(tools),
        "max_calls": _step_limit(calls_total),
    }
    validate_params("human_in_loop", out, str(path))
    return out


#: the fewest conversations behind one table of calls per user turn (a user-turn count with
#: fewer shares its table with the next longer ones)
MIN_CONVERSATIONS_PER_BIN = 20


def _calls_by_length(later: list[list[int]], user_turns: list[int]) -> list[dict]:
    """Count tables of calls per user turn (``later[i]``: conversation i's turns counted),
    one per user-turn count, or per run of consecutive counts holding together at least
    ``MIN_CONVERSATIONS_PER_BIN`` conversations.

    Why per count and not per tercile: how many calls a turn takes depends on how many
    turns the conversation has (BFCL: 10.0 calls per turn for one-turn tasks, 2.0 for
    eight-turn ones), so a table pooled over several counts gives a short conversation the
    long ones' turns and a long one the short ones' turns; summed over the turns, that
    overshoots the upper tail of calls per conversation (BFCL's p90: drawn from terciles,
    9.8 % of tasks above 17 calls against the data's 7.9 %, so the p90 reads 18 in half
    of the samples; per count 8.8 %)."""
    turns = np.asarray(user_turns)
    counts = np.bincount(turns)
    bounds, held = [], 0
    for n in range(1, len(counts)):
        held += int(counts[n])
        if held >= MIN_CONVERSATIONS_PER_BIN:
            bounds.append(n)
            held = 0
    if held and bounds:  # the longest few join the last table
        bounds[-1] = int(turns.max())
    elif not bounds:
        bounds = [int(turns.max())]
    out, low = [], 0
    for bound in bounds:
        calls = [k for ks, n in zip(later, user_turns, strict=True) if low < n <= bound for k in ks]
        if calls:
            out.append({"max_user_turns": bound, "calls": count_table(calls)})
        low = bound
    if not out:
        out.append({"max_user_turns": int(turns.max()), "calls": count_table([1])})
    out[-1]["max_user_turns"] = max(int(turns.max()), out[-1]["max_user_turns"])
    return out


def _step_limit(calls: list[int]) -> int | None:
    """The harness's step limit: the most calls any conversation made, when at least 1 %
    of them (and two) stopped exactly there (tau-bench's ``max_num_steps``)."""
    top = max(calls)
    hits = sum(c == top for c in calls)
    return top if hits >= max(2, 0.01 * len(calls)) else None


def _service_tools(tools: dict[str, dict[str, list]]) -> dict:
    """Per tool (the rare ones pooled as ``other``): share, call and result sizes."""
    total = sum(len(t["call"]) for t in tools.values())
    pooled: dict[str, dict[str, list]] = {}
    for name, t in sorted(tools.items(), key=lambda kv: -len(kv[1]["call"])):
        key = name if len(t["call"]) >= MIN_CATEGORY_CALLS else "other"
        p = pooled.setdefault(key, {"call": [], "result": []})
        p["call"] += t["call"]
        p["result"] += t["result"]
    if not pooled:
        pooled["tool"] = {"call": [1], "result": [1]}
    return {
        name: {
            "share": round(len(p["call"]) / max(1, total), 6),
            "call_tokens": quantile_table(p["call"], 1),
            "result_tokens": quantile_table(p["result"], 1),
        }
        for name, p in pooled.items()
    }


# ------------------------------------------------------------------- multi-agent team
def team_rounds(folder: Path) -> list[list[dict]]:
    """The rounds of a Parrot MetaGPT log folder, in order: per round one dict per call
    with ``prompt``, ``completion`` (tokens), ``system``, ``user`` (text) and ``file``."""
    files = sorted(folder.glob("log_*.jsonl")) if folder.is_dir() else []
    if not files:
        raise ConfigError("no log_*.jsonl files (Parrot MetaGPT logs)", location=str(folder))
    rounds: dict[int, list[dict]] = {}
    for f in files:
        for lineno, obj in _read_jsonl(f):
            for key, queries in obj.items():
                if not key.endswith("_queries"):
                    continue
                r = int(key[1:].split("_")[0])
                responses = obj.get(f"r{r}_responses", {})
                calls = []
                for name, q in queries.items():
                    usage = responses.get(name, {}).get("usage")
                    if usage is None:
                        raise ConfigError(f"round {r}: no usage for {name!r}", location=f"{f}:{lineno}")
                    where = f"{f}:{lineno}"
                    calls.append(
                        {
                            "file": name,
                            "prompt": _count(usage.get("prompt_tokens"), where, "prompt_tokens", 1),
                            "completion": _count(usage.get("completion_tokens"), where,
                                                 "completion_tokens"),  # fmt: skip
                            "system": q.get("system", ""),
                            "user": q.get("user_msg", ""),
                        }
                    )
                rounds[r] = calls
    return [rounds[r] for r in sorted(rounds)]


def fit_multi_agent_team(path: str | Path, licence: str = "unknown", data: str | None = None):
    """Fit ``multi_agent_team`` parameters from a folder of Parrot MetaGPT logs."""
    import os

    from sim.workload.multi_agent import round_role

    folder = Path(path)
    rounds = team_rounds(folder)
    arch = rounds[0][0]
    per: dict[str, dict[str, list]] = {}
    for r, calls in enumerate(rounds[1:], 1):
        role = per.setdefault(round_role(r), {"sys": [], "ctx": [], "own": [], "out": []})
        common = len(os.path.commonprefix([c["user"] for c in calls])) if len(calls) > 1 else 0
        for c in calls:
            chars = max(1, len(c["system"]) + len(c["user"]))
            sys_t = c["prompt"] * len(c["system"]) / chars
            own_t = max(1.0, c["prompt"] * (len(c["user"]) - common) / chars)
            role["sys"].append(sys_t)
            role["own"].append(own_t)
            role["ctx"].append(max(1.0, c["prompt"] - sys_t - own_t))
            role["out"].append(c["completion"])
    roles = {
        name: {
            "system_tokens": int(round(float(np.median(v["sys"])))),
            "context_tokens": quantile_table(v["ctx"], 1),
            "branch_tokens": quantile_table(v["own"], 1),
            "completion_tokens": quantile_table(v["out"], 1),
        }
        for name, v in per.items()
    }
    out = {
        "kind": "multi_agent_team",
        "source": fit_source(
            data or folder.name,
            licence,
            1,
            sum(len(c) for c in rounds),
            "one team run; the split of a prompt into role, shared context and the branch's "
            "own part is by characters (the usage counts are exact)",
        ),
        "task_tokens": arch["prompt"],
        "architect_tokens": arch["completion"],
        "branches": max(len(c) for c in rounds[1:]),
        "rounds": len(rounds) - 1,
        "roles": roles,
    }
    validate_params("multi_agent_team", out, str(folder))
    return out


FITTERS = {
    "coding_agent": fit_coding_agent,
    "function_calling": fit_function_calling,
    "human_in_loop": fit_human_in_loop,
    "multi_agent_team": fit_multi_agent_team,
    # Claude Code sessions (kv-cache-tester format): sim.workload.interactive
    "interactive_coding_agent": fit_interactive_coding_agent,
}
assert set(FITTERS) == set(FITTED_KINDS)


def fit(kind: str, path: str | Path, licence: str = "unknown", data: str | None = None) -> dict:
    """Fit ``kind``'s parameters from the source at ``path``."""
    if kind not in FITTERS:
        raise UnknownNameError("fitted workload kind", kind, list(FITTERS))
    return FITTERS[kind](path, licence=licence, data=data)


def dump_params(params: dict) -> str:
    """The YAML text of fitted parameters (with a header naming the source and licence)."""
    import yaml

    params = json.loads(json.dumps(params, default=lambda o: o.item()))  # numpy -> plain
    src = params["source"]
    head = (
        f"# kvsim fitted parameters ({params['kind']}), written by `kvsim workload fit`.\n"
        f"# source: {src['data']}\n# licence of the data: {src['licence']}\n"
    )
    return head + yaml.safe_dump(params, sort_keys=False, default_flow_style=None, width=100)
