"""``kvsim validate-e2e RUN_FOLDER --scenario FILE [--json]``: a real vLLM run vs kvsim.

Responsibility: read a vLLM run's request log (``RUN_FOLDER/vllm/requests.jsonl``, or a
``requests.jsonl`` given directly; ``sim.workload.vllm_requests``), replay it through the
scenario (whose workload must be ``kind: vllm_requests``; its ``path`` is replaced by this
run's log, so the replay is always of the run compared against) and print TTFT, TPOT and
latency of both sides (mean, median, p90, p95, p99, seconds) with kvsim's difference in
percent of vLLM's. Metrics as LLMServingSim computes them, anchored on ``queued_ts``:
TTFT = first token - queued, TPOT = (last token - first token) / (output tokens - 1)
(requests of one output token have none), latency = last token - queued; kvsim's are
the same instants of its replay (arrival = the row's queued time), anchored as vLLM's on
the step boundary at which the engine received the request (``queued_s``: vLLM's engine
core takes requests between steps). Also time from scheduling to first token (first token
- ``scheduled_ts``; kvsim's ``scheduled_s``: when the plan that admitted it was made, a
step before the step runs under async scheduling); NaN where the log has no
``scheduled_ts``.

A data-parallel vLLM writes the log from several engine cores, not in ``queued_ts`` order:
the rows are sorted by ``queued_ts`` (the replay reads them the same way) and the report
says how many were out of order (``rows_out_of_order``); a row with impossible timestamps
(a negative TTFT, first token after the last) is refused with its file:line.

Invariant: requests are paired in ``queued_ts`` order (the i-th row by queued time is
kvsim's trajectory i); the
command runs one simulation and writes nothing; a request kvsim did not finish is a
one-line error, never a silent drop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from sim.cli._common import print_json
from sim.errors import KvsimError

METRICS = ("ttft", "tpot", "latency", "sched_to_first")
STATS = ("mean", "median", "p90", "p95", "p99")
HELP = (
    "Replay a real vLLM run's request log (RUN_FOLDER/vllm/requests.jsonl: input_toks, "
    "output_toks, queued_ts, first_token_ts, last_token_ts) through a scenario whose workload "
    "is kind vllm_requests, and print vLLM vs kvsim TTFT, TPOT and latency (mean, median, p90, "
    "p95, p99) with the difference in percent. TTFT = first token - queued; TPOT = (last - "
    "first token) / (output - 1); latency = last token - queued; sched_to_first = first token - scheduled. Rows are sorted by "
    "queued_ts (a data-parallel vLLM logs from several engine cores; the output says how "
    "many were out of order); a row with a negative TTFT or a first token after its last "
    "is refused.\n\n"
    "Example: kvsim validate-e2e workloads/data/llmservingsim_perf/vllm_runs/RTX4090/"
    "Llama-3.1-8B --scenario workloads/validation/rtx4090_llama31_8b.yaml"
)


def register(app: typer.Typer) -> None:
    """Add ``validate-e2e`` to the app."""
    app.command("validate-e2e", help=HELP)(validate_e2e)


def validate_e2e(
    run_folder: Annotated[Path, typer.Argument(help="vLLM run folder (or its requests.jsonl).")],
    scenario: Annotated[Path, typer.Option("--scenario", help="Scenario YAML (workload kind vllm_requests).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Run the comparison and print it."""
    report = compare_run(run_folder, scenario)
    if as_json:
        print_json(report)
        return
    typer.echo(format_report(report))


def request_log(run_folder: Path) -> Path:
    """The run's ``requests.jsonl``: the path itself, ``vllm/requests.jsonl`` or
    ``requests.jsonl`` inside it."""
    p = Path(run_folder)
    if p.is_file():
        return p
    if not p.exists():
        raise KvsimError(f"{run_folder}: no such folder (give a vLLM run folder or its "
                         "requests.jsonl)")  # fmt: skip
    if not p.is_dir():
        raise KvsimError(f"{run_folder}: not a folder nor a file")
    for candidate in (p / "vllm" / "requests.jsonl", p / "requests.jsonl"):
        if candidate.is_file():
            return candidate
    raise KvsimError(f"{run_folder}: no vllm/requests.jsonl (nor requests.jsonl) in this folder")


def vllm_metrics(rows) -> dict[str, np.ndarray]:
    """TTFT, TPOT and latency (seconds) of each row of a vLLM log (NaN where undefined)."""
    missing = [i for i, r in enumerate(rows) if r.first_token_ts is None or r.last_token_ts is None]
    if missing:
        raise KvsimError(f"request log row {missing[0] + 1}: no first_token_ts/last_token_ts "
                         "(a log of a finished run is needed)")  # fmt: skip
    q = np.array([r.queued_ts for r in rows])
    first = np.array([r.first_token_ts for r in rows])
    last = np.array([r.last_token_ts for r in rows])
    out = np.array([r.output_toks for r in rows], dtype=np.float64)
    sched = np.array([np.nan if r.scheduled_ts is None else r.scheduled_ts for r in rows])
    return _metrics(first - q, last - first, last - q, out, first - sched)


def kvsim_metrics(requests) -> dict[str, np.ndarray]:
    """The same three metrics from kvsim's requests table, ordered by trajectory."""
    q = requests.sort_values("traj_id")
    bad = q[q["status"] != "finished"]
    if len(bad):
        row = bad.iloc[0]
        raise KvsimError(f"kvsim did not finish request {int(row['traj_id'])} of the log "
                         f"(status {row['status']}, {row['finish_reason']})")  # fmt: skip
    queued = q["queued_s"]  # vLLM's anchor: the boundary its engine received the request
    first = (q["first_token_s"] - queued).to_numpy(dtype=np.float64)
    gen = (q["finish_s"] - q["first_token_s"]).to_numpy(dtype=np.float64)
    lat = (q["finish_s"] - queued).to_numpy(dtype=np.float64)
    sched = (q["first_token_s"] - q["scheduled_s"]).to_numpy(dtype=np.float64)
    return _metrics(first, gen, lat, q["output_tokens"].to_numpy(dtype=np.float64), sched)


def _metrics(ttft, gen, latency, output, sched_to_first) -> dict[str, np.ndarray]:
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(output > 1, gen / (output - 1), np.nan)
    return {"ttft": ttft, "tpot": tpot, "latency": latency, "sched_to_first": sched_to_first}


def stats(values: np.ndarray) -> dict[str, float]:
    v = values[~np.isnan(values)]
    if len(v) == 0:
        return dict.fromkeys(STATS, float("nan"))
    q = np.quantile(v, [0.5, 0.9, 0.95, 0.99])
    return {"mean": float(v.mean()), "median": float(q[0]), "p90": float(q[1]),
            "p95": float(q[2]), "p99": float(q[3])}  # fmt: skip


def compare(vllm: dict[str, np.ndarray], kvsim: dict[str, np.ndarray]) -> dict[str, Any]:
    """metric -> stat -> {vllm_s, kvsim_s, diff_pct} (diff = (kvsim - vllm) / vllm)."""
    out: dict[str, Any] = {}
    for m in METRICS:
        a, b = stats(vllm[m]), stats(kvsim[m])
        out[m] = {s: {"vllm_s": a[s], "kvsim_s": b[s],
                      "diff_pct": 100.0 * (b[s] - a[s]) / a[s] if a[s] else float("nan")}
                  for s in STATS}  # fmt: skip
    return out


def compare_run(run_folder: Path, scenario: Path) -> dict[str, Any]:
    """Replay ``run_folder``'s log through ``scenario`` and compare (the report)."""
    from sim.run import build
    from sim.scenario import load_scenario
    from sim.workload.vllm_requests import read_vllm_log

    log = request_log(run_folder)
    rows, out_of_order = read_vllm_log(log)
    loaded = load_scenario(str(scenario))
    kind = loaded.scenario.workload.kind
    if kind != "vllm_requests":
        raise KvsimError(f"{scenario}: workload.kind must be vllm_requests to replay a vLLM run (got {kind})")
    sim = build(loaded, **{"workload.path": str(log.resolve()), "workload.num_requests": None})
    result = sim.run()
    report = {
        "run": str(run_folder), "request_log": str(log), "scenario": str(scenario),
        "requests": len(rows), "rows_out_of_order": out_of_order,
        "vllm_span_s": _span(rows),
        "kvsim_sim_time_s": float(result.summary["sim_time_s"]),
        "kvsim_preemptions": int(result.summary["preemptions"]),
        "metrics": compare(vllm_metrics(rows), kvsim_metrics(result.requests)),
    }  # fmt: skip
    return report


def _span(rows) -> float | None:
    """First queued to last token (None when a row has no last token)."""
    last = [r.last_token_ts for r in rows]
    return None if None in last else float(max(last) - rows[0].queued_ts)


def format_report(report: dict[str, Any]) -> str:
    """The comparison as a fixed-width table."""
    order = report.get("rows_out_of_order", 0)
    lines = [
        f"vLLM run: {report['run']} ({report['requests']} requests)",
        *([f"          {order} rows were not in queued_ts order (several engine cores "
           "write the log): sorted by queued_ts"] if order else []),
        f"kvsim:    {report['scenario']} (simulated {report['kvsim_sim_time_s']:.1f} s, "
        f"{report['kvsim_preemptions']} preemptions)",
        f"{'metric':<14} {'stat':<7} {'vllm_s':>10} {'kvsim_s':>10} {'diff_%':>8}",
    ]
    for m in METRICS:
        for s in STATS:
            c = report["metrics"][m][s]
            lines.append(f"{m:<14} {s:<7} {c['vllm_s']:>10.4f} {c['kvsim_s']:>10.4f} {c['diff_pct']:>+8.1f}")
    return "\n".join(lines)
