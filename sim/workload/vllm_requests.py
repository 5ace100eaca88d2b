"""``vllm_requests``: a real vLLM run's request log replayed request by request.

Responsibility: read a ``requests.jsonl`` as vLLM's benchmark harness writes it (one
JSON object per line: ``input_toks``, ``output_toks`` and ``queued_ts``, the engine's
monotonic clock when the request entered its queue; ``arrival_time`` and the other
timestamps are ignored here) and submit each row as an independent one-turn request
(``chat.one_turn``) at ``queued_ts`` minus the first row's, with exactly ``input_toks``
prompt tokens of its own (no content shared with another request) and exactly
``output_toks`` output tokens (the runs use fixed output lengths). ``load_vllm_requests``
is also what ``kvsim validate-e2e`` reads the measured side with.

A data-parallel vLLM writes its log from several engine cores, so rows need not be in
``queued_ts`` order: they are sorted by ``queued_ts`` (stable: equal times keep file
order) and ``read_vllm_log`` says how many rows were out of order (earlier than a row
above them). A row whose timestamps cannot happen is refused with its file:line:
``scheduled_ts`` or ``first_token_ts`` before ``queued_ts`` (a negative TTFT),
``first_token_ts`` before ``scheduled_ts``, ``last_token_ts`` before ``first_token_ts``
(or before ``queued_ts``).

Invariant: rows are replayed in ``queued_ts`` order (``num_requests``: the first N of
them); a file is read once, before the simulation runs, in bounded memory
(``MAX_FILE_BYTES``, at most ``MAX_ROWS`` rows); a bad row is a one-line ``ConfigError``
naming the file, the line and the field. This module imports nothing of ``sim.workload.config`` at import time (that
module imports the config class from here).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field

from sim.config_model import ConfigModel
from sim.errors import ConfigError
from sim.yamlio import json_value

MAX_FILE_BYTES = 256 * 1024 * 1024
MAX_ROWS = 10_000_000
MAX_TOKENS = 10_000_000  # one request's prompt or output (sim.workload.distributions' bound)
TIMESTAMPS = ("queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts")


class VllmRequestsWorkload(ConfigModel):
    """Replay of a vLLM request log (``requests.jsonl``): arrivals, prompt and output
    lengths as recorded."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    kind: Literal["vllm_requests"] = "vllm_requests"
    path: str  # requests.jsonl, relative to the scenario file
    num_requests: int | None = Field(None, ge=1, le=MAX_ROWS)  # None: every row
    time_scale: float = Field(1.0, gt=0, le=1e9)  # 0.5 replays the arrivals twice as fast


@dataclass(frozen=True)
class VllmRequest:
    """One row of the log (times on the engine's clock, seconds; None when absent)."""

    request_id: str
    input_toks: int
    output_toks: int
    queued_ts: float
    scheduled_ts: float | None = None
    first_token_ts: float | None = None
    last_token_ts: float | None = None


def _int_field(row: dict, name: str, where: str) -> int:
    v = row.get(name)
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v != int(v):
        raise ConfigError(f"{name} must be a whole number, got {v!r}", location=where, field=name)
    if not 1 <= v <= MAX_TOKENS:
        raise ConfigError(f"{name} must be in [1, {MAX_TOKENS:,}], got {int(v)}", location=where, field=name)
    return int(v)


def _time_field(row: dict, name: str, where: str, required: bool) -> float | None:
    v = row.get(name)
    if v is None and not required:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise ConfigError(f"{name} must be a finite number of seconds, got {v!r}", location=where, field=name)
    return float(v)


#: (earlier, later): a row whose ``later`` time is before its ``earlier`` one is refused
_ORDER = (
    ("queued_ts", "scheduled_ts", "scheduled before it was queued"),
    ("queued_ts", "first_token_ts", "a negative TTFT: first token before it was queued"),
    ("scheduled_ts", "first_token_ts", "first token before it was scheduled"),
    ("first_token_ts", "last_token_ts", "first token after the last token"),
    ("queued_ts", "last_token_ts", "last token before it was queued"),
)


def _check_times(times: dict, where: str) -> None:
    """Refuse a row whose timestamps cannot happen (``_ORDER``)."""
    for early, late, what in _ORDER:
        a, b = times[early], times[late]
        if a is not None and b is not None and b < a:
            raise ConfigError(f"impossible row: {what} ({late} {b!r} < {early} {a!r})",
                              location=where, field=late)  # fmt: skip


def _row(line: str, where: str) -> VllmRequest:
    row = json_value(line, where)  # bad syntax, too deep, too many digits, a key twice
    if not isinstance(row, dict):
        raise ConfigError("each line must be a JSON object", location=where)
    times = {n: _time_field(row, n, where, n == "queued_ts") for n in TIMESTAMPS}
    _check_times(times, where)
    return VllmRequest(str(row.get("request_id", "")), _int_field(row, "input_toks", where),
                       _int_field(row, "output_toks", where), **times)  # fmt: skip


def load_vllm_requests(path: Path) -> list[VllmRequest]:
    """Every row of a ``requests.jsonl`` in ``queued_ts`` order (raises a one-line
    ConfigError)."""
    return read_vllm_log(path)[0]


def read_vllm_log(path: Path) -> tuple[list[VllmRequest], int]:
    """(every row in ``queued_ts`` order, how many rows the file had out of that order)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("request log not found", location=str(path))
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ConfigError(f"request log larger than {MAX_FILE_BYTES >> 20} MiB", location=str(path))
    rows: list[VllmRequest] = []
    out_of_order = 0
    latest = -math.inf
    try:
        with path.open(encoding="utf-8") as fh:
            for i, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                if len(rows) >= MAX_ROWS:
                    raise ConfigError(f"more than {MAX_ROWS:,} rows", location=f"{path}:{i}")
                row = _row(line, f"{path}:{i}")
                out_of_order += row.queued_ts < latest
                latest = max(latest, row.queued_ts)
                rows.append(row)
    except UnicodeDecodeError:
        raise ConfigError("request log is not UTF-8 text", location=str(path)) from None
    if not rows:
        raise ConfigError("request log has no rows", location=str(path))
    if out_of_order:  # several engine cores: stable, so equal times keep file order
        rows.sort(key=lambda r: r.queued_ts)
    return rows, out_of_order


def vllm_requests_count(cfg: VllmRequestsWorkload) -> int:
    """The trajectory count known from the config (0 = every row: the driver sets it)."""
    return cfg.num_requests or 0


def replayed_rows(cfg: VllmRequestsWorkload, ctx) -> list[VllmRequest]:
    """The log's rows the replay submits: ``num_requests`` (default: all), in ``queued_ts``
    order (``kvsim validate`` reads them the same way)."""
    path = ctx.resolve(cfg.path)
    rows = load_vllm_requests(path)
    n = len(rows) if cfg.num_requests is None else cfg.num_requests
    if n > len(rows):
        raise ConfigError(f"num_requests {n} is more than the log's {len(rows)} rows",
                          location=str(path), field=f"{ctx.field_prefix}.num_requests")  # fmt: skip
    return rows[:n]


def vllm_requests_driver(cfg: VllmRequestsWorkload, ctx):
    """The replay's arrival generator (the log is read and the times computed now)."""
    from sim.workload.arrivals import arrive_at
    from sim.workload.chat import one_turn

    rows = replayed_rows(cfg, ctx)
    n = len(rows)
    ctx.set_total(n)
    t0 = rows[0].queued_ts
    times = [(r.queued_ts - t0) * cfg.time_scale for r in rows]

    def start(i: int, on_end) -> None:
        ctx.trajectory_started()
        r = rows[i]
        spans = [(ctx.new_content("prompt"), r.input_toks)]
        one_turn(ctx, "vllm_requests", r.input_toks, r.output_toks, spans, i, on_end)

    return arrive_at(ctx.env, times, start)
