"""``kvsim validate FILE [--set KEY=VALUE ...]``: check a scenario without running it.

Invariant: the command parses its flags and hands them to ``sim.cli._validate.report``
(the checks and every line printed: one ``ok`` line, or one ``kvsim: error:
file:line: field: message`` line per problem, at most ``MAX_PROBLEMS``, and exit 2);
``sim.cli.main`` calls ``report`` itself for a plain ``kvsim validate FILE [--set ...]``
without building this parser, with the same lines and status.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sim.cli._validate import MAX_PROBLEMS, check, report

__all__ = ["MAX_PROBLEMS", "check", "register", "validate"]


def register(app: typer.Typer) -> None:
    """Add ``validate`` to the app."""
    app.command(
        "validate", help="Check a scenario file (schema, trace files, profiles, KV pool, allocator)."
    )(validate)


def validate(
    file: Annotated[Path, typer.Argument(help="Scenario YAML file.")],
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override a field: KEY=VALUE.")
    ] = None,
) -> None:
    """Load, check trace files, resolve and build the allocator; print one line or the
    problems."""
    code = report(file, set_)
    if code:
        raise typer.Exit(code=code)
