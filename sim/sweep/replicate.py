"""``kvsim run --replications K``: one scenario, K seeds, a mean summary with intervals.

Responsibility: run a scenario with seeds ``s, s+1, ..., s+K-1`` (``s`` its seed) on an
executor, write each run folder to ``DIR/replications/seed-<S>/`` and ``DIR/summary.json``:
the single-run schema with every numeric value the mean over the replications, plus
``replications`` (K), ``seeds`` and ``ci95`` (``{dotted metric: [lo, hi]}``, Student's t
95 % interval of each numeric metric, K >= 2); ``warnings`` is every replication's, each
sentence prefixed ``seed S: ``. ``replication_lines`` is what the command prints.

Invariant: ``DIR`` is written only when every replication succeeded (the first failure is
raised, one line); a replication's folder is the run folder ``kvsim run`` writes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from sim.errors import KvsimError
from sim.sweep.executor import Executor, make_executor
from sim.sweep.stats import mean_summary, t975

#: the figures ``kvsim run --replications`` prints, each never below 0 (latencies, a rate)
PRINTED = ("ttft_s.p99", "itl_s.p99", "e2e_s.p99", "queue_s.p99", "output_tokens_per_s")


def _one(task: dict) -> dict[str, Any]:
    """A worker's replication: run, write its folder, return its summary (or error)."""
    from sim.run import run_scenario
    from sim.sweep.task import error_line

    try:
        result = run_scenario(task["scenario"], **{**task["overrides"], "seed": task["seed"]})
        result.summary["command"] = task.get("command")
        result.write(task["run_dir"], force=True)
    except Exception as exc:  # noqa: BLE001  (reported by the caller, one line)
        return {"seed": task["seed"], "error": error_line(exc)}
    return {"seed": task["seed"], "summary": result.summary, "error": None}


def run_replications(
    scenario: str | Path,
    out: str | Path,
    replications: int,
    *,
    overrides: dict[str, Any] | None = None,
    executor: str | Executor = "local",
    workers: int | None = None,
    command: list[str] | None = None,
    progress=None,
) -> dict[str, Any]:
    """Run K replications into ``out`` and return the mean summary (see the docstring)."""
    from sim.scenario import load_scenario

    if not 1 <= replications <= 1000:
        raise KvsimError(f"--replications must be in [1, 1000], got {replications}")
    overrides = dict(overrides or {})
    seed0 = load_scenario(str(scenario), overrides).scenario.seed
    out_dir = Path(out)
    tasks = [
        {
            "scenario": str(scenario),
            "overrides": overrides,
            "seed": seed0 + i,
            "run_dir": str(out_dir / "replications" / f"seed-{seed0 + i}"),
            "command": command,
        }
        for i in range(replications)
    ]
    own = not isinstance(executor, Executor)
    if own and executor == "local" and workers is None:
        from sim.sweep.executor import default_workers

        workers = min(replications, default_workers())
    ex = make_executor(executor, workers) if own else executor
    results: dict[int, dict] = {}
    try:
        for i, res in ex.run(_one, tasks):
            if res["error"]:
                raise KvsimError(f"replication seed {res['seed']}: {res['error']}")
            results[i] = res
            if progress is not None:
                progress(len(results), replications)
    finally:
        if own:
            ex.close()
    summaries = [results[i]["summary"] for i in range(replications)]
    summary = replication_summary(summaries, command)
    _write_json(out_dir / "summary.json", summary)
    return summary


def replication_summary(summaries: list[dict], command: list[str] | None = None) -> dict:
    """The mean summary of replications, with ``replications``, ``seeds`` and ``ci95``."""
    merged, intervals = mean_summary(summaries)
    seeds = [s["seed"] for s in summaries]
    merged["seed"] = seeds[0]
    merged["command"] = command
    merged["replications"] = len(summaries)
    merged["seeds"] = seeds
    merged["ci95"] = {k: v for k, v in intervals.items() if k not in ("seed",)}
    # every replication's warnings (the first one's alone hid the others'), each once
    merged["warnings"] = list(dict.fromkeys(
        f"seed {s['seed']}: {w}" for s in summaries for w in s.get("warnings") or []))
    return merged


def replication_lines(s: dict) -> list[str]:
    """What ``kvsim run --replications K`` prints: a head naming the interval (Student's t
    95 % interval of the mean over the K seeds, ``t(0.975, K-1)``), then each ``PRINTED``
    figure's mean with it. A bound below 0, which none of these figures can be, is printed
    as 0 with the t-interval's own bound beside it and a closing line; the interval
    intersected with [0, inf) keeps its coverage (the true mean is in it whenever it is in
    the t-interval), and ``ci95`` in summary.json keeps the arithmetic. One replication: no
    interval, and the head says so."""
    ci = s.get("ci95") or {}
    k = int(s["replications"])
    seeds = f"seeds {s['seeds'][0]}-{s['seeds'][-1]}" if k > 1 else f"seed {s['seeds'][0]}"
    if k > 1:
        head = (f"{s['scenario']}: {k} replications ({seeds}), means with Student's t 95% "
                f"intervals of the mean (n={k}, t(0.975, {k - 1}) = {t975(k - 1):g}):")  # fmt: skip
    else:
        head = f"{s['scenario']}: 1 replication ({seeds}): no interval (--replications 2 or more):"
    lines, clipped = [head], []
    for key in PRINTED:
        name, _, stat = key.partition(".")
        value = s[name][stat] if stat else s[name]
        band = ""
        lo_hi = ci.get(key)
        if lo_hi:
            lo, hi = lo_hi
            low = f"{lo:.4g}"
            if lo < 0:
                low = f"0 (t: {lo:.4g})"
                clipped.append(key)
            band = f" [{low}, {hi:.4g}]"
        lines.append(f"  {key}: {'-' if value is None else f'{value:.4g}'}{band}")
    if clipped:
        lines.append(
            f"  clipped at 0 (a latency or a rate is never negative): the t-interval reached "
            f"below 0 for {', '.join(clipped)}; {k} seeds spread too widely for its normal "
            "approximation, more replications narrow it (summary.json's ci95 keeps the "
            "t-interval)"
        )
    return lines


def _write_json(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.partial")
    try:
        tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise KvsimError(f"cannot write {path}: {exc.strerror}") from None
