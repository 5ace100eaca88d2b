"""Shared test fixtures: profiles by name, a CLI runner that captures one command's output;
and the suite's layout under pytest-xdist (``-n auto``, ``--dist loadgroup`` from
``pyproject.toml``).

Invariant under xdist: a test file is one unit of work (its module fixtures are built once,
on one worker) unless it names ``xdist_group`` marks itself, which it does only to spread
heavy work (a notebook each, the fuzz shards) across workers; those named groups are
handed out first, so that no heavy unit is left for the end of the run. Each worker's
default process pool (``sim.sweep.executor.default_workers``) is its share of the CPUs, so
workers that each start a pool do not oversubscribe the machine. A plain ``pytest`` run
(no ``-n``) is untouched by both.
"""

from __future__ import annotations

import os
import shlex

import pytest

os.environ.setdefault("COLUMNS", "200")  # rich tables: do not wrap numbers in captured output


def _xdist_workers(config: pytest.Config) -> int:
    """How many xdist workers share the machine; 0 outside an xdist worker."""
    if not hasattr(config, "workerinput"):
        return 0
    return int(config.workerinput.get("workercount", 1))


def pytest_configure(config: pytest.Config) -> None:
    workers = _xdist_workers(config)
    if workers > 1:
        import sim.sweep.executor as executor

        share = max(1, executor.default_workers() // workers)
        executor.default_workers = lambda: share  # read at call time by every pool's sizing


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns the marks into scopes
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not _xdist_workers(config):
        return
    named = []
    for item in items:
        if any(item.iter_markers("xdist_group")):
            named.append(item)
        else:  # the file is the unit: its module fixtures are built once
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
    first = set(map(id, named))
    items[:] = named + [it for it in items if id(it) not in first]  # each worker the same order


@pytest.fixture
def run_cli(capsys):
    """Run ``kvsim ARGS`` in-process; return (exit code, stdout, stderr)."""
    from sim.cli import main

    def _run(cmd: str | list[str]):
        argv = shlex.split(cmd) if isinstance(cmd, str) else list(cmd)
        if argv and argv[0] == "kvsim":
            argv = argv[1:]
        code = main(argv)
        out = capsys.readouterr()
        return code, out.out, out.err

    return _run
