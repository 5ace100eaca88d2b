"""Loading a scenario: safe YAML, dotted overrides, validation with ``file:line`` errors.

Responsibility: turn a YAML file (or a dict) plus overrides such as
``allocator.kind=static`` or ``seed=3`` into a validated scenario, or into one
``ConfigError`` line ``file:line: field: message`` that names the valid choices (kinds,
fields). Changing a ``kind`` through an override keeps only the options the new kind
accepts, so ``--set allocator.kind=static`` works on a paged scenario.

Invariant: YAML is parsed only with the safe loader (override values too); a document
is accepted, with the same values, exactly when the full scenario model accepts it (the
model narrowed to its workload kind validates first; what it refuses, the full model
validates again, and its errors are the ones reported); the error
location is the line the user wrote (or the ``--set`` that introduced the value); the
first problem is reported with a count of the others, and the error's ``problems`` lists
every one (``kvsim validate`` prints them all).
"""

from __future__ import annotations

import copy
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from sim.errors import ConfigError
from sim.scenario.schema import scenario_model, scenario_model_for
from sim.yamlio import LineMap, clean_loc, line_for, load_value, load_yaml, validation_message


@dataclass
class LoadedScenario:
    """A validated scenario and where it came from."""

    scenario: Any  # an instance of scenario_model()
    source: str  # file path, or '<scenario>'
    base_dir: Path  # relative paths (traces) resolve here
    lines: LineMap = field(default_factory=dict)
    overrides: dict[str, Any] = field(default_factory=dict)
    #: how an override is named in errors when not ``--set KEY`` (``--vary KEY=VALUE``)
    labels: dict[str, str] = field(default_factory=dict)
    #: a data-parallel rank's scenario made by ``sim.run.cluster.node_scenarios`` (the
    #: only place ``hardware.expert_shards`` may be above 1)
    data_parallel_rank: bool = False

    def where(self, *loc) -> str:
        """``file:line`` of a field (its nearest written ancestor), or the ``--set`` behind
        it: the override of that field, of a section holding it or of a field under it, or,
        where the file writes no part of its path, the override that created the section
        (the one sharing most of its path)."""
        dotted = ".".join(str(p) for p in loc)
        for key in self.overrides:
            if dotted == key or dotted.startswith(key + ".") or key.startswith(dotted + "."):
                return self.label(key)
        line = line_for(self.lines, tuple(loc))
        if line:
            return f"{self.source}:{line}"
        parts = [str(p) for p in loc]
        best, shared = None, 0
        for key in self.overrides:
            n = _shared_prefix(parts, key.split("."))
            if n > shared:
                best, shared = key, n
        return self.label(best) if best is not None else self.source

    def label(self, key: str) -> str:
        """How the override of ``key`` is named in an error."""
        return self.labels.get(key) or f"--set {key}"


def _shared_prefix(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):  # the shorter path bounds it
        if x != y:
            break
        n += 1
    return n


def parse_set(items: list[str] | None) -> dict[str, Any]:
    """``['a.b=3', 'seed=1']`` -> ``{'a.b': 3, 'seed': 1}`` (values parsed as YAML)."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not p for p in key.split(".")):
            raise ConfigError(f"expected KEY=VALUE with a dotted KEY, got {item!r}", field="--set")
        out[key] = load_value(raw, f"--set {key}") if raw.strip() else ""
    return out


def load_scenario(
    source: str | Path | dict,
    overrides: dict[str, Any] | None = None,
    *,
    labels: Mapping[str, str] | None = None,
) -> LoadedScenario:
    """Read, override and validate a scenario (a YAML path, or a dict already parsed).
    ``labels`` names overrides in errors where they are not ``--set KEY`` (``kvsim compare
    --vary``: ``--vary KEY=VALUE``)."""
    if isinstance(source, dict):
        data, lines, name, base = copy.deepcopy(source), {}, "<scenario>", Path.cwd()
    else:
        path = Path(source)
        data, lines = load_yaml(path)
        name, base = str(path), path.resolve().parent
    if not isinstance(data, dict):
        raise ConfigError("a scenario must be a mapping of sections", location=f"{name}:1")
    if "sweep" in data:  # no scenario has one: say what the file is, not its missing model
        raise _sweep_file(data, lines, name)
    overrides, labels = dict(overrides or {}), dict(labels or {})
    for key, value in overrides.items():
        _apply_override(data, key, value, labels.get(key) or "--set")
    loaded = LoadedScenario(None, name, base, lines, overrides, labels)
    try:
        loaded.scenario = _validated(data)
    except ValidationError as exc:
        raise _one_line(exc, data, loaded) from None
    return loaded


def _sweep_file(data: dict, lines: LineMap, name: str) -> ConfigError:
    """The one-line error for a sweep file given where a scenario goes (``kvsim run``,
    ``compare``, ``capacity``, ``workload sample``): which command runs it, and its base
    scenario, the file those commands take."""
    spec = data["sweep"]
    base = spec.get("base") if isinstance(spec, dict) else None
    if isinstance(base, str) and name != "<scenario>":
        base = str(Path(name).parent / base)  # relative to the sweep file, as sweep reads it
    of = f"; its base scenario, which this command takes, is {base}" if isinstance(base, str) else ""
    line = line_for(lines, ("sweep",)) or 1
    return ConfigError(f"a sweep file, not a scenario: kvsim sweep {name} --out DIR runs it"
                       f"{of}", location=f"{name}:{line}", field="sweep")  # fmt: skip


def _validated(data: dict) -> BaseModel:
    """``data`` validated by the model narrowed to its workload kind; a document that
    model refuses is validated by the full model, whose errors are the ones raised (their
    wording lists every valid kind)."""
    model, narrowed = scenario_model_for(data)
    if not narrowed:
        return model.model_validate(data)
    try:
        return model.model_validate(data)
    except ValidationError:
        return scenario_model().model_validate(data)


# ------------------------------------------------------------------------- overrides
def _apply_override(data: dict, key: str, value: Any, flag: str) -> None:
    parts: list = [int(p) if p.isdigit() else p for p in key.split(".")]
    node: Any = data
    for i, part in enumerate(parts[:-1]):
        if isinstance(node, list):
            if not isinstance(part, int) or not 0 <= part < len(node):
                raise ConfigError(
                    f"cannot set {key}: no item {part} in {'.'.join(map(str, parts[:i]))}",
                    field=flag,
                )
            nxt = node[part]
        else:
            nxt = node.get(part)
            if nxt is None:
                nxt = node[part] = {}
            elif isinstance(nxt, str) and part == "model" and i == 0:
                nxt = node[part] = {"profile": nxt}  # the shorthand `model: NAME`
        if not isinstance(nxt, dict | list):
            raise ConfigError(
                f"cannot set {key}: {'.'.join(map(str, parts[: i + 1]))} is not a section",
                field=flag,
            )
        node = nxt
    last = parts[-1]
    if isinstance(node, list):
        if not isinstance(last, int) or not 0 <= last < len(node):
            raise ConfigError(f"cannot set {key}: no such item", field=flag)
        node[last] = value
        return
    if last == "kind" and isinstance(node, dict) and node.get("kind") != value:
        cls = model_at(tuple(parts[:-1]), data, kind=value)
        if cls is not None:
            for k in [k for k in node if k not in cls.model_fields]:
                del node[k]
    node[last] = value


# ------------------------------------------------------------------ model lookup
def _members(annotation: Any) -> tuple[list[type[BaseModel]], bool]:
    """(BaseModel classes an annotation may hold, whether it is a list of them)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _members(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        found = [m for a in get_args(annotation) for m in _members(a)[0]]
        return found, False
    if origin is list:
        return _members(get_args(annotation)[0])[0], True
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation], False
    return [], False


def _pick(members: list[type[BaseModel]], value: Any, kind: Any = None):
    if len(members) == 1:
        return members[0]
    want = kind if kind is not None else (value.get("kind") if isinstance(value, dict) else None)
    for m in members:
        f = m.model_fields.get("kind")
        if f is not None and f.default == want:
            return m
    return None


def model_at(path: tuple, data: Any, kind: Any = None) -> type[BaseModel] | None:
    """The model class that validates ``path`` in ``data`` (``kind`` forces the last union)."""
    cls: type[BaseModel] | None = scenario_model()
    node = data
    i = 0
    while i < len(path):
        key = path[i]
        if cls is None or key not in cls.model_fields:
            return None
        members, is_list = _members(cls.model_fields[key].annotation)
        node = node.get(key) if isinstance(node, dict) else None
        if is_list and i + 1 < len(path) and isinstance(path[i + 1], int):
            i += 1
            node = node[path[i]] if isinstance(node, list) and path[i] < len(node) else None
        last = i == len(path) - 1
        cls = _pick(members, node, kind if last else None)
        i += 1
    return cls


# --------------------------------------------------------------------------- errors
def _one_line(exc: ValidationError, data: dict, loaded: LoadedScenario) -> ConfigError:
    """The first problem, with a count of the others; ``.problems`` lists them all."""
    problems = validation_problems(exc, data, loaded)
    first = problems[0]
    n = len(problems) - 1
    more = f" (and {n} more problem{'s' if n > 1 else ''})" if n else ""
    return ConfigError(
        first.message + more, location=first.location, field=first.field, problems=problems
    )


def validation_problems(
    exc: ValidationError, data: dict, loaded: LoadedScenario
) -> list[ConfigError]:
    """Every problem of a failed validation, one ``file:line: field: message`` each, in
    file order (the same field and message once); those an override locates come first,
    the field an override sets ahead of the rest (its value is what the user just typed)."""
    out: list[ConfigError] = []
    lines: list[tuple[int, int]] = []
    seen: set[tuple[str, str]] = set()
    for err in exc.errors():
        loc = clean_loc(err["loc"], data)
        msg = validation_message(err).removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            cls = model_at(loc[:-1], data)
            valid = ", ".join(sorted(cls.model_fields)) if cls is not None else "?"
            msg = f"unknown field; valid: {valid}"
        elif err["type"] == "missing":
            msg = "required field is missing"
        elif err["type"] in ("union_tag_invalid", "union_tag_not_found"):
            loc = (*loc, "kind")
        field_name = ".".join(str(p) for p in loc) or "(top level)"
        if (field_name, msg) in seen:
            continue
        seen.add((field_name, msg))
        out.append(ConfigError(msg, location=loaded.where(*loc), field=field_name))
        lines.append((line_for(loaded.lines, loc) or 0, 0 if field_name in loaded.overrides else 1))
    order = sorted(range(len(out)), key=lines.__getitem__)  # as they appear in the file
    return [out[i] for i in order]
