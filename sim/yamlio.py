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


def format_validation_error(exc: Any, source: str, lines: LineMap, prefix: tuple = ()) -> str:
    """Turn a pydantic ValidationError into ``file:line: field: message`` lines."""
    out = []
    for err in exc.errors():
        loc = tuple(prefix) + tuple(p for p in err["loc"] if not _is_tag(p))
        line = line_for(lines, loc)
        where = f"{source}:{line}" if line else source
        field = ".".join(str(p) for p in loc) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        out.append(f"{where}: {field}: {msg}")
    return "\n".join(out)


def _is_tag(part: Any) -> bool:
    # pydantic inserts discriminator tags and type names such as 'function-after[...]'
    return isinstance(part, str) and ("[" in part or part.startswith("function-"))
