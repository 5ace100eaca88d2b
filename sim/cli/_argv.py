"""A plain command line read without typer, for the quick paths of ``kvsim validate`` and
``kvsim run`` (``sim.cli._validate``, ``sim.cli._run``).

Responsibility: ``plain_words(argv, command, valued, switches)`` splits ``command WORD ...``
into its positional words, the values of the flags that take one (``--flag VALUE`` or
``--flag=VALUE``, in order) and the switches given; it answers None for anything typer's
parser must answer (help, an unknown flag, ``--``, a switch given twice or with a value, a
value that looks like a flag, an empty word), so a quick path never guesses.

Invariant: a line it reads is one typer reads the same way (the quick paths' tests compare
both); nothing here imports more than the standard library.
"""

from __future__ import annotations

from typing import NamedTuple


class PlainWords(NamedTuple):
    """A plain command line's positional words, flag values and switches."""

    files: list[str]
    values: dict[str, list[str]]  # each flag of ``valued`` -> its values in order
    switches: frozenset[str]


def plain_words(
    argv: list[str], command: str, valued: tuple[str, ...], switches: tuple[str, ...] = ()
) -> PlainWords | None:
    """``argv`` (``command`` first) read as plain words, or None (typer's parser answers)."""
    if argv[:1] != [command]:
        return None
    files: list[str] = []
    values: dict[str, list[str]] = {flag: [] for flag in valued}
    seen: set[str] = set()
    rest = iter(argv[1:])
    for arg in rest:
        name, eq, inline = arg.partition("=")
        if name in values:
            value = inline if eq else next(rest, None)
            if value is None or (not eq and value.startswith("-")):
                return None
            values[name].append(value)
        elif arg in switches and arg not in seen:
            seen.add(arg)
        elif arg.startswith("-") or not arg:
            return None
        else:
            files.append(arg)
    return PlainWords(files, values, frozenset(seen))
