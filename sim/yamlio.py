"""Safe YAML loading that remembers where each key came from.

Invariant: user YAML is only ever parsed with PyYAML's safe loader (no tags that build
objects, no eval); every mapping key and sequence item gets the 1-based line it was
written on, so validation errors can name ``file:line``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sim.errors import ConfigError

LineMap = dict[tuple, int]


def _walk(node: yaml.Node, path: tuple, lines: LineMap) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            lines[path + (key,)] = key_node.start_mark.line + 1
            _walk(value_node, path + (key,), lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines[path + (i,)] = item.start_mark.line + 1
            _walk(item, path + (i,), lines)


def load_yaml(path: str | Path) -> tuple[Any, LineMap]:
    """Parse a YAML file safely; return (data, {key path: line})."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read file: {exc.strerror}", location=str(path)) from None
    return loads_yaml(text, str(path))


def loads_yaml(text: str, source: str = "<string>") -> tuple[Any, LineMap]:
    """Parse YAML text safely; syntax errors become one-line ConfigErrors."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"invalid YAML: {problem}", location=where) from None
    lines: LineMap = {}
    if node is not None:
        _walk(node, (), lines)
    return data, lines


def line_for(lines: LineMap, loc: tuple) -> int | None:
    """The line of the longest prefix of ``loc`` that the file defines."""
    loc = tuple(loc)
    while loc:
        if loc in lines:
            return lines[loc]
        loc = loc[:-1]
    return None


def format_validation_error(
    exc: Any, source: str, lines: LineMap, prefix: tuple = (), data: Any = None
) -> str:
    """Turn a pydantic ValidationError into ``file:line: field: message`` lines.

    Pydantic puts union tags into error locations (``allocator.paged.block_size`` for the
    ``block_size`` of an allocator whose ``kind`` is ``paged``); they are dropped so the
    field and its line are the ones the user wrote. ``data`` (the validated input) makes
    that exact; without it, a part is dropped when the file has the next part directly
    under the current path but not the part itself.
    """
    out = []
    for err in exc.errors():
        loc = tuple(prefix) + clean_loc(err["loc"], data, lines, tuple(prefix))
        line = line_for(lines, loc)
        where = f"{source}:{line}" if line else source
        field = ".".join(str(p) for p in loc) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        out.append(f"{where}: {field}: {msg}")
    return "\n".join(out)


def clean_loc(
    loc: tuple, data: Any = None, lines: LineMap | None = None, prefix: tuple = ()
) -> tuple:
    """An error location without the tags pydantic inserts for unions."""
    parts = [p for p in loc if not _is_tag(p)]
    if data is not None:
        return _clean_by_data(parts, data)
    if not lines:
        return tuple(parts)
    out: list = []
    for i, part in enumerate(parts):
        here = prefix + tuple(out)
        if (
            i < len(parts) - 1
            and isinstance(part, str)
            and here + (part,) not in lines
            and here + (parts[i + 1],) in lines
        ):
            continue
        out.append(part)
    return tuple(out)


def _clean_by_data(parts: list, data: Any) -> tuple:
    out: list = []
    node = data
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, dict):
            if part in node:
                out.append(part)
                node = node[part]
                continue
            if not last and isinstance(part, str):
                continue  # a union tag: the discriminator value or a member's name
            out.append(part)  # a missing field
            node = None
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            out.append(part)
            node = node[part]
        elif node is not None and isinstance(part, str):
            continue  # a member name of a union of scalar types
        else:
            out.append(part)
            node = None
    return tuple(out)


def _is_tag(part: Any) -> bool:
    # pydantic inserts discriminator tags and type names such as 'function-after[...]'
    return isinstance(part, str) and ("[" in part or part.startswith("function-"))
