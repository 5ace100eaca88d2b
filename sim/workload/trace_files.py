"""The files a workload config names (traces, a fitted-parameters file), read as its run
reads them (``kvsim validate``).

Responsibility: ``names_traces(cfg)`` says whether a workload config reads a trace when it
runs; ``read_traces(cfg, base_dir)`` reads each one with the function its run calls
(``sim.workload.chat_trace.trace_length_values`` and ``chat_arrival``, which the chat
run calls,
``sim.workload.arrivals.trace_seconds``, ``sim.workload.mooncake_trace.replayed`` and
``timestamp_values``, ``sim.workload.agent_trace.recorded``,
``sim.workload.claude_code_trace.recorded``, ``sim.workload.vllm_requests.replayed_rows``), so a
bad row is the same one-line error (``FILE: data row N: ...``, ``FILE:LINE: ...``) under
``kvsim validate`` as under ``kvsim run``, with the same bounds; and a fitted kind's
``params: {path: FILE}`` (``coding_agent``, ``function_calling``, ``human_in_loop``,
``multi_agent_team``, ``interactive_coding_agent``) with ``sim.workload.params.load_params``,
the reader each kind's ``fitted`` calls, at the path its run resolves (``FILE:LINE: field:
message``, the bounded YAML loader's limits). A ``mix`` reads each component's. A plug-in
kind's files are its own driver's to read (not read here).

Invariant: a config that names no trace and no fit (``names_traces`` False, no
``params``) imports no reader (the readers bring numpy: ``kvsim validate`` of a scenario
without a trace stays without it; a CSV trace is read without pandas,
``sim.workload.traces``); the files are only read, never simulated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: the kinds that replay a trace file (their shipped sample when the config names none)
_REPLAY_KINDS = ("mooncake", "agent_trace", "claude_code", "vllm_requests")


def names_traces(cfg: Any) -> bool:
    """Whether a run of workload config ``cfg`` reads a trace file."""
    if cfg.kind == "mix":
        return any(names_traces(c) for c in cfg.components)
    if cfg.kind in _REPLAY_KINDS:
        return True
    lengths: Any = getattr(cfg, "lengths", None)
    arrival: Any = getattr(cfg, "arrival", None)
    return (cfg.kind == "chat" and lengths.kind == "trace") or (
        getattr(arrival, "kind", None) == "trace" and getattr(arrival, "path", None) is not None
    )


def names_params(cfg: Any) -> bool:
    """Whether a run of workload config ``cfg`` reads a fitted-parameters file of its own
    (``params: {path: FILE}``; None: the shipped fit, checked when it is committed)."""
    if cfg.kind == "mix":
        return any(names_params(c) for c in cfg.components)
    return cfg.kind in _FITTED_KINDS and getattr(cfg, "params", None) is not None


#: the shipped kinds whose ``params`` names a fit (``sim.workload.params.PARAMS_MODELS``'s
#: keys, tested equal; text here so that a config without a fit imports nothing)
_FITTED_KINDS = ("coding_agent", "function_calling", "human_in_loop", "multi_agent_team",
                 "interactive_coding_agent")  # fmt: skip


def read_traces(cfg: Any, base_dir: Path, field_prefix: str = "workload") -> list[int]:
    """Read every trace file and fitted-parameters file workload config ``cfg`` names
    (paths relative to ``base_dir``) as its run does; a bad file or row raises the run's
    ``KvsimError``. Returns the prompt tokens of every request a one-turn replay
    (``mooncake``, ``vllm_requests``; a mix's components too) submits as recorded, for
    ``too_long_warning``; empty for the other kinds (their prompts grow turn by turn)."""
    if not (names_traces(cfg) or names_params(cfg)):
        return []
    if cfg.kind == "mix":
        prompts: list[int] = []
        for i, comp in enumerate(cfg.components):
            prompts += read_traces(comp, base_dir, f"{field_prefix}.components.{i}")
        return prompts
    from sim.workload.context import WorkloadContext

    unused: Any = None  # the readers use the context's paths and field names only
    ctx = WorkloadContext(unused, unused, unused, unused, base_dir, 0)
    ctx.field_prefix = field_prefix
    if names_params(cfg):  # as each fitted kind's ``fitted(cfg, ctx)`` reads it
        from sim.workload.params import load_params

        load_params(cfg.kind, ctx.resolve(cfg.params.path))
    if not names_traces(cfg):
        return []
    arrival: Any = getattr(cfg, "arrival", None)
    prompts = []
    if cfg.kind == "chat":
        if cfg.lengths.kind == "trace":
            from sim.workload.chat_trace import trace_length_values

            trace_length_values(cfg.lengths, ctx)
        from sim.workload.chat_trace import chat_arrival

        arrival = chat_arrival(cfg, ctx)  # a trace arrival reads the lengths file
    elif cfg.kind == "mooncake":
        from sim.workload.mooncake_trace import replayed, timestamp_values, trace_path

        rows = replayed(cfg, ctx)
        prompts = [r.input_length for r in rows]
        if arrival.kind == "trace" and arrival.path is None:  # the trace's own times
            timestamp_values(rows, str(trace_path(cfg, ctx)), cfg.start_row)
    elif cfg.kind == "agent_trace":
        from sim.workload.agent_trace import recorded

        recorded(cfg, ctx)
    elif cfg.kind == "claude_code":
        from sim.workload.claude_code_trace import recorded as sessions

        sessions(cfg, ctx)
    elif cfg.kind == "vllm_requests":
        from sim.workload.vllm_requests import replayed_rows

        prompts = [r.input_toks for r in replayed_rows(cfg, ctx)]
    if getattr(arrival, "kind", None) == "trace" and getattr(arrival, "path", None) is not None:
        from sim.workload.arrivals import trace_seconds

        trace_seconds(arrival, ctx)
    return prompts


def too_long_warning(prompts: list[int], max_model_len: int | None) -> str:
    """The one-line warning of replayed requests whose prompt leaves no room for one output
    token in the window (``prompt >= max_model_len``: the scheduler rejects them,
    ``rejected_too_long``), or "" when every one fits or there is no window."""
    if max_model_len is None:
        return ""
    long = [p for p in prompts if p >= max_model_len]
    if not long:
        return ""
    return (
        f"workload: {len(long):,} of {len(prompts):,} replayed requests "
        f"({100 * len(long) / len(prompts):.1f}%) have prompts of at least "
        f"scheduler.max_model_len {max_model_len:,} tokens (the longest {max(long):,}): "
        "the run rejects them (rejected_too_long); replay rows that fit (start_row, "
        "num_requests) or use a model with a longer window"
    )
