"""``kvsim schema [--kind scenario|sweep] [--out FILE]``: the JSON Schema of scenario files
(default) or of sweep files (``--kind sweep``, ``sim.sweep.spec``), for editor completion.

Invariant: prints (or writes) exactly one JSON document (draft 2020-12), generated from
the same pydantic models that validate scenarios, shorthands included (``model: NAME``, a
bare number for a distribution), so it never drifts from them: every shipped scenario
validates against it with the ``jsonschema`` package (tests/scenario).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    """Add ``schema`` to the app."""
    app.command("schema", help="Print the JSON Schema of scenario files.")(schema)


def schema(
    out: Annotated[Path | None, typer.Option("--out", help="Write to this file instead.")] = None,
    kind: Annotated[
        str, typer.Option("--kind", help="scenario (the default) or sweep (sweep files).")
    ] = "scenario",
) -> None:
    from sim.errors import KvsimError
    from sim.scenario import json_schema
    from sim.sweep.spec import json_schema as sweep_schema

    if kind not in ("scenario", "sweep"):
        raise KvsimError(f"--kind {kind!r}: valid: scenario, sweep")
    text = json.dumps(sweep_schema() if kind == "sweep" else json_schema(), indent=2) + "\n"
    if out is None:
        typer.echo(text, nl=False)
    else:
        try:  # a folder, or a file on the way: one line, as ``workload sample --out``
            out.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise KvsimError(f"--out {out}: cannot write: {exc.strerror}") from None
