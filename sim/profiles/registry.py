"""Finding and loading profiles by name.

The shipped profiles are the top-level ``hardware_profiles/`` folder, which the build maps
into the package as ``sim._profiles`` (pyproject.toml): a wheel install finds them as
package data through ``importlib.resources``; an editable install or a run from the
checkout finds the folder itself. Both are one copy of the files.

Invariant: a name resolves to exactly one file: user folders (``--profiles DIR`` or the
``KVSIM_PROFILES`` path list) are searched before the shipped profiles, so
a user profile of the same name shadows the shipped one. Every load validates; a bad file
is a one-line ``ConfigError`` naming file, line and field, an unknown name an
``UnknownNameError`` listing what exists.
"""

from __future__ import annotations

import copy
import functools
import importlib.resources
import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sim.errors import ConfigError, KvsimError, UnknownNameError
from sim.profiles.schema import PROFILE_CLASSES
from sim.yamlio import (
    LineMap,
    clean_loc,
    format_validation_error,
    load_yaml,
    read_sha256_manifest,
    validation_message,
)

#: kind -> sub-folder of a profiles directory
KIND_DIRS = {"accelerator": "accelerators", "model": "models", "node": "nodes"}
ENV_VAR = "KVSIM_PROFILES"


#: where the build puts ``hardware_profiles/`` inside the ``sim`` package
PACKAGED_SUBDIR = "_profiles"
#: the folder itself, for an editable install or a run from the checkout
_CHECKOUT_PROFILES_DIR = Path(__file__).resolve().parents[2] / "hardware_profiles"


def _packaged_dir() -> Path | None:
    """``sim/_profiles`` of an installed wheel, or None (an editable install: a checkout)."""
    packaged = importlib.resources.files("sim") / PACKAGED_SUBDIR
    # pip installs wheels unzipped, so the resource is a real folder (a pathlib.Path)
    if isinstance(packaged, Path) and packaged.is_dir():
        return packaged
    return None


def builtin_profiles_dir() -> Path:
    """The shipped profiles: package data of an installed wheel, else the checkout's folder.

    An editable install maps ``sim`` onto the checkout, where ``sim/_profiles`` does not
    exist, so the checkout's ``hardware_profiles/`` is the answer there.
    """
    packaged = _packaged_dir()
    if packaged is not None:
        return packaged
    if _CHECKOUT_PROFILES_DIR.is_dir():
        return _CHECKOUT_PROFILES_DIR
    # say so, rather than report every name as unknown with an empty list of choices
    raise KvsimError(
        f"kvsim's shipped profiles are missing (looked in "
        f"{importlib.resources.files('sim') / PACKAGED_SUBDIR} and "
        f"{_CHECKOUT_PROFILES_DIR}); reinstall kvsim"
    )


def search_dirs(extra: list[str | Path] | None = None) -> list[Path]:
    """User folders first (explicit, then the env var), the shipped folder last."""
    dirs = [Path(d) for d in (extra or [])]
    env = os.environ.get(ENV_VAR, "")
    dirs += [Path(p) for p in env.split(os.pathsep) if p]
    dirs.append(builtin_profiles_dir())
    for d in dirs[:-1]:
        if not d.is_dir():  # a file there is not "missing": it is not a folder
            why = "is not a folder" if d.exists() else "does not exist"
            raise KvsimError(f"profiles folder {str(d)!r} {why}")
    return dirs


def _check_kind(kind: str) -> str:
    if kind not in KIND_DIRS:
        raise UnknownNameError("profile kind", kind, list(KIND_DIRS))
    return kind


def available(kind: str, extra_dirs: list[str | Path] | None = None) -> dict[str, Path]:
    """name -> file for every profile of a kind (earlier folders shadow later ones)."""
    _check_kind(kind)
    found: dict[str, Path] = {}
    for d in search_dirs(extra_dirs):
        sub = d / KIND_DIRS[kind]
        if not sub.is_dir():
            continue
        for f in sorted(sub.glob("*.yaml")):
            found.setdefault(f.stem, f)
    return found


def is_shipped(path: Path) -> bool:
    """Whether ``path`` is one of the files an installed kvsim ships (under its package's
    ``sim/_profiles``), which ``sim.yamlio`` may read with libyaml (``load_yaml(...,
    shipped=True)``). A checkout's ``hardware_profiles/`` is a working tree its user may
    edit (``kernels_validation/calibrate.py`` writes there): see ``committed_sha256``."""
    packaged = _packaged_dir()
    if packaged is None:
        return False
    try:
        return path.resolve().is_relative_to(packaged.resolve())
    except OSError:
        return False


#: the checkout's record of its shipped files as committed: ``sha256sum`` lines
#: (``<hex digest>  <kind folder>/<file>.yaml``), made in ``hardware_profiles/`` by
#: ``find . -name '*.yaml' -printf '%P\n' | sort | xargs sha256sum > SHA256SUMS``
#: (tests/test_yamlio_parsers.py checks it is current, and that every file it lists
#: parses alike both ways)
MANIFEST = "SHA256SUMS"


def committed_sha256(path: Path) -> str | None:
    """For a file of a checkout's ``hardware_profiles/`` (no packaged profiles), the hex
    SHA-256 its text had when committed (``MANIFEST``): ``sim.yamlio.load_yaml`` reads it
    with libyaml only while its text has that digest, which CI parsed both ways alike (an
    edited file is the user's and goes to the pure loader, which refuses what libyaml lets
    through: ``a<TAB>``, ``|#``). None for any other file, or without a manifest."""
    if _packaged_dir() is not None:
        return None
    try:
        name = path.resolve().relative_to(_CHECKOUT_PROFILES_DIR.resolve()).as_posix()
    except (OSError, ValueError):
        return None
    return _manifest().get(name)


@functools.cache
def _manifest() -> dict[str, str]:
    """The checkout's ``MANIFEST``: file (relative, POSIX) -> hex SHA-256; empty when it
    is missing or unreadable (every file then goes to the pure loader)."""
    return read_sha256_manifest(_CHECKOUT_PROFILES_DIR / MANIFEST)


def load_shipped_yaml(path: Path) -> tuple[Any, LineMap]:
    """``load_yaml`` of a profile or calibration file, with libyaml where the file is
    kvsim's own (``is_shipped``, or ``committed_sha256`` in a checkout)."""
    return load_yaml(path, shipped=is_shipped(path), shipped_sha256=committed_sha256(path))


class ProfileOverrideError(ConfigError):
    """A profile that its ``overrides`` made invalid (the file alone is valid): the error
    is the override's, never a line of a file the user did not write. ``key`` is the
    override key (as given, dotted) whose value was refused, or None when the profile as
    a whole is refused (a check across fields, ``num_q_heads`` against ``num_kv_heads``);
    ``field`` the profile field refused (None for the whole profile). Its own location is
    ``override KEY``; a caller that knows where the override came from (a scenario's
    ``model.overrides``, a command's ``--set model.KEY``) says so instead
    (``sim.scenario.resolve``, ``sim.cli._common.load_with_sets``)."""

    def __init__(self, message: str, *, key: str | None, field: str | None) -> None:
        self.key = key
        super().__init__(message, location=f"override {key}" if key else "overrides", field=field)


def load_file(path: Path, kind: str, overrides: dict[str, Any] | None = None):
    """Validate one profile file; ``overrides`` replace top-level fields (dotted keys ok).
    A problem of the file is ``file:line: field: message``; one the overrides made is a
    ``ProfileOverrideError`` naming the override."""
    data, lines = load_shipped_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError("a profile must be a mapping of fields", location=f"{path}:1")
    data.setdefault("name", path.stem)
    if data["name"] != path.stem:
        raise ConfigError(
            f"name {data['name']!r} must match the file name {path.stem!r}",
            location=f"{path}:{lines.get(('name',), 1)}",
            field="name",
        )
    original = copy.deepcopy(data) if overrides else None
    for key, value in (overrides or {}).items():
        _set_dotted(data, key, value)
    model = PROFILE_CLASSES[kind]
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        if original is not None and overrides:
            _refuse_override(exc, model, original, data, overrides)
        raise ConfigError(format_validation_error(exc, str(path), lines).splitlines()[0]) from None


def _refuse_override(
    exc: ValidationError, model: Any, original: dict, data: dict, overrides: dict[str, Any]
) -> None:
    """Raise the first problem as a ``ProfileOverrideError`` when an override made it: the
    refused field is one an override set (or lies under one), or the file alone is valid;
    return when the problem is the file's own."""
    err = exc.errors()[0]
    loc = clean_loc(err["loc"], data)
    field = ".".join(str(p) for p in loc) or None
    message = validation_message(err).removeprefix("Value error, ")
    for key in overrides:
        parts = key.split(".")
        if [str(p) for p in loc[: len(parts)]] == parts:
            raise ProfileOverrideError(message, key=key, field=field) from None
    try:
        model.model_validate(original)
    except ValidationError:
        return  # the file's own problem: reported at its line
    only = next(iter(overrides)) if len(overrides) == 1 else None
    raise ProfileOverrideError(message, key=only, field=field) from None


def _set_dotted(data: dict, key: str, value: Any) -> None:
    parts = key.split(".")
    for p in parts[:-1]:
        data = data.setdefault(p, {})
    data[parts[-1]] = value


def load_profile(
    kind: str,
    name: str,
    extra_dirs: list[str | Path] | None = None,
    overrides: dict[str, Any] | None = None,
):
    """Load the profile ``name`` of ``kind`` ('accelerator', 'model' or 'node')."""
    found = available(kind, extra_dirs)
    if name not in found:
        raise UnknownNameError(kind, name, list(found))
    return load_file(found[name], kind, overrides)


def load_model(name: str, extra_dirs=None, overrides=None):
    """A ``ModelProfile`` by name."""
    return load_profile("model", name, extra_dirs, overrides)


def load_accelerator(name: str, extra_dirs=None, overrides=None):
    """An ``AcceleratorProfile`` by name."""
    return load_profile("accelerator", name, extra_dirs, overrides)


def load_node(name: str, extra_dirs=None, overrides=None):
    """A ``NodeProfile`` by name."""
    return load_profile("node", name, extra_dirs, overrides)
