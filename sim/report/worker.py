"""The report rendered by a worker process that warms up while the simulation runs.

Responsibility: ``ReportWorker`` starts a fresh Python process (``sim.report.worker``
run as ``__main__``) that imports matplotlib, pandas, pyarrow and the report's modules
and draws one throw-away figure (fonts, the Agg canvas, the PNG encoder) while ``kvsim
run`` simulates on the other core; ``render(folder)`` then hands it the finished run's
temporary folder, and it renders the report there from the tables just written, as
``kvsim report`` does (``render_extras``). Where only one CPU is available the report is
rendered in this process instead (``worth_a_worker``), and so it is where matplotlib
is imported already (nothing to overlap) or this process started a worker before (the
import it hides is paid once per process: a test session or a notebook running again
pays it once in process rather than once per run).

Protocol: one JSON line per request on the worker's stdin (``{"folder": PATH}``), one
JSON line per answer on its stdout (``{"problem": null}`` or the one-line note of
``render_extras``); EOF on stdin ends it. No pickle: nothing but a path goes in and a
line of text comes out.

Invariant: the files written are those ``render_extras(folder)`` writes in this process,
byte for byte (the plots are drawn from the folder's tables; tests/report compare the
two); the worker writes only into the folder it is handed, and only while the caller
waits for its answer (the caller renames the folder into place after); a worker that
cannot start, dies or answers nonsense leaves the report out with the same one-line note
as a rendering error, never a traceback; ``close`` ends it on every exit path (it runs in
its own session, so Ctrl-C reaches only ``kvsim``, which closes it; it also ends when its
stdin closes, so it never outlives ``kvsim``).
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

#: the worker's command, run with ``-P`` (no current folder on the path, where a ``./sim``
#: would shadow kvsim): this ``sim`` first unless its folder is on the path already (an
#: installed kvsim: site-packages must not move ahead of the standard library)
_BOOT = (
    "import runpy, sys\n"
    "if sys.argv[1] not in sys.path:\n"
    "    sys.path.insert(0, sys.argv[1])\n"
    "runpy.run_module('sim.report.worker', run_name='__main__')"
)


#: workers started by this process (``worth_a_worker`` allows one)
_STARTED: list[int] = []


def worth_a_worker() -> bool:
    """Whether a worker saves time: none was started by this process yet and matplotlib
    is not imported here (the import it hides is paid once per process: a notebook or a
    test session that runs again renders in process, after one import) and a second CPU
    can warm it up while the run uses the first."""
    if _STARTED or "matplotlib" in sys.modules:
        return False
    try:
        return len(os.sched_getaffinity(0)) > 1
    except AttributeError:  # no sched_getaffinity (macOS): the machine's count
        return (os.cpu_count() or 1) > 1


class ReportWorker:
    """One worker process rendering the report of a run folder on request."""

    def __init__(self) -> None:
        root = str(Path(__file__).resolve().parents[2])  # the folder holding this ``sim``
        try:
            self._proc: subprocess.Popen[str] | None = subprocess.Popen(
                [sys.executable, "-P", "-c", _BOOT, root], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                start_new_session=True,
            )  # fmt: skip
        except OSError:  # no process to start (limits): the caller renders in process
            self._proc = None
        else:
            _STARTED.append(self._proc.pid)

    @property
    def started(self) -> bool:
        return self._proc is not None

    def render(self, folder: Path) -> str | None:
        """Render the report into ``folder`` (None) or the one-line note of why not."""
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdout is None:
            return _not_written("no report worker")
        try:
            proc.stdin.write(json.dumps({"folder": str(folder)}) + "\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
            answer = json.loads(line)
            problem = answer["problem"]
            if problem is None or isinstance(problem, str):
                return problem
        except (OSError, ValueError, KeyError, TypeError):
            pass
        self.close()
        from sim.report.render import remove_report

        remove_report(folder)  # whatever a dying worker half-wrote
        return _not_written("the report worker stopped")

    def close(self, *, kill: bool = False) -> None:
        """End the worker (idempotent): EOF, which it reads between requests, or ``kill``
        (an error or Ctrl-C: no waiting for a warm-up nobody needs now)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if kill:
                proc.kill()
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
        finally:
            if proc.stdout is not None:
                proc.stdout.close()

    def __enter__(self) -> ReportWorker:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.close(kill=exc_type is not None)


def _not_written(reason: str) -> str:
    """``render_extras``' one line (imported here only on a failure: it imports matplotlib)."""
    from sim.report.render import not_written

    return not_written(reason)


def _warm() -> None:
    """Import and draw what rendering needs, so that the request pays for drawing only."""
    importlib.import_module("pyarrow.parquet")  # read_parquet's engine (untyped: by name)

    from sim.report.plots import figure_png, new_figure

    fig = new_figure()
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, 1], label="warm")
    ax.legend()
    figure_png(fig)


def serve(stdin=sys.stdin, stdout=sys.stdout) -> None:
    """The worker's loop: warm up, then one answer line per request line until EOF."""
    from sim.report.render import render_extras

    try:
        _warm()
    except Exception:  # noqa: BLE001  (rendering meets it again and says it in one line)
        pass
    for line in stdin:
        try:
            folder = Path(json.loads(line)["folder"])
            problem = render_extras(folder, folder, report=True, trace=False)
        except Exception as exc:  # noqa: BLE001  (a bad request: say so, keep serving)
            problem = _not_written(f"{type(exc).__name__}: {exc}")
        stdout.write(json.dumps({"problem": problem}) + "\n")
        stdout.flush()


if __name__ == "__main__":  # pragma: no cover  (run as a process by ReportWorker)
    answers, sys.stdout = sys.stdout, sys.stderr  # a stray print cannot break the protocol
    serve(sys.stdin, answers)
