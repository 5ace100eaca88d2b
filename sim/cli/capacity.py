"""``kvsim capacity SCENARIO --slo METRIC=VALUE... [--search concurrency|arrival_rate|nodes]``.

Invariant: thin: flags are parsed here, the search is ``sim.sweep.find_capacity`` (or
``find_capacities`` with ``--vary``); ``--json`` prints one JSON object and nothing else
on stdout (``{"capacity", "analytic_estimate", "gap", "points", "warnings", ...}``; with
``--vary`` ``{"vary", "values", "configurations": [...], "comparisons": [...]}``); progress
goes to stderr, each probe's load in words (``load 12``, ``2 nodes``). The summary prints
every ``warnings`` line (a measurement window that describes little of the runs) as
``WARNING: ...``. Unless ``--no-error-band``, the answer is searched again at step times
-/+ the cost model's error (``sim.sweep.error_band``; JSON ``error_band``) and printed with
the run's ``accuracy``. Without ``--out`` nothing is written (no run folders); with it, ``DIR/runs/``,
``DIR/capacity.json`` and ``DIR/points.parquet`` (and ``DIR/capacity.png`` with
``--vary``). The summary puts each SLO's value in the measurement window beside the whole
run's at the answer, prints the answer's ``notes`` and its cost per token. Exit status: 0
an answer, 1 no load met the SLOs (with ``--vary``: in no configuration; the answer is
still printed and kept), 2 a bad flag or scenario.
"""

from __future__ import annotations

import json
import os
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer

from sim.errors import KvsimError

#: every ``--search`` (its help text names them, tests/cli/test_capacity_cli.py keeps the
#: two the same): the load searches of ``sim.sweep.capacity.SEARCHES``, then the grid of
#: prefill:decode splits (``sim.sweep.pd_ratio``)
PD_RATIO = "pd_ratio"

HELP = """The largest load that meets every SLO (--search nodes: the fewest nodes of the
scenario's cluster at its own load; --search pd_ratio: every prefill:decode split of a
disaggregated cluster's instances and aggregated serving of the same GPUs, at its own
load), by bracketing and bisection with replications (seed
s+i for replication i, in every configuration), with a 95 % interval and F37's analytic
estimate beside it.

SLOs: <metric>_<stat>_s=SECONDS, metric ttft, itl, e2e, queue or resume_latency, stat
mean, p50, p90, p95 or p99 (ttft_p99_s=2 is the summary's ttft_s.p99 at most 2 s), measured
after a warm-up; a run with rejected requests, failed trajectories or unfinished work
fails. The answer shows each SLO over the window beside the whole run (a run that meets
it inside the window only is named), the cost per million input, cached input and output
tokens and per trajectory at the answer (GPU time split between prefill and decode tokens
by their share of each step), and exits 1 when no load meets the SLOs.

  kvsim capacity workloads/coding_agents_capacity.yaml --slo ttft_p99_s=2
  kvsim capacity workloads/pd_coding_agents.yaml --slo ttft_p99_s=0.5 --search pd_ratio --replications 1
  kvsim capacity workloads/coding_agents_capacity.yaml --slo ttft_p99_s=2 --vary hardware.accelerator=h100-sxm-80gb,h200-141gb
"""


def register(app: typer.Typer) -> None:
    """Add ``capacity`` to the app."""
    app.command("capacity", help=HELP)(capacity)


def capacity(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML file.")],
    slo: Annotated[list[str], typer.Option("--slo", help="METRIC=SECONDS (repeatable).")],
    search: Annotated[
        str, typer.Option("--search", help="concurrency, arrival_rate, nodes or pd_ratio.")
    ] = "concurrency",
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override a field: KEY=VALUE.")
    ] = None,
    vary: Annotated[
        str | None, typer.Option("--vary", help="KEY=V1,V2,...: one answer per value.")
    ] = None,
    replications: Annotated[int, typer.Option("--replications", help="Seeds per load.")] = 3,
    out: Annotated[
        str | None, typer.Option("--out", help="Keep the runs and the answer in this folder.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    max_points: Annotated[
        int, typer.Option("--max-points", help="Runs per replication at most.")
    ] = 10,
    warmup_fraction: Annotated[
        float, typer.Option("--warmup-fraction", help="Share of the run left out as warm-up.")
    ] = 0.2,
    executor: Annotated[str, typer.Option("--executor", help="local or dask.")] = "local",
    workers: Annotated[
        int | None, typer.Option("--workers", help="Worker processes (default: min(replications, CPUs)).")
    ] = None,
    scheduler_address: Annotated[
        str | None, typer.Option("--scheduler-address", help="A running Dask scheduler.")
    ] = None,
    figure: Annotated[
        Path | None, typer.Option("--figure", help="With --vary: write the figure here (PNG).")
    ] = None,
    error_band: Annotated[
        bool, typer.Option("--error-band/--no-error-band",
                           help="Also answer at step times -/+ the cost model's error.")
    ] = True,
) -> None:
    """Search the capacity and print it (or one JSON object)."""
    from sim.scenario import parse_set
    from sim.sweep import find_capacities, find_capacity, parse_slo
    from sim.sweep.capacity import SEARCHES

    if search not in (*SEARCHES, PD_RATIO):  # refused before anything is read or run
        raise KvsimError(f"--search {search!r}: valid: {', '.join((*SEARCHES, PD_RATIO))}")
    slos = [parse_slo(s) for s in slo]
    sets = parse_set(set_)
    if search == PD_RATIO:  # a grid of prefill:decode splits, not a bracketing search
        unused = [flag for flag, given in (("--out", out is not None), ("--vary", vary is not None),
                                           ("--figure", figure is not None)) if given]  # fmt: skip
        if unused:
            raise KvsimError(f"--search pd_ratio takes no {', '.join(unused)} (it prints one "
                             "table of every split; --json for the record)")  # fmt: skip
        _pd_ratio(scenario, slos, sets, replications, executor, workers, scheduler_address,
                  warmup_fraction, as_json)  # fmt: skip
        return
    if figure is not None:  # where the figure goes, checked before the search
        _figure_path(figure)
    out_dir = _out_dir(out)
    options: dict[str, Any] = dict(
        search=search, replications=replications, out=out_dir, executor=executor,
        workers=workers, scheduler_address=scheduler_address, max_points=max_points,
        warmup_fraction=warmup_fraction, progress=None if as_json else partial(_progress, search, sets=sets),
    )  # fmt: skip
    if vary is None:
        if figure is not None:
            raise KvsimError("--figure needs --vary (one bar per configuration)")
        result = find_capacity(scenario, slos, sets=sets, **options)
        doc = result.to_dict()
        band = _band(error_band, scenario, slos, sets, options)  # the accuracy hook
        if band is not None:
            doc["error_band"] = band
        _keep(out_dir, doc, [result])
        typer.echo(json.dumps(doc, indent=2, default=str)) if as_json else _print_one(result)
        if band is not None and not as_json:
            _print_band(band, result.capacity["unit"])
        if not result.capacity["met"]:
            raise typer.Exit(code=1)
        return
    key, values = parse_vary(vary)
    comp = find_capacities(scenario, slos, (key, values), sets=sets, **options)
    fig = figure or (out_dir / "capacity.png" if out_dir is not None else None)
    if fig is not None:
        from sim.sweep.figure import capacity_figure

        capacity_figure(comp, fig)
    doc = comp.to_dict()
    _keep(out_dir, doc, comp.results)
    if as_json:
        typer.echo(json.dumps(doc, indent=2, default=str))
    else:
        _print_many(comp, fig)
    if not any(r.capacity["met"] for r in comp.results):
        raise typer.Exit(code=1)


def _band(on: bool, scenario, slos, sets, options) -> dict | None:
    """The answer again at step times -/+ the cost model's error (``sim.sweep.error_band``)."""
    if not on:
        return None
    from sim.sweep import find_capacity
    from sim.sweep.error_band import capacity_error_band

    return capacity_error_band(find_capacity, scenario, slos, sets=sets, **options)


def _print_band(band: dict, unit: str) -> None:
    from sim.cost.accuracy import accuracy_text

    acc = band["accuracy"]
    typer.echo(f"  accuracy:  {accuracy_text(acc)}")
    for line in acc["outside_domain"]:
        typer.echo(f"  WARNING: outside the calibration's fitted domain: {line}")
    if band["faster"] is None:
        typer.echo(f"  error band: none ({band['note']})")
        return
    f, s = band["faster"], band["slower"]
    unmeasured = ", ".join(acc.get("not_measured") or {})  # its error is not in the band
    outside = f"; {unmeasured} not measured, outside the band" if unmeasured else ""
    typer.echo(f"  error band: {_fmt(s['value'])} - {_fmt(f['value'])} {unit} at step times "
               f"+/-{band['step_time_error']:.1%} (slower - faster{outside})")  # fmt: skip


def parse_vary(text: str) -> tuple[str, list[Any]]:
    """``KEY=V1,V2`` -> (KEY, [V1, V2]) with values parsed as YAML."""
    from sim.yamlio import load_value

    key, sep, raw = text.partition("=")
    key = key.strip()
    values = [v.strip() for v in raw.split(",") if v.strip()]
    if not sep or not key or any(not p for p in key.split(".")) or not values:
        raise KvsimError(f"--vary {text!r}: expected KEY=V1,V2,... with a dotted KEY")
    return key, [load_value(v, f"--vary {key}") for v in values]


def _figure_path(figure: Path) -> None:
    """A one-line error, before any run, when ``--figure`` could not be written at the
    end: a folder, or below a file (``afile/x.png``) or a folder that is not writable."""
    from sim.run.output import writable_parent

    if figure.is_dir():
        raise KvsimError(f"--figure {figure}: is a folder (name the PNG file)")
    writable_parent(figure, "--figure")


def _out_dir(out: str | None) -> Path | None:
    if out is None:
        return None
    from sim.run.output import check_out_dir

    path = check_out_dir(out)  # absent or empty, as kvsim run
    path.mkdir(parents=True, exist_ok=True)
    return path


def _keep(out_dir: Path | None, doc: dict, results: list) -> None:
    if out_dir is None:
        return
    import pandas as pd

    frames = []
    for i, r in enumerate(results):
        f = r.points_frame()
        f.insert(0, "configuration", i)
        frames.append(f)
    table = pd.concat(frames, ignore_index=True)
    for col in table.columns:  # the overrides of a configuration: one text cell
        if table[col].dtype == object:
            table[col] = table[col].map(lambda v: json.dumps(v, default=str) if isinstance(v, dict | list) else v)
    table.to_parquet(out_dir / "points.parquet", index=False)
    # the answer last, renamed into place: a folder with capacity.json is complete
    tmp = out_dir / ".capacity.json.partial"
    tmp.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    os.replace(tmp, out_dir / "capacity.json")


def _pd_ratio(scenario, slos, sets, replications, executor, workers, address, warmup, as_json) -> None:
    """``--search pd_ratio``: every prefill:decode split of the scenario's instances and
    aggregated serving of the same GPUs (``sim.sweep.pd_ratio``)."""
    from sim.sweep.executor import make_executor
    from sim.sweep.pd_ratio import find_pd_ratio, text_lines

    with make_executor(executor, workers, address) as ex:
        res = find_pd_ratio(scenario, slos, sets=sets, replications=replications, executor=ex,
                            warmup_fraction=warmup)  # fmt: skip
    if as_json:
        typer.echo(json.dumps(res.to_dict(), indent=2, default=str))
    else:
        typer.echo("\n".join(text_lines(res)))
    if res.best is None:
        raise typer.Exit(code=1)


def _progress(search: str, probe: dict, sets: dict[str, Any] | None = None) -> None:
    """A probe's line on stderr, led by what tells its configuration apart (the --vary
    value, the error band's step-time scale): the --set overrides every probe shares
    (``sets``) are left out."""
    from sim.sweep.capacity import load_label

    verdict = "meets" if probe["passed"] else "fails"
    why = "" if probe["passed"] else ": " + "; ".join(probe.get("reasons") or [])
    shared = sets or {}
    config = {k: v for k, v in (probe.get("config") or {}).items() if k not in shared or shared[k] != v}
    label = " ".join(f"{k}={v}" for k, v in config.items())
    typer.echo(
        f"  {label + ' ' if label else ''}{load_label(search, probe['load'])} seed {probe['seed']}: "
        f"{verdict} the SLOs{why}",
        err=True,
    )


def _fmt(x: Any) -> str:
    if x is None:
        return "-"
    return f"{x:,.4g}" if isinstance(x, float) else f"{x:,}"


def _print_one(r) -> None:
    c, a = r.capacity, r.analytic_estimate
    inp = a["inputs"]
    seeds = f"{r.seeds[0]}-{r.seeds[-1]}" if len(r.seeds) > 1 else f"{r.seeds[0]}"
    what = "the smallest node count" if r.search == "nodes" else f"the largest {r.search}"
    typer.echo(
        f"{Path(r.scenario).name}: {what} meeting {', '.join(r.slos)} "
        f"({len(r.seeds)} replications, seeds {seeds})"
    )
    ci = "" if c["ci95_low"] is None else f" (95% CI {_fmt(c['ci95_low'])} - {_fmt(c['ci95_high'])})"
    per = ", ".join(_fmt(x) for x in c["per_replication"])
    unit = "node" if c["unit"] == "nodes" and c["value"] == 1 else c["unit"]
    if c["met"]:
        typer.echo(f"  capacity:  {_fmt(c['value'])} {unit}{ci}; per replication {per}")
    else:  # the note says which load was the least demanding and why it failed
        typer.echo(f"  capacity:  none: {r.notes[-1]}")
    got = c.get("achieved")
    if got:  # the concurrency the runs sustained, beside the load that was set
        share = "" if got["share_of_load"] is None else f" ({got['share_of_load']:.0%} of the load)"
        each = "; ".join(f"{_fmt(x['mean'])} / {_fmt(x['peak'])}" for x in got["per_replication"])
        typer.echo(f"  in flight at capacity: mean {_fmt(got['mean'])}, peak {_fmt(got['peak'])} "
                   f"trajectories{share}; per replication (mean / peak) {each}")  # fmt: skip
    for line in r.warnings:
        typer.echo(f"  {line}")
    for line in _side_by_side(r):
        typer.echo(f"  {line}")
    for line in r.notes if c["met"] else r.notes[:-1]:
        typer.echo(f"  {line}")
    if c["met"] and not c["converged"]:
        best = "smallest count" if r.search == "nodes" else "largest load"
        typer.echo(f"  (not converged within --max-points: the value is the {best} that passed)")
    if not inp:
        typer.echo(f"  analytic (F37): none: {a.get('unavailable')}")
    else:
        _print_estimate(a, inp)
    for line in r.gap["explanation"]:
        typer.echo(f"  gap: {line}")


def _side_by_side(r) -> list[str]:
    """Each SLO at the answer: the window's value beside the whole run's, per replication."""
    lines = []
    for name in r.at_capacity[0]["window"] if r.at_capacity else []:
        win = ", ".join(_fmt(x["window"].get(name)) for x in r.at_capacity)
        whole = ", ".join(_fmt(x["whole_run"].get(name)) for x in r.at_capacity)
        lines.append(f"{name} at capacity (s, per replication): window {win}; whole run {whole}")
    cost = r.cost
    if cost and cost.get("usd_per_gpu_hour") is not None:
        lines.append(
            f"cost at capacity: ${_fmt(cost['usd_per_million_input_tokens'])} per million input "
            f"tokens, ${_fmt(cost['usd_per_million_cached_input_tokens'])} per million cached "
            f"input tokens (hold cost), ${_fmt(cost['usd_per_million_output_tokens'])} per "
            f"million output tokens, ${_fmt(cost['usd_per_trajectory'])} per trajectory "
            f"over {_windows(cost.get('windows_s') or [])} "
            f"(${_fmt(cost['usd_per_gpu_hour'])}/GPU-hour, {cost['price_source']})"
        )
    elif cost:
        lines.append("cost at capacity: no price (set pricing.usd_per_gpu_hour)")
    return lines


def _windows(windows: list) -> str:
    """``the measurement window (85.2 - 426 s)``; several runs: each one's."""
    spans = [f"{w['start']:,.1f} - {w['end']:,.1f} s" for w in windows if w]
    if not spans:
        return "the whole run"
    if len(spans) == 1:
        return f"the measurement window ({spans[0]})"
    return f"each run's measurement window ({'; '.join(spans)})"


def _print_estimate(a: dict, inp: dict) -> None:
    per_node = ""
    if "load_per_node" in inp:  # --search nodes: the load over what one node serves
        per_node = f" nodes (load {_fmt(inp['load'])} over {_fmt(inp['load_per_node'])} per node)"
    elif "per_node" in inp:  # a cluster: the node groups holding the agents' KV, summed
        per_node = f" ({_cluster_sum(inp['per_node'], 'value')})"
    peak_sum = f" ({_cluster_sum(inp['per_node'], 'peak_value')})" if "per_node" in inp else ""
    typer.echo(
        f"  analytic (F37, 10% headroom): {_fmt(a['value'])}{per_node} with the time-averaged context "
        f"(M_avg {inp['M_avg_tokens']:,.0f} + K_avg {inp['K_avg_tokens']:,.0f} tokens, "
        f"S_shared {inp['S_shared_tokens']:,}{_unshared(inp)}); {_fmt(a['peak_value'])}{peak_sum} with the peak "
        f"context ({inp['M_peak_tokens']:,.0f} tokens)"
    )
    if inp.get("kv_pool_note"):  # a pool sized from memory: what it leaves out
        typer.echo(f"  KV pool {inp['kv_pool_bytes'] / 1e9:,.2f} GB ({inp['kv_pool_note']})")


def _unshared(inp: dict) -> str:
    """Why the workload's prefix is not in S_shared: no prefix cache, or none of it shared."""
    prefix = inp.get("workload_prefix_tokens")
    if not prefix or inp["S_shared_tokens"]:
        return ""
    why = "shared by none of the model's layers" if inp.get("prefix_cache") else "no prefix cache"
    return f": the workload's {prefix:,}-token prefix is stored per trajectory, {why}"


def _cluster_sum(groups: list[dict], key: str) -> str:
    """``4 nodes x 18``, ``3 decode nodes x 9``: the terms of a cluster's F37 sum."""
    terms = []
    for g in groups:
        role = "" if g["role"] == "both" else f"{g['role']} "
        terms.append(f"{g['count']} {role}node{'' if g['count'] == 1 else 's'} x {_fmt(g[key])}")
    return " + ".join(terms)


def _print_many(comp, fig: Path | None) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"capacity by {comp.key} ({', '.join(comp.results[0].slos)})")
    for col in (comp.key, "capacity", "95% CI", "analytic F37", "peak-context F37", "vs first"):
        t.add_column(col, justify="right")
    for value, r, c in zip(comp.values, comp.results, [None, *comp.comparisons], strict=True):
        cap = r.capacity
        ci = "-" if cap["ci95_low"] is None else f"{_fmt(cap['ci95_low'])} - {_fmt(cap['ci95_high'])}"
        vs = "-"
        if c is not None:
            same = {True: "distinguishable", False: "not distinguishable", None: "no interval"}
            vs = f"{_fmt(c['mean'])} ({same[c['distinguishable']]} at 95%)"
        t.add_row(str(value), _fmt(cap["value"]), ci, _fmt(r.analytic_estimate["value"]),
                  _fmt(r.analytic_estimate["peak_value"]), vs)  # fmt: skip
    console = Console()
    if console.width < 120:  # a pipe or a narrow terminal: keep each row on one line
        console = Console(width=120)
    console.print(t)
    for value, r in zip(comp.values, comp.results, strict=True):
        for line in [*r.warnings, *r.notes]:
            typer.echo(f"{comp.key}={value}: {line}")
    if fig is not None:
        typer.echo(f"wrote {fig}")
