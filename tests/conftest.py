"""Shared test fixtures: profiles by name, a CLI runner that captures one command's output;
and the suite's layout under pytest-xdist (``-n auto``: xdist's ``loadscope`` schedule,
in collection order, unless ``--dist`` is given).

Invariant under xdist: a test file's module-level tests are one unit of work (its module
fixtures are built once, on one worker), and each test class is a unit of its own. The
suite has classes only to spread heavy work across workers (a notebook each, the fuzz
shards), and those are handed out first, so that no heavy unit is left for the end of the
run. Each worker's default process pool (``sim.sweep.executor.default_workers``) is its
share of the CPUs, so workers that each start a pool do not oversubscribe the machine. A
plain ``pytest`` run (no ``-n``) is untouched by both.
"""

from __future__ import annotations

import os
import shlex
import signal
from contextlib import contextmanager

import pytest
from hypothesis import settings
from hypothesis_profiles import hypothesis_profile

os.environ.setdefault("COLUMNS", "200")  # rich tables: do not wrap numbers in captured output



def _xdist_workers(config: pytest.Config) -> int:
    """How many xdist workers share the machine; 0 outside an xdist worker."""
    if not hasattr(config, "workerinput"):
        return 0
    return int(config.workerinput.get("workercount", 1))


def pytest_configure(config: pytest.Config) -> None:
    # hypothesis profiles (docs/testing.md, "Hypothesis profiles"): random locally, the
    # same examples every run in CI (``hypothesis_profiles``); loaded here, where an
    # unknown name's UsageError prints as one line (at import it was a traceback)
    settings.load_profile(hypothesis_profile(dict(os.environ)))
    workers = _xdist_workers(config)
    if workers > 1:
        import sim.sweep.executor as executor

        share = max(1, executor.default_workers() // workers)
        executor.default_workers = lambda: share  # read at call time by every pool's sizing


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _xdist_workers(config):  # the classes (heavy units) first, each worker the same order
        items.sort(key=lambda item: getattr(item, "cls", None) is None)  # stable


@pytest.hookimpl(optionalhook=True)  # defined by pytest-xdist; unused without it
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``-n N`` alone: ``loadscope`` (a file's module-level tests one unit, a class another)
    in collection order (the classes first, above), not xdist's most-tests-first order."""
    given = any(a == "-d" or a.startswith("--dist") for a in config.invocation_params.args)
    if given:
        return None  # xdist's own choice
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False
    return LoadScopeScheduling(config, log)


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


@contextmanager
def _deadline(seconds: int):
    def _raise(*_):
        raise TimeoutError(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, _raise)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture
def deadline():
    """``with deadline(seconds):`` fails the test (instead of hanging the suite) when the
    body runs longer than ``seconds`` (SIGALRM: the main thread, as pytest-xdist runs it)."""
    return _deadline
