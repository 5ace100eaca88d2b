"""``kvsim profiles list|show``: what hardware and models are available.

Invariant: read-only; JSON output for models adds the derived ``kv_bytes_per_token``.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from sim.cli._common import print_json
from sim.errors import KvsimError, UnknownNameError
from sim.profiles import available, load_profile
from sim.profiles.registry import KIND_DIRS

profiles_app = typer.Typer(
    help="List and show hardware, node and model profiles.", no_args_is_help=True
)


def register(app: typer.Typer) -> None:
    """Add the ``profiles`` group to the app."""
    app.add_typer(profiles_app, name="profiles")


def _kinds(kind: str | None) -> list[str]:
    if kind is None:
        return list(KIND_DIRS)
    if kind not in KIND_DIRS:
        raise UnknownNameError("profile kind", kind, list(KIND_DIRS))
    return [kind]


@profiles_app.command("list")
def list_cmd(
    kind: Annotated[str | None, typer.Option(help="model, accelerator or node.")] = None,
    profiles: Annotated[list[str] | None, typer.Option(help="Extra profile folder(s).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List profile names by kind, with the file each comes from."""
    found = {k: available(k, profiles) for k in _kinds(kind)}
    if json_out:
        print_json(
            {k: [{"name": n, "file": str(p)} for n, p in v.items()] for k, v in found.items()}
        )
        return
    table = Table("kind", "name", "file")
    for k, v in found.items():
        for n, p in v.items():
            table.add_row(k, n, str(p))
    Console().print(table)


@profiles_app.command("show")
def show_cmd(
    name: Annotated[str, typer.Argument(help="Profile name.")],
    profiles: Annotated[list[str] | None, typer.Option(help="Extra profile folder(s).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show one profile's fields (models also show KV bytes per token)."""
    kinds = [k for k in KIND_DIRS if name in available(k, profiles)]
    if not kinds:
        every = [n for k in KIND_DIRS for n in available(k, profiles)]
        raise UnknownNameError("profile", name, every)
    if len(kinds) > 1:
        raise KvsimError(f"profile name {name!r} is ambiguous: it is a {' and a '.join(kinds)}")
    prof = load_profile(kinds[0], name, profiles)
    data = prof.model_dump()
    if kinds[0] == "model":
        from sim.sizing import kv_bytes_per_token

        data["kv_bytes_per_token"] = kv_bytes_per_token(prof)
    if json_out:
        print_json(data)
        return
    table = Table("field", "value", title=f"{kinds[0]} {name}")
    for k, v in data.items():
        table.add_row(k, str(v))
    Console().print(table)
