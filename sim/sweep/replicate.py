"""``kvsim run --replications K``: one scenario, K seeds, a mean summary with intervals.

Responsibility: run a scenario with seeds ``s, s+1, ..., s+K-1`` (``s`` its seed) on an
executor, write each run folder to ``DIR/replications/seed-<S>/`` and ``DIR/summary.json``:
the single-run schema with every numeric value the mean over the replications, plus
``replications`` (K), ``seeds`` and ``ci95`` (``{dotted metric: [lo, hi]}``, Student's t
95 % interval of each numeric metric, K >= 2).

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
from sim.sweep.stats import mean_summary


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
    return merged


def _write_json(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.partial")
    try:
        tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise KvsimError(f"cannot write {path}: {exc.strerror}") from None
