"""Checking a sweep without running it: the base scenario with every point's overrides.

Responsibility: what ``kvsim validate`` does for a scenario (schema, trace files,
profiles, KV pool, allocator, pause-policy tiers, then the rows of the trace files and the
fitted-parameters file the workload names, read by the run's readers:
``sim.workload.trace_files``), for the base scenario and for each point of a sweep, so
that a bad grid value (a trace or a fit named per point included) is found before hours
of runs. A workload section already read (the base's, or a point's equal to an earlier
one) is not read again: a sweep reads each distinct workload's files once.

Invariant: every problem is one ``KvsimError`` line; a problem of a point names the point
and the sweep file's line of the refused key (``sweep.yaml:4: sweep.grid.KEY: point 3
(workload.arrival.concurrency=0): ...``), a file a point names at its key's line; the base scenario is loaded once
and each point's overrides are applied to it, as ``kvsim sweep`` will.
"""

from __future__ import annotations

from sim.errors import ConfigError, KvsimError
from sim.sweep.spec import Sweep, location_in, point_label
from sim.yamlio import load_yaml


def check_scenario(
    source, overrides: dict, read: set[tuple[str, str]] | None = None
) -> tuple[list[KvsimError], object]:
    """(every problem of a scenario with overrides, the resolved scenario when none): the
    checks a run makes before it starts (``sim.run.checks.preflight``), then the files its
    workload names, read as the run reads them (``sim.workload.trace_files.read_traces``),
    unless ``read`` holds that workload section already (it is added when read clean)."""
    from sim.run.checks import preflight
    from sim.scenario import load_scenario
    from sim.workload.trace_files import read_traces

    try:
        resolved = preflight(load_scenario(str(source), overrides))
        workload, base_dir = resolved.scenario.workload, resolved.loaded.base_dir
        key = _workload_key(workload, base_dir)
        if read is None or key is None or key not in read:
            read_traces(workload, base_dir)
            if read is not None and key is not None:
                read.add(key)
        return [], resolved
    except KvsimError as exc:
        return list(getattr(exc, "problems", None) or [exc]), None


def _workload_key(workload, base_dir) -> tuple[str, str] | None:
    """A workload section as text with the folder its paths are relative to (None when a
    plug-in's config cannot be written as JSON: then it is read each time)."""
    try:
        return workload.model_dump_json(), str(base_dir)
    except Exception:  # a plug-in's field pydantic cannot serialise
        return None


def check_sweep(sweep: Sweep) -> tuple[list[KvsimError], object]:
    """(every problem of the base and of each point, the base resolved when it is valid)."""
    read: set[tuple[str, str]] = set()  # the workload sections whose files were read
    problems, base = check_scenario(sweep.base_path, {}, read)
    if problems:
        return problems, None
    _, lines = load_yaml(sweep.path)
    for i, point in enumerate(sweep.points):
        found, _ = check_scenario(sweep.base_path, {k: v for k, v in point.items()}, read)
        for exc in found:
            problems.append(_point_problem(sweep, lines, i, point, exc))
    return problems, base


def _point_problem(sweep: Sweep, lines, i: int, point: dict, exc: KvsimError) -> KvsimError:
    """``FILE:LINE: sweep.grid.KEY: point I (...): message``, located at the sweep file's
    line of the key whose override is refused (an override's error is located at
    ``--set KEY``) or, for a file read after the overrides applied (a trace, a fit), of
    the key whose value names it (the file's message quotes its path); a problem of the
    combination as a whole is located at ``sweep``."""
    text = str(exc)
    location = getattr(exc, "location", None) or ""
    key = location.removeprefix("--set ") if location.startswith("--set ") else None
    if key not in point:  # a file the point names, refused when read: at that key's line
        key = next((k for k, v in point.items() if _names_file(k) and isinstance(v, str) and v
                    and v in text), None)  # fmt: skip
    if key in point:
        text = text.removeprefix(f"--set {key}: ")
        listed = sweep.spec.sweep.points
        j = i % len(listed) if listed else None
        if j is not None and key in listed[j]:
            loc: tuple = ("sweep", "points", j, key)
        else:
            loc = ("sweep", "grid", key)
    else:
        text, loc = text.removeprefix("--set "), ("sweep",)
    field = ".".join(str(p) for p in loc)
    return ConfigError(f"point {i} ({point_label(point)}): {text}",
                       location=location_in(sweep.path, lines, loc), field=field)  # fmt: skip


def _names_file(key: str) -> bool:
    """A dotted key whose value is a file (``sim.scenario.paths.file_entries``: every
    ``path`` field, and ``cost.calibration``)."""
    return key.rsplit(".", 1)[-1] == "path" or key == "cost.calibration"


def first_problem(problems: list[KvsimError]) -> KvsimError:
    """The first problem as one line, counting the others (``kvsim sweep`` refuses a
    sweep with any invalid point before it runs or writes anything)."""
    n = len(problems) - 1
    more = f" (and {n} more problem{'s' if n > 1 else ''}: kvsim validate lists them)" if n else ""
    return KvsimError(f"{problems[0]}{more}")
