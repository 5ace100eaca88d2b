"""Writing a run folder: the resolved config, the summary and the record tables.

Invariant: a run folder is either absent, as it was, or complete. Every file is written
into a temporary sibling folder (``.NAME.PID.N.partial``, N the first free number) that
is renamed to the target only once all of them are written; a failure or an interrupt
removes the temporary and leaves the target as it was. A non-empty existing target is
refused unless ``force``, which replaces it whole (never mixes new files with old ones;
Ctrl-C is held off while the previous run is swapped out, so it never strands it);
a target whose nearest existing ancestor is not a writable folder is refused before the
run. The files: ``config.resolved.yaml`` (the scenario with every default filled in and
file paths absolute; running it again, from any folder, gives the same results),
``summary.json``, ``requests.parquet``, ``steps.parquet``, ``memory.parquet``,
``trajectories.parquet`` and ``pauses.parquet`` (one row per tool pause); for a model of
several layer groups ``memory_groups.parquet`` (its KV by group at each memory row).
A run's tables are written by pyarrow alone (no pandas import; read back with pandas
they are the DataFrames ``to_parquet`` wrote), a table held as a DataFrame by pandas.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from sim.errors import KvsimError, escaped_text
from sim.version import __version__

if TYPE_CHECKING:
    import pandas as pd

    from sim.metrics.table import Columns

#: section order of config.resolved.yaml (what a person reads first)
_ORDER = (
    "schema_version",
    "name",
    "description",
    "seed",
    "duration_s",
    "model",
    "hardware",
    "cost",
    "allocator",
    "scheduler",
    "pause_policy",
    "workload",
    "engine",
)
#: the record tables, each written as NAME.parquet when the result has it
TABLES = ("requests", "steps", "memory", "trajectories", "pauses", "memory_groups")


def resolved_yaml(config: dict, source: str) -> str:
    ordered = {k: config[k] for k in _ORDER if k in config}
    ordered.update({k: v for k, v in config.items() if k not in ordered})
    shown = escaped_text(str(source))  # a name that is not UTF-8: its bytes escaped
    head = f"# kvsim {__version__}: the scenario {shown} with every default filled in\n"
    return head + yaml.safe_dump(ordered, sort_keys=False, default_flow_style=False)


def writable_parent(path: Path, flag: str) -> Path:
    """The nearest existing folder above ``path`` (where it, and the folders missing
    between, would be created); a one-line error naming ``flag`` when that is not a
    folder (``/dev/null/x``) or not writable. Checked before work that ends by writing."""
    parent = Path(os.path.abspath(path)).parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise KvsimError(f"{flag} {path}: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise KvsimError(f"{flag} {path}: {parent} is not writable")
    return parent


def utf8_path(path: str | Path, flag: str) -> None:
    """A one-line error naming ``flag`` when ``path`` is not UTF-8 (bytes the file system
    decoding kept as surrogates, e.g. ``$'x\\xff'``): pyarrow, which writes the Parquet
    tables, takes UTF-8 paths only; checked before any work. The path is shown with its
    bytes escaped."""
    text = str(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raw = os.fsencode(text)
        shown = raw.decode("utf-8", "backslashreplace")
        if shown == raw.decode("utf-8", "replace"):  # UTF-8 bytes Python decoded otherwise
            raise KvsimError(
                f"{flag} {shown}: Python decodes file names as "
                f"{sys.getfilesystemencoding()} here (LANG=C without UTF-8 mode) and "
                f"pyarrow reads and writes Parquet tables at UTF-8 paths only; set "
                f"PYTHONUTF8=1 or choose an ASCII name"
            ) from None
        raise KvsimError(
            f"{flag} {shown}: not a UTF-8 path (pyarrow reads and writes Parquet tables "
            f"at UTF-8 paths only); choose a folder name in UTF-8"
        ) from None


def check_out_dir(
    out_dir: str | Path,
    *,
    force: bool = False,
    whole: bool = False,
    inputs: Sequence[str | Path | None] = (),
) -> Path:
    """The target folder, or a one-line error when it cannot take a run (checked before a
    run, so that no time is spent on a run that cannot be written): the run goes into a
    temporary sibling that is renamed, so the folder above must be a writable folder.
    ``whole``: ``force`` replaces a non-empty folder whole (``kvsim run``), so it must be a
    previous run's folder (its ``summary.json`` or ``config.resolved.yaml``, or only run
    folders: ``compare``'s seeds of a variant), not the current folder or one above it, and
    hold none of the run's ``inputs`` (files) but its own ``config.resolved.yaml``."""
    if str(out_dir).strip() == "":
        raise KvsimError("--out: an empty path; give the folder the run goes into")
    utf8_path(out_dir, "--out:")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise KvsimError(f"--out: {out}: exists and is not a folder")
    writable_parent(out, "--out:")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise KvsimError(
                f"--out: {out}: folder exists and is not empty; pass --force to replace it "
                f"whole, or choose another folder"
            )
        here, target = Path.cwd().resolve(), out.resolve()
        if target == here or target in here.parents:
            raise KvsimError(f"--out: {out}: --force would delete the current folder")
        if whole:
            _check_replaceable(out, target, inputs)
    return out


#: what every run folder holds (``_write_files``; a replications folder: its mean summary)
RUN_MARKERS = ("summary.json", "config.resolved.yaml")


def _a_run(folder: Path) -> bool:
    return any((folder / name).is_file() for name in RUN_MARKERS)


def _check_replaceable(out: Path, target: Path, inputs: Sequence[str | Path | None]) -> None:
    """``--force`` deletes what ``out`` holds: refuse unless it is a previous run's folder,
    and refuse one that holds an input of this run."""
    for item in inputs:
        if item is None:
            continue
        path = Path(item).resolve()
        if path == target / "config.resolved.yaml":
            continue  # a run's own resolved config, run again: kvsim writes it anew
        if target in path.parents:
            raise KvsimError(
                f"--out: {out}: --force would delete {item}, an input of this run; choose "
                "another folder"
            )
    if not _a_run(out) and not all(p.is_dir() and _a_run(p) for p in out.iterdir()):
        raise KvsimError(
            f"--out: {out}: not a run folder (no summary.json or config.resolved.yaml); "
            "--force replaces only a previous run's folder: choose another folder, or empty it"
        )


def run_inputs(result) -> list[str | None]:
    """The files a run read: its scenario (``summary.json``'s ``scenario_path``) and every
    file its resolved config names (traces, fits, a calibration file: absolute paths)."""
    from sim.scenario.paths import file_entries

    summary = result.summary if isinstance(result.summary, dict) else {}
    config = result.config if isinstance(result.config, dict) else {}
    return [summary.get("scenario_path"), *(raw for _, raw in file_entries(config))]


def write_run(
    result,
    out_dir: str | Path,
    *,
    force: bool = False,
    installed: Callable[[Path], object] | None = None,
    before_install: Callable[[Path], object] | None = None,
) -> Path:
    """Write ``result`` into ``out_dir`` (complete, or not at all); returns the folder.
    ``before_install(tmp)`` may add files to the temporary folder once the run's own are
    written, before it is renamed into place (the CLI renders the report there; this
    layer never imports ``sim.report``). ``installed(out)`` is called as soon as the
    complete folder is in place (before the previous run's folder, replaced with
    ``force``, is deleted), so that an interrupt after it can say the folder is complete."""
    out = check_out_dir(out_dir, force=force, whole=True, inputs=run_inputs(result))
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KvsimError(f"cannot create output folder {str(out)!r}: {exc.strerror}") from None
    tmp = _make_temp(out)
    try:
        _write_files(result, tmp)
        if before_install is not None:
            before_install(tmp)
        _install(tmp, out, force, installed)
    except BaseException:  # an error or Ctrl-C: nothing half-written stays behind
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _make_temp(out: Path) -> Path:
    """A new empty hidden sibling of ``out`` (``os.mkdir``, so the umask applies)."""
    for i in range(1000):
        tmp = out.with_name(f".{out.name}.{os.getpid()}.{i}.partial")
        try:
            tmp.mkdir()
            return tmp
        except FileExistsError:
            continue
        except OSError as exc:
            raise KvsimError(f"cannot create output folder {str(out)!r}: {exc.strerror}") from None
    raise KvsimError(f"cannot create output folder {str(out)!r}: too many partial folders")


def _write_files(result, folder: Path) -> None:
    source = result.resolved.loaded.source if result.resolved is not None else "<scenario>"
    _replace(
        folder / "config.resolved.yaml",
        lambda p: p.write_text(resolved_yaml(result.config, source), encoding="utf-8"),
    )
    _replace(
        folder / "summary.json",
        lambda p: p.write_text(json.dumps(result.summary, indent=2) + "\n", encoding="utf-8"),
    )
    for name in TABLES:
        table = result.table(name)  # as held: numpy Columns or a DataFrame; None: no table
        if table is not None:
            _replace(folder / f"{name}.parquet", functools.partial(_to_parquet, table))


def _install(
    tmp: Path, out: Path, force: bool, installed: Callable[[Path], object] | None
) -> None:
    """Rename the complete ``tmp`` to ``out``; a non-empty ``out`` is replaced only with
    ``force`` (checked again: it may have been filled while the run went on). Ctrl-C is
    held off from the first rename to the removal of the previous run (``_sigint_deferred``),
    so an interrupt never lands between the renames: it is raised once the new folder is
    in place and ``installed`` has been told, and the previous run is gone."""
    with _sigint_deferred():
        old = None
        try:
            if out.is_dir() and any(out.iterdir()):
                check_out_dir(out, force=force, whole=True)
                old = _make_temp(out.with_name(out.name + ".old"))
                os.replace(out, old)  # onto the empty temporary: POSIX renames over it
            elif out.is_dir():
                out.rmdir()
            os.replace(tmp, out)
        except BaseException as exc:  # an error between the renames
            if old is not None and not out.exists():
                os.replace(old, out)  # put the previous run back
            if isinstance(exc, OSError):
                raise KvsimError(f"cannot write {str(out)!r}: {exc.strerror}") from None
            raise
        if installed is not None:
            installed(out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


@contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Hold a Ctrl-C (SIGINT) that arrives inside the block and deliver it (to the handler
    that was in place) when the block ends; a no-op off the main thread, where Python
    cannot install a handler, and where SIGINT is ignored or not Python's to handle."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield
        return
    pending: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if pending:
        previous(signal.SIGINT, None)  # Python's default handler raises KeyboardInterrupt


def _to_parquet(table: Columns | pd.DataFrame, path: Path) -> None:
    """``table`` as Parquet: numpy ``Columns`` by pyarrow alone (read back with pandas, the
    DataFrame ``to_parquet`` wrote; ``sim.metrics.table.to_arrow``), a DataFrame by pandas."""
    if isinstance(table, dict):
        import pyarrow.parquet as pq

        from sim.metrics.recorder import OBJECT_COLUMNS
        from sim.metrics.table import to_arrow

        pq.write_table(to_arrow(table, OBJECT_COLUMNS), path)
    else:
        table.to_parquet(path, index=False)


def _replace(target: Path, write: Callable[[Path], object]) -> None:
    """Write beside ``target`` and rename over it, so a failed write never leaves a
    half-written file or destroys the previous run's file."""
    tmp = target.with_name(f".{target.name}.partial")
    try:
        write(tmp)
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise KvsimError(f"cannot write {str(target)!r}: {exc.strerror}") from None
