"""User-facing errors: one clear line, never a traceback.

Invariant: every error caused by user input (a profile, a scenario, a trace, a flag) is a
``KvsimError`` whose ``str()`` is a single line naming the file, line and field where
known, and the valid choices where there is a closed set. The CLI prints it and exits 2.
A plug-in (code a user registers by name: a scheduler, a strategy, a policy) that breaks
its contract at a seam is the user's input too: ``PluginError``, one line naming it. A
broken invariant of the simulator's own books (a bug, never the user's input) is the one
other failure: ``InvariantError``, raised by every ``check_invariants`` and ``check``.
"""

from __future__ import annotations

#: the process's exit status after Ctrl-C (128 + SIGINT, the shell's convention): every
#: command path (``sim.cli``, its quick paths, its typer commands) exits with it
EXIT_INTERRUPTED = 130


class KvsimError(Exception):
    """An error in user input, printed as one line by the CLI."""


class PluginError(KvsimError):
    """A registered plug-in broke its contract where its answer enters kvsim (a rank with
    NaN, a promise its own ranks break): one line naming the plug-in and the rule."""


class ConfigError(KvsimError):
    """A profile or scenario that does not validate.

    ``location`` is ``file:line`` (or just ``file``), ``field`` a dotted path; ``problems``
    lists every problem found when there are several (this error then says the first and
    counts the rest), and is empty when this error is the only one.
    """

    def __init__(
        self,
        message: str,
        *,
        location: str | None = None,
        field: str | None = None,
        problems: list[KvsimError] | None = None,
    ):
        self.location = location
        self.field = field
        self.message = message
        self.problems: list[KvsimError] = list(problems or [])
        parts = [p for p in (location, field) if p]
        super().__init__(": ".join([*parts, message]))


class UnknownNameError(KvsimError):
    """A profile, strategy or kind name that is not registered."""

    def __init__(self, what: str, name: str, valid: list[str]):
        self.what, self.name, self.valid = what, name, sorted(valid)
        super().__init__(f"unknown {what} {name!r}; valid: {', '.join(self.valid)}")


class InvariantError(AssertionError):
    """The simulator's own books do not balance (a bug, not a user error); the message names
    the broken invariant. The one invariant-failure mechanism: checks raise it rather than
    using ``assert`` (stripped under ``python -O``) or a bare ``AssertionError``."""


def shown(value: object) -> str:
    """A plug-in's value as an error shows it: its type and a repr of at most 60
    characters (the one line stays short whatever the plug-in returned)."""
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def escaped_text(text: str) -> str:
    """``text`` as UTF-8 can carry it: each byte Python kept as a surrogate (a file name or
    argument that is not UTF-8, ``$'x\\xff'``, PEP 383) escaped as ``\\xNN``; the bytes
    of a UTF-8 name Python decoded as ASCII (``LANG=C`` without UTF-8 mode) shown as their
    characters again; any other text unchanged. How every error line shows a name."""
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate no decoding of a name makes: escaped as is
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")
