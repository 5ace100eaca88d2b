"""User-facing errors: one clear line, never a traceback.

Invariant: every error caused by user input (a profile, a scenario, a trace, a flag) is a
``KvsimError`` whose ``str()`` is a single line naming the file, line and field where
known, and the valid choices where there is a closed set. The CLI prints it and exits 2.
"""

from __future__ import annotations


class KvsimError(Exception):
    """An error in user input, printed as one line by the CLI."""


class ConfigError(KvsimError):
    """A profile or scenario that does not validate.

    ``location`` is ``file:line`` (or just ``file``), ``field`` a dotted path.
    """

    def __init__(self, message: str, *, location: str | None = None, field: str | None = None):
        self.location = location
        self.field = field
        self.message = message
        parts = [p for p in (location, field) if p]
        super().__init__(": ".join([*parts, message]))


class UnknownNameError(KvsimError):
    """A profile, strategy or kind name that is not registered."""

    def __init__(self, what: str, name: str, valid: list[str]):
        self.what, self.name, self.valid = what, name, sorted(valid)
        super().__init__(f"unknown {what} {name!r}; valid: {', '.join(self.valid)}")
