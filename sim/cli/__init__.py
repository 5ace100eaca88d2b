"""The ``kvsim`` command line.

Invariant: user errors (``KvsimError``) print one line on stderr and exit with status 2,
never a traceback; each sub-command lives in its own module of this package and
registers itself through ``register(app)``; modules are listed in ``COMMAND_MODULES``.
``kvsim --version`` prints the installed distribution's version (its metadata, what pip
reports). Ctrl-C while the commands import prints ``kvsim: interrupted`` and exits 130,
never a traceback (inside a command, typer turns it into exit 130; ``run``, ``sweep`` and
``compare`` say what is on disk).
"""

from __future__ import annotations

import importlib
import importlib.metadata
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
    "workload",
    "sweep",
    "capacity",
    "validate_e2e",
    "report",
    "compare",
    "calibrate",
]

app = typer.Typer(
    name="kvsim",
    help="kvsim: KV-cache memory simulator for LLM agent serving.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


DIST_NAME = "kvcache-sim"


def installed_version() -> str:
    """The installed distribution's version (what pip reports), from its metadata."""
    try:
        return importlib.metadata.version(DIST_NAME)
    except importlib.metadata.PackageNotFoundError:
        # run from a checkout that was never installed: the source's own version
        from sim import __version__

        return f"{__version__} (not installed)"


def _print_version(value: bool) -> None:
    if value:
        print(f"kvsim {installed_version()}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_print_version,
        help="Print the installed kvsim version and exit.",
    ),
) -> None:  # fmt: skip
    """kvsim: KV-cache memory simulator for LLM agent serving."""


def _register_all() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(f"sim.cli.{name}").register(app)


#: exit status after Ctrl-C (128 + SIGINT, the shell's convention)
EXIT_INTERRUPTED = 130

try:
    _register_all()
except KeyboardInterrupt:  # Ctrl-C while the commands import (start-up): no traceback
    print("kvsim: interrupted", file=sys.stderr)
    raise SystemExit(EXIT_INTERRUPTED) from None


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: run the app, turning user errors into one line."""
    from sim.cli._common import Invocation

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        # without standalone mode click returns a command's typer.Exit code instead of exiting;
        # obj hands the argv to the commands (``kvsim run`` records it in summary.json)
        code = app(args=argv, standalone_mode=False, obj=Invocation(argv))
        if isinstance(code, int) and not isinstance(code, bool):
            return code
    except KvsimError as exc:
        print(f"kvsim: error: {exc}", file=sys.stderr)
        return 2
    except typer.Exit as exc:
        return exc.exit_code
    except KeyboardInterrupt:  # outside a command (typer exits 130 on one inside)
        print("kvsim: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
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
