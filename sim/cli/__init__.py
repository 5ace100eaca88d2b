"""The ``kvsim`` command line.

Invariant: user errors (``KvsimError``) print one line on stderr and exit with status 2,
never a traceback; each sub-command lives in its own module of this package and
registers itself through ``register(app)``; ``COMMANDS`` maps each command to its module
(``COMMAND_MODULES``, in help order). ``kvsim --version`` prints the installed
distribution's version (its metadata, what pip reports). Ctrl-C while the commands
import prints ``kvsim: interrupted`` and exits 130, never a traceback (inside a command,
typer turns it into exit 130; ``run``, ``sweep`` and ``compare`` say what is on disk).

Start-up: a command's module (and what it imports: pandas, pyarrow, matplotlib, rich,
the engine) is imported only when that command runs, or when the help lists every
command; ``kvsim --version`` imports none, a plain ``kvsim validate FILE [--set
KEY=VALUE ...]`` is answered by ``sim.cli._validate`` and a plain ``kvsim run FILE --out
DIR`` (only ``--set``, ``--quiet``, ``--force``, ``--no-report``, ``--trace``) by
``sim.cli._run`` without building the typer parser (the same lines, status and folder as
the typer command, which answers every other form; ``sim.cli._argv`` reads both lines;
``tests/cli/test_startup_imports.py`` checks which heavy modules each path leaves out).
``run`` and ``validate`` start with the garbage collector off (``sim.cli._startup_gc``).
``app`` is the fully registered Typer app, built on first access. ``main`` turns
pydantic's plug-in discovery off (``PYDANTIC_DISABLE_PLUGINS=__all__``) for the command
and the worker processes it starts, unless the environment sets that variable, and puts
the variable back when the command returns: the scan of every installed distribution's
entry points cost each command ~60 ms. With the switch at ``__all__``, pydantic's plug-in
loader itself is not imported either (``sim.cli._pydantic_plugins``: it imports
``importlib.metadata``, ~40 ms).
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING

from sim.cli import _startup_gc  # imported with the package: main pauses the collector first thing
from sim.errors import EXIT_INTERRUPTED, KvsimError

if TYPE_CHECKING:
    from pathlib import Path

    import typer

#: command name -> the module of this package that registers it, in help order
COMMANDS: dict[str, str] = {
    "plan": "plan",
    "profiles": "profiles",
    "breakeven": "breakeven",
    "trace-replay": "trace_replay",
    "alloc-replay": "alloc_replay",
    "regress": "regress",
    "run": "run",
    "validate": "validate",
    "schema": "schema",
    "workload": "workload",
    "sweep": "sweep",
    "capacity": "capacity",
    "validate-e2e": "validate_e2e",
    "report": "report",
    "compare": "compare",
    "calibrate": "calibrate",
}
#: sub-command modules of this package, each exposing ``register(app: typer.Typer)``
COMMAND_MODULES: list[str] = list(dict.fromkeys(COMMANDS.values()))

DIST_NAME = "kvcache-sim"


def installed_version() -> str:
    """The installed distribution's version (what pip reports), from its metadata."""
    import importlib.metadata

    try:
        return importlib.metadata.version(DIST_NAME)
    except importlib.metadata.PackageNotFoundError:
        # run from a checkout that was never installed: the source's own version
        from sim import __version__

        return f"{__version__} (not installed)"


_apps: list[typer.Typer] = []  # the one app, built on first use (typer is not imported before)


def _the_app() -> typer.Typer:
    if _apps:
        return _apps[0]
    import typer

    app = typer.Typer(
        name="kvsim",
        help="kvsim: KV-cache memory simulator for LLM agent serving.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )

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

    _apps.append(app)
    return app


_registered: set[str] = set()


def _register(modules: list[str]) -> typer.Typer:
    """Import and register ``modules`` (once each); the commands stay in help order."""
    app = _the_app()
    for name in modules:
        if name not in _registered:
            importlib.import_module(f"sim.cli.{name}").register(app)
            _registered.add(name)
    order = {name: i for i, name in enumerate(COMMANDS)}
    app.registered_commands.sort(key=lambda c: order.get(c.name or "", len(order)))
    app.registered_groups.sort(key=lambda g: order.get(g.name or "", len(order)))
    return app


def _modules_for(argv: list[str]) -> list[str]:
    """The command modules ``argv`` needs: its command's alone, none for ``--version``
    without a command, every one otherwise (help, a mistyped command: they list all)."""
    i = next((i for i, a in enumerate(argv) if not a.startswith("-")), len(argv))
    before = argv[:i]  # the root's own flags
    if "--help" in before or "-h" in before:
        return COMMAND_MODULES
    if i < len(argv) and argv[i] in COMMANDS:
        return [COMMANDS[argv[i]]]
    if i == len(argv) and "--version" in before:
        return []
    return COMMAND_MODULES


def get_app() -> typer.Typer:
    """The Typer app with every command registered."""
    return _register(COMMAND_MODULES)


def __getattr__(name: str) -> typer.Typer:
    # ``sim.cli.app``: the whole app, registered on first access (PEP 562)
    if name == "app":
        return get_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: pydantic's switch for its plug-ins: the ``kvsim`` command sets it to ``__all__`` (none)
#: unless the environment sets it (``main``)
PYDANTIC_PLUGINS_ENV = "PYDANTIC_DISABLE_PLUGINS"

#: pyarrow's choice of memory pool: the ``kvsim`` command asks for the system allocator
#: unless the environment names one (``main``). pyarrow's default, mimalloc, keeps what the
#: tables' conversion and writing freed: 55 MB of a 50,000-request chat run's peak RSS
#: (322 -> 267 MB, docs/performance.md)
ARROW_POOL_ENV = "ARROW_DEFAULT_MEMORY_POOL"


#: the commands whose start-up runs with the garbage collector off (``sim.cli._startup_gc``:
#: ``run`` switches it back on, objects frozen, once its simulation is built; ``validate``
#: ends first)
START_UP_GC_OFF = ("run", "validate")


def _command(argv: list[str]) -> str | None:
    """The command ``argv`` names (its first word that is not a flag), or None."""
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: run the app, turning user errors into one line."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv == ["--version"]:  # the one flag alone: no command line parser to build
        print(f"kvsim {installed_version()}")
        return 0
    with _startup_gc.paused(_command(argv) in START_UP_GC_OFF):
        return _with_switches(argv)


def _with_switches(argv: list[str]) -> int:
    """``_main`` with pydantic's plug-in scan off and pyarrow's system pool, each unless the
    environment says otherwise, and both put back after it."""
    # pydantic looks for its plug-ins (entry points of every installed distribution, ~60
    # ms) before it builds the first validator; kvsim's own config models need none. Set
    # for the command (and the worker processes it starts), then put back: a caller in the
    # same process (a notebook, a test) keeps its plug-ins
    before = os.environ.get(PYDANTIC_PLUGINS_ENV)
    os.environ.setdefault(PYDANTIC_PLUGINS_ENV, "__all__")
    # the same for pyarrow's memory pool (read when pyarrow first allocates: a process that
    # has used pyarrow already keeps its pool)
    arrow_before = os.environ.get(ARROW_POOL_ENV)
    os.environ.setdefault(ARROW_POOL_ENV, "system")
    from sim.cli import _pydantic_plugins

    if os.environ[PYDANTIC_PLUGINS_ENV] in _pydantic_plugins.ALL_OFF:  # loader import: ~40 ms
        _pydantic_plugins.install()
    try:
        return _main(argv)
    finally:
        if before is None:
            os.environ.pop(PYDANTIC_PLUGINS_ENV, None)
        if arrow_before is None:
            os.environ.pop(ARROW_POOL_ENV, None)


def _main(argv: list[str]) -> int:
    """``main`` past ``--version``: the quick validate or run path, else the typer app."""
    from sim.cli._validate import plain_argv

    plain = plain_argv(argv)
    if plain is not None:  # ``validate FILE [--set ...]``: no command line parser to build
        return _validate_plain(*plain)
    if argv[:1] == ["run"]:
        from sim.cli._run import plain_argv as plain_run_argv

        run_args = plain_run_argv(argv)
        if run_args is not None:  # ``run FILE --out DIR [--set ...] [flags]``: the same
            return _run_plain(run_args, argv)
    import typer

    from sim.cli._common import Invocation

    try:
        # without standalone mode click returns a command's typer.Exit code instead of exiting;
        # obj hands the argv to the commands (``kvsim run`` records it in summary.json)
        app = _register(_modules_for(argv))
        code = app(args=argv, standalone_mode=False, obj=Invocation(argv))
        if isinstance(code, int) and not isinstance(code, bool):
            return code
    except KvsimError as exc:
        _print_error(exc)
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
            _print_error(exc.format_message())
        return exc.exit_code
    return 0


def _print_error(message: object) -> None:
    """The one error line on stderr (``sim.cli._common.print_error``: as stdout's lines are
    written, on an ASCII stderr too)."""
    from sim.cli._common import print_error

    print_error(message)


def _validate_plain(file: Path, sets: list[str] | None) -> int:
    """``kvsim validate`` without typer (``sim.cli._validate``): the status and the lines
    the typer command gives for the same arguments, user errors and Ctrl-C included."""
    from sim.cli._validate import report

    try:
        return report(file, sets)
    except KvsimError as exc:
        _print_error(exc)
        return 2
    except KeyboardInterrupt:  # as typer inside a command: the status alone
        return EXIT_INTERRUPTED


def _run_plain(args: dict, argv: list[str]) -> int:
    """``kvsim run`` without typer (``sim.cli._run``): the status, the lines and the run
    folder the typer command gives for the same arguments, user errors included."""
    from sim.cli._run import command

    try:
        return command(**args, argv=["kvsim", *argv])
    except KvsimError as exc:
        _print_error(exc)
        return 2
    except KeyboardInterrupt:  # outside the command's own handler: the status alone
        return EXIT_INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
