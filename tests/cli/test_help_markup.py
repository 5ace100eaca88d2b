"""Every help text of every command reads in ``--help`` as it is written.

Typer renders help through rich markup (its default ``rich_markup_mode``): a bracketed
fragment that starts like a style tag (``[default: model's]``, ``[first_id, count]``) is
taken as markup and silently deleted, so ``kvsim plan --help`` used to print "Tensor
parallelism ." Such a fragment must be escaped (``\\[``). The check is rich's own parse of
each text: its plain result must be the text with only the escapes removed.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from typer.main import get_command
from typer.testing import CliRunner

from sim.cli import app


def _texts() -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []

    def walk(cmd: Any, path: str) -> None:  # a click command (typer's, not imported here)
        for name, text in [("help", cmd.help or ""), ("epilog", cmd.epilog or "")]:
            out.append((f"{path} {name}", text))
        for param in cmd.params:
            out.append((f"{path} {param.name}", getattr(param, "help", None) or ""))
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {name}")

    walk(get_command(app), "kvsim")
    return [(where, text) for where, text in out if text]


def test_the_walk_sees_every_command_and_option() -> None:
    where = {w for w, _ in _texts()}
    assert "kvsim plan tp" in where and "kvsim breakeven help" in where
    assert any(w.startswith("kvsim trace-replay ") for w in where)
    assert len(where) > 100


def test_every_help_text_survives_rich_markup() -> None:
    eaten = [w for w, text in _texts() if Text.from_markup(text).plain != text.replace("\\[", "[")]
    assert eaten == []


def test_the_defaults_are_shown() -> None:
    shown = CliRunner().invoke(app, ["plan", "--help"], env={"COLUMNS": "250"}).output
    assert "Tensor parallelism [default: num_gpus / pp]." in shown
    assert "bf16, fp8 or int4 [default: model's]." in shown
