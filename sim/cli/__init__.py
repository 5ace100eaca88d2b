"""The ``kvsim`` command line.

Invariant: user errors (``KvsimError``) print one line on stderr and exit with status 2,
never a traceback; each sub-command lives in its own module of this package and
registers itself through ``register(app)``; modules are listed in ``COMMAND_MODULES``.
"""

from __future__ import annotations

import importlib
import sys

import typer

from sim.errors import KvsimError

#: sub-command modules of this package, each exposing ``register(app: typer.Typer)``
COMMAND_MODULES: list[str] = [
    "plan",
    "profiles",
    "breakeven",
    "trace_replay",
    "alloc_replay",
    "regress",
    "run",
    "validate",
    "schema",
]

app = typer.Typer(
    name="kvsim",
    help="kvsim: KV-cache memory simulator for LLM agent serving.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register_all() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(f"sim.cli.{name}").register(app)


_register_all()


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: run the app, turning user errors into one line."""
    try:
        # without standalone mode click returns a command's typer.Exit code instead of exiting
        code = app(args=argv, standalone_mode=False)
        if isinstance(code, int) and not isinstance(code, bool):
            return code
    except KvsimError as exc:
        print(f"kvsim: error: {exc}", file=sys.stderr)
        return 2
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        print("kvsim: aborted", file=sys.stderr)
        return 1
    except typer.TyperException as exc:  # usage errors: missing or bad flags
        show = getattr(exc, "show", None)
        if callable(show):
            show()
        else:
            print(f"kvsim: error: {exc.format_message()}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
