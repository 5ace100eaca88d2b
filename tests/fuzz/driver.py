"""Fuzz driver: run many ``kvsim`` command lines, each in its own forked process.

Usage: ``python driver.py MANIFEST.json`` where the manifest is
``{"warm": [argv, ...], "cases": [{"id": ..., "argv": [...]}, ...]}``; prints one JSON
line per case: ``{"id", "code", "signal", "stderr"}``. The ``warm`` command lines (valid
ones) run first in this process, so the children inherit every import and cache.

Responsibility: pay the interpreter start and the imports once, yet keep every case
isolated with its own limits: each case is a child forked from this warm process that sets
a ``CASE_AS_BYTES`` address-space limit (``RLIMIT_AS``) and a ``CASE_TIMEOUT_S``
wall-clock alarm (the default SIGALRM action kills it), runs ``sim.cli.main(argv)`` with
stderr captured, and exits with its status. An exception that escapes ``main`` is printed
as a traceback (the test then fails on it).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import sys
import tempfile
import traceback

CASE_AS_BYTES = 1 << 30  # 1 GiB of address space per case
CASE_TIMEOUT_S = 30


def _child(argv: list[str], err_fd: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CASE_AS_BYTES, CASE_AS_BYTES))
    signal.alarm(CASE_TIMEOUT_S)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(err_fd, 2)
    code = 70
    try:
        from sim.cli import main

        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - the point is to show it
        traceback.print_exc()
        code = 70
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code if isinstance(code, int) else 1)


def run_case(argv: list[str]) -> dict:
    """Fork, run one command line, wait; (exit code, killing signal, stderr)."""
    with tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:
            _child(argv, err.fileno())
        _, status = os.waitpid(pid, 0)
        err.seek(0)
        text = err.read().decode("utf-8", "replace")
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    return {"code": code, "signal": sig, "stderr": text}


def main() -> int:
    with open(sys.argv[1], encoding="utf-8") as f:
        manifest = json.load(f)
    from sim.cli import main as kvsim

    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        for argv in manifest.get("warm", []):
            kvsim(argv)
    for case in manifest["cases"]:
        out = run_case(case["argv"])
        print(json.dumps({"id": case["id"], **out}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
