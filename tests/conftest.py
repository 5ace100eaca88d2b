"""Shared test fixtures: profiles by name, a CLI runner that captures one command's output."""

from __future__ import annotations

import os
import shlex

import pytest

os.environ.setdefault("COLUMNS", "200")  # rich tables: do not wrap numbers in captured output


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
