"""``kvsim compare``: variants of a scenario (or existing runs) side by side.

Responsibility: turn ``--vary KEY=V1,V2`` flags into named variants (the grid of every
combination), run each (``run_variant``, a module-level function an executor can send to
a worker process: it writes ``DIR/<variant>/`` with its report, or one folder per seed
with replications), read runs back, and write the comparison: one row per variant in
``compare.parquet``, a text table with deltas against the first variant, and
``compare.html`` with its PNGs (key metrics, TTFT CDFs, the allocator-study pool view).
A variant whose runs went pathological (their summary ``warnings``: thrashing, overload,
rejections, ...) says so under the table, in the text (``warnings_text``) and in
compare.html, so a comparison never hides what a single run would print. Existing run
folders (no ``--vary`` to name what differs) are compared with the scenario keys their
``config.resolved.yaml`` files differ in said under the table (``config_differences``).

Variant values are YAML; a value may be a mapping that replaces a whole section
(``--vary 'allocator={kind: buddy, reservation: pow2},{kind: paged}'``): commas inside
braces or brackets do not split values. A variant's name is ``KEY=VALUE`` (a mapping's
values joined by ``-``), several keys joined by ``,``; its folder name is that name with
anything but letters, digits and ``._=,-`` replaced by ``_``.

Every table shows the prompt reuse rate (cache hits and held KV over prompt tokens; the
summary's ``kv_reuse_rate`` is its older name, the same value, and compare.parquet keeps
that column, but the table has one row) and the prefill tokens beside the prefix hit rate
(a cache-lookup rate); a hosted-API view adds its prompt-cache hit rate, bill and
compactions (``provider_hit_rate``, ``provider_bill_usd``, ``compactions``). The pool rows
(``POOL_ROWS``) read every variant over one window (``table_window``), which the footnote
under the table names, with ``external`` split into fragmentation and free memory.
Cluster runs compare like single-node ones: their summary has the same keys for the
cluster as a whole (a row also gets the routing figures, e.g. ``routing_decisions``; the
per-node list ``nodes`` stays in each run's summary.json), the table adds their sequence
moves and routed / global match rates (the figures that tell routers apart, where the
prefix hit rate alone misleads), and the pool shares are of the cluster's whole pool
(``sim.report.pool``).

Invariant: the executor is passed in (anything with ``run(fn, tasks)`` yielding
``(index, result)``, e.g. ``sim.sweep.make_executor``); without one, variants run one
after the other in this process. A variant that fails is a row with its ``error``. A run
whose folder already holds that very run (its ``config_sha256``) is not run again, so an
interrupted compare resumes where it stopped.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sim.errors import ConfigError, KvsimError
from sim.report.data import RunData, load_run
from sim.report.pool import SHARES
from sim.report.variant_rows import (  # noqa: F401
    _busy,
    _flat,
    compare_frame,
    table_window,
    variant_row,
)
from sim.yamlio import json_value, read_bytes_bounded

#: (label, flattened summary key, display scale, unit) of the comparison table
METRICS = (
    ("TTFT p50", "ttft_s.p50", 1e3, "ms"),
    ("TTFT p99", "ttft_s.p99", 1e3, "ms"),
    ("ITL p50", "itl_s.p50", 1e3, "ms"),
    ("ITL p99", "itl_s.p99", 1e3, "ms"),
    ("E2E p50", "e2e_s.p50", 1.0, "s"),
    ("output throughput", "output_tokens_per_s", 1.0, "tokens/s"),
    ("requests completed", "requests_completed", 1.0, "count"),
    ("trajectories completed", "trajectories_completed", 1.0, "count"),
    ("prompt reuse rate", "prompt_reuse_rate", 100.0, "%"),  # hits + held KV / prompt
    ("prefix hit rate", "prefix_hit_rate", 100.0, "%"),
    ("prefill tokens", "prefill_tokens", 1.0, "tokens"),
    ("eta_alloc (mean)", "eta_alloc_mean", 100.0, "%"),
    ("eta_effective (mean)", "eta_effective_mean", 100.0, "%"),
    ("peak allocated", "peak_allocated_bytes", 1e-9, "GB"),
    ("preemptions", "preemptions", 1.0, "count"),
    ("rejected", "rejected", 1.0, "count"),
    ("rejected by router", "rejected_by_router", 1.0, "count"),  # cluster runs only
    ("sequence moves", "sequence_moves", 1.0, "count"),  # cluster runs only
    ("routed match rate", "routed_match_rate", 100.0, "%"),  # routers that read matches
    ("global match rate", "global_match_rate", 100.0, "%"),  # routers that read matches
    ("dummy rank-steps", "dummy_rank_steps", 1.0, "count"),  # data-parallel MoE ranks only
    ("lockstep comm", "lockstep_comm_s", 1.0, "s"),  # data-parallel MoE ranks only
    ("held KV", "hold_gb_s", 1.0, "GB*s"),
    ("USD per 1M output tokens", "usd_per_million_output_tokens", 1.0, "USD"),
    ("hosted API: prompt-cache hit rate", "provider_hit_rate", 100.0, "%"),  # provider view
    ("hosted API: bill", "provider_bill_usd", 1.0, "USD"),  # workload.provider_cache only
    ("compactions", "compactions", 1.0, "count"),  # shown when a variant compacted
)
#: rows shown only when some variant's value is not 0 (a figure of one feature)
WHEN_NONZERO = frozenset({"compactions"})
#: the pool rows (label suffix, share), read over ``table_window``: ``external`` and its parts
POOL_ROWS = (("token states", "token_states"), ("reserved", "reserved"),
             ("internal", "internal"), ("external", "external"),
             ("external, fragmentation", "external_fragmentation"),
             ("external, free", "free"), ("cached", "cached"))  # fmt: skip
#: the footnote of the pool rows, per window
POOL_WINDOW_NOTE = {
    "busy": "pool: time-averaged over the time requests waited for memory (n_waiting > 0), "
            "the same window for every variant",
    "run": "pool: time-averaged over the whole run, the same window for every variant "
           "(requests never waited in {idle}, so no memory-bound window is common to all)",
    None: "pool: each variant's own window (an older compare.parquet: the time requests "
          "waited, or the whole run where none did)",
}
POOL_SPLIT_NOTE = ("pool: external = fragmentation (free bytes in holes too small for a "
                   "request, a buddy block's rounding) + free (memory no request asked for)")
COMPARE_PARQUET = "compare.parquet"
COMPARE_HTML = "compare.html"
_SAFE = re.compile(r"[^A-Za-z0-9._=,-]")


# ------------------------------------------------------------------------ variants
@dataclass
class Variant:
    """One configuration of a comparison."""

    name: str
    overrides: dict[str, Any] = field(default_factory=dict)

    @property
    def folder(self) -> str:
        return _SAFE.sub("_", self.name)[:120] or "variant"


def split_values(raw: str) -> list[str]:
    """``V1,V2`` split at commas outside braces, brackets and quotes."""
    out, depth, quote, cur = [], 0, "", []
    for ch in raw:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    out.append("".join(cur))
    return [v.strip() for v in out]


def parse_vary(items: list[str]) -> list[tuple[str, list[Any]]]:
    """``['a.b=1,2']`` -> ``[('a.b', [1, 2])]`` (values parsed as YAML)."""
    from sim.yamlio import load_value

    out = []
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or not raw.strip() or any(not p for p in key.split(".")):
            raise ConfigError(f"expected KEY=V1,V2 with a dotted KEY, got {item!r}", field="--vary")
        parts = split_values(raw)
        if "" in parts:
            raise ConfigError(f"{key}: value {parts.index('') + 1} of {raw!r} is empty",
                              field="--vary")  # fmt: skip
        values = [load_value(v, f"--vary {key}") for v in parts]
        if len(set(map(_label, values))) < len(values):
            raise ConfigError(f"{key}: a value is repeated in {raw!r}", field="--vary")
        out.append((key, values))
    return out


def _label(value: Any) -> str:
    if isinstance(value, dict):
        return "-".join(_label(v) for v in value.values())
    if isinstance(value, list):
        return "-".join(_label(v) for v in value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def variants_from_vary(vary: list[tuple[str, list[Any]]]) -> list[Variant]:
    """Every combination of the varied values, the first key varying slowest."""
    keys = [k for k, _ in vary]
    out = []
    for combo in itertools.product(*(vals for _, vals in vary)):
        name = ",".join(f"{k}={_label(v)}" for k, v in zip(keys, combo, strict=True))
        out.append(Variant(name, dict(zip(keys, combo, strict=True))))
    return out


# ------------------------------------------------------------------------ running
def run_variant(task: dict) -> dict:
    """Run one variant and seed and write its run folder (with its report); never raises
    for a bad run: returns ``{"index", "dir", "error"}``."""
    try:
        from sim.report.render import render_extras
        from sim.run import run_scenario
        from sim.run.output import write_run

        result = run_scenario(task["scenario"], **task["overrides"])
        out = Path(task["dir"])

        def extras(folder: Path) -> None:
            if task.get("report", True):
                render_extras(result, folder)

        write_run(result, out, force=True, before_install=extras)
        return {"index": task["index"], "dir": str(out), "error": None}
    except Exception as exc:  # one line for the table; the comparison goes on
        text = str(exc) if isinstance(exc, KvsimError) else f"{type(exc).__name__}: {exc}"
        return {"index": task["index"], "dir": None, "error": text.splitlines()[0]}


def variant_tasks(scenario: str, variants: list[Variant], out: Path, sets: dict[str, Any],
                  replications: int, base_seed: int, report: bool = True,
                  seed_stride: int = 1) -> list[dict]:  # fmt: skip
    """The tasks of every variant and replication (``DIR/<variant>/`` or, with several
    replications, ``DIR/<variant>/seed-<S>/``). A variant's own ``seed`` (``--vary
    seed=1,2``) is its first seed, else ``base_seed``; replication r runs that seed plus
    ``r * seed_stride`` (``sim.sweep.spec.seed_stride``: no two runs share a seed)."""
    tasks = []
    for v in variants:
        for r in range(replications):
            seed = int(v.overrides.get("seed", base_seed)) + r * seed_stride
            d = out / v.folder if replications == 1 else out / v.folder / f"seed-{seed}"
            tasks.append({"scenario": scenario, "overrides": {**sets, **v.overrides, "seed": seed},
                          "dir": str(d), "variant": v.name, "report": report})  # fmt: skip
    for i, t in enumerate(tasks):
        t["index"] = i
    return tasks


def finished(task: dict) -> bool:
    """Whether the task's run folder already holds this very run (the resolved config's
    ``config_sha256``, the seed included, and the report when the task asks for one): a
    compare run again into the same folder skips it (it resumes)."""
    from sim.run.provenance import config_sha256, resolved_config
    from sim.scenario import load_scenario, resolve

    folder = Path(task["dir"])
    try:
        done = json_value(read_bytes_bounded(folder / "summary.json"), "summary.json", lines=True)
    except KvsimError:
        return False
    if task.get("report", True) and not (folder / "report.html").is_file():
        return False
    try:
        config = resolved_config(resolve(load_scenario(task["scenario"], task["overrides"])).loaded)
    except KvsimError:
        return False
    return isinstance(done, dict) and done.get("config_sha256") == config_sha256(config)


def run_variants(tasks: list[dict], executor=None, progress=None) -> list[dict]:
    """Run the tasks (on ``executor`` when given) but those already ``finished`` in their
    folders; results in task order."""
    results: list[dict | None] = [None] * len(tasks)
    todo = []
    for i, t in enumerate(tasks):
        if finished(t):
            results[i] = {"index": i, "dir": t["dir"], "error": None}
        else:
            todo.append(t)
    if progress is not None and len(todo) < len(tasks):
        progress(len(tasks) - len(todo), len(tasks))
    stream = executor.run(run_variant, todo) if executor is not None else (
        (j, run_variant(t)) for j, t in enumerate(todo))  # fmt: skip
    for j, res in stream:
        i = todo[j]["index"]
        results[i] = res
        if progress is not None:
            progress(sum(r is not None for r in results), len(tasks))
    return results  # type: ignore[return-value]


# ------------------------------------------------------------------------ the table
def compare_text(frame: pd.DataFrame) -> str:
    """The side-by-side table: one column per variant, deltas against the first."""
    names = list(frame.variant)
    head = ["metric", "unit", *names]
    body = []
    window = table_window(frame)
    for label, key, scale, unit in (*METRICS, *pool_metrics(window)):
        if key not in frame:
            continue
        vals = frame[key].to_numpy(float)
        if np.isnan(vals).all() or (key in WHEN_NONZERO and not np.nan_to_num(vals).any()):
            continue
        cells = []
        for i, v in enumerate(vals):
            text = "-" if math.isnan(v) else _cell(v * scale)
            base = vals[0]
            if i and not math.isnan(v) and not math.isnan(base) and base != 0:
                text += f" ({(v - base) / abs(base):+.1%})"
            cells.append(text)
        body.append([label, unit, *cells])
    if "error" in frame and frame.error.notna().any():
        body.append(["error", "", *[e if isinstance(e, str) else "" for e in frame.error]])
    widths = [max(len(str(r[i])) for r in [head, *body]) for i in range(len(head))]
    lines = ["  ".join(str(c).ljust(w) if j < 2 else str(c).rjust(w)
                       for j, (c, w) in enumerate(zip(r, widths, strict=True)))
             for r in [head, *body]]  # fmt: skip
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines + pool_notes(frame, window)) + "\n"


def pool_metrics(window: str | None) -> tuple[tuple[str, str, float, str], ...]:
    """The table's pool rows (``METRICS``' shape) over ``window`` (``table_window``): the
    memory-bound time share, then ``POOL_ROWS``; an older frame's ``pool_<share>``."""
    if window is None:
        return tuple((f"pool: {s.replace('_', ' ')}", f"pool_{s}", 100.0, "%") for s in SHARES)
    return (("memory-bound time (requests waiting)", "pool_busy_fraction", 100.0, "% of run"),
            *((f"pool: {label}", f"pool_{window}_{share}", 100.0, "%")
              for label, share in POOL_ROWS))  # fmt: skip


def pool_notes(frame: pd.DataFrame, window: str | None) -> list[str]:
    """The footnote under the table: the window every variant's pool shares cover (and,
    over the whole run, the variants that never waited) and what ``external`` splits
    into; none for a frame without pool shares."""
    key = "pool_token_states" if window is None else f"pool_{window}_token_states"
    if key not in frame or np.isnan(frame[key].to_numpy(float)).all():
        return []
    idle = []
    if window == "run":
        run = frame.pool_run_token_states.to_numpy(float)
        busy = frame.pool_busy_token_states.to_numpy(float)
        idle = [str(n) for n, r, b in zip(frame.variant, run, busy, strict=True)
                if not math.isnan(r) and math.isnan(b)]  # fmt: skip
    notes = [POOL_WINDOW_NOTE[window].format(idle=", ".join(idle))]
    return notes + ([POOL_SPLIT_NOTE] if window is not None else [])


#: differing keys ``config_differences`` names one by one before it counts the rest
MAX_NAMED_DIFFERENCES = 6


def _dotted(value: Any, prefix: str = "") -> dict[str, Any]:
    """A resolved config as ``{dotted key: leaf value}`` (a list is one leaf)."""
    if not isinstance(value, dict):
        return {prefix: value}
    out: dict[str, Any] = {}
    for key, sub in value.items():
        out.update(_dotted(sub, f"{prefix}.{key}" if prefix else str(key)))
    return out


def config_differences(configs: dict[str, dict | None]) -> str:
    """One line naming the scenario keys in which the runs' resolved configs differ (each
    with every run's value, ``a / b``, ``-`` where a run has no such key; keys every run
    has first; ``MAX_NAMED_DIFFERENCES`` of them, then how many more; ``description`` is
    left out), or saying they are the same; ``''`` for fewer than two runs, or when a run has
    no config.resolved.yaml (an older or hand-made folder)."""
    if len(configs) < 2 or any(c is None for c in configs.values()):
        return ""
    flats = [_dotted(c) for c in configs.values()]
    keys = list(dict.fromkeys(k for f in flats for k in f))
    missing = object()
    differ = [k for k in keys if k != "description"
              and len({repr(f.get(k, missing)) for f in flats}) > 1]  # fmt: skip
    # keys every run has first (``pause_policy.kind``), then a kind's own options
    differ.sort(key=lambda k: any(k not in f for f in flats))
    if not differ:
        return "configs: the same resolved scenario in every run (config.resolved.yaml)\n"
    named = [f"{k} ({' / '.join(str(f.get(k, '-')) for f in flats)})"
             for k in differ[:MAX_NAMED_DIFFERENCES]]  # fmt: skip
    more = len(differ) - len(named)
    tail = f" and {more} more key{'s' if more > 1 else ''}" if more else ""
    return (f"configs differ (config.resolved.yaml, {' / '.join(configs)}) in: "
            f"{', '.join(named)}{tail}\n")  # fmt: skip


def variant_warnings(frame: pd.DataFrame) -> list[tuple[str, list[str]]]:
    """(variant, its warnings) for every variant with any (the ``warnings`` cells), in
    table order; none for a frame without the column (an older compare.parquet)."""
    if "warnings" not in frame:
        return []
    out = []
    for name, cell in zip(frame.variant, frame.warnings, strict=True):
        said = json.loads(cell) if isinstance(cell, str) else []
        if said:
            out.append((str(name), [str(w) for w in said]))
    return out


def warnings_text(frame: pd.DataFrame) -> str:
    """The lines printed after the table: each pathological variant's warnings (the WARNING
    block of ``kvsim run``, one per variant); '' when every variant is healthy."""
    said = variant_warnings(frame)
    if not said:
        return ""
    lines = [f"WARNING: {len(said)} of {len(frame)} variants look pathological (each run's "
             "summary.json: warnings):"]  # fmt: skip
    for name, ws in said:
        lines += [f"WARNING:   {name}: {w}" for w in ws]
    return "\n".join(lines) + "\n"


def _warnings_html(frame: pd.DataFrame) -> str:
    from sim.report import html as H

    said = variant_warnings(frame)
    if not said:
        return ""
    items = "".join(f"<li><b>{H.esc(name)}</b>: {H.esc(w)}</li>" for name, ws in said for w in ws)
    return (f'<div class="warn"><b>Warnings</b> ({len(said)} of {len(frame)} variants look '
            f"pathological)<ul>{items}</ul></div>")  # fmt: skip


def _cell(x: float) -> str:
    """4 significant digits, but whole numbers from 10,000 up (1,320,417 prefill tokens,
    not 1.32e+06)."""
    return f"{x:,.0f}" if abs(x) >= 1e4 else f"{x:,.4g}"


# ------------------------------------------------------------------------ writing
def read_variant_runs(dirs: list[Path]) -> list[RunData]:
    return [load_run(d) for d in dirs]


def write_compare(out: Path, named_runs: dict[str, list[RunData]], frame: pd.DataFrame) -> list[Path]:
    """compare.parquet, the PNGs and compare.html into ``out`` (each file renamed into place)."""
    from sim.report import html as H
    from sim.report.compare_plots import COMPARE_PLOTS
    from sim.report.plots import figure_png

    out.mkdir(parents=True, exist_ok=True)
    written = [_replace(out / COMPARE_PARQUET, lambda p: frame.to_parquet(p, index=False))]
    pngs = {}
    for p in COMPARE_PLOTS:
        png = figure_png(p.draw(named_runs, frame))
        pngs[p.file] = png
        written.append(_replace(out / p.file, lambda path, b=png: path.write_bytes(b)))
    parts = [f"<h1>kvsim compare: {len(frame)} variants</h1>",
             f"<pre>{H.esc(compare_text(frame))}</pre>", _warnings_html(frame)]  # fmt: skip
    for p in COMPARE_PLOTS:
        parts += [f"<h2>{H.esc(p.title)}</h2>", H.image(pngs[p.file], p.title),
                  f'<p class="read">{H.esc(p.how_to_read)}</p>']  # fmt: skip
    text = H.page("kvsim compare", parts)
    written.append(_replace(out / COMPARE_HTML, lambda p: p.write_text(text, encoding="utf-8")))
    return written


def _replace(target: Path, write) -> Path:
    tmp = target.with_name(f".{target.name}.partial")
    try:
        write(tmp)
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise KvsimError(f"cannot write {str(target)!r}: {exc.strerror}") from None
    return target
