"""Safe YAML loading that remembers where each key came from, in bounded time and memory.

Invariant: user YAML is only ever parsed with PyYAML's safe loader (no tags that build
objects, no eval), once: the composed node tree is walked for line numbers and then
constructed. Every mapping key and sequence item gets the 1-based line it was written
on, so validation errors can name ``file:line``. A document is refused with a one-line
``ConfigError`` (never a traceback, never unbounded work) when it is not UTF-8, is larger
than ``MAX_FILE_BYTES``, nests deeper than ``MAX_DEPTH``, would expand (aliases
included) to more than ``MAX_NODES`` nodes, has an alias that contains itself, or
repeats a key in one mapping (the message names both lines).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sim.errors import ConfigError

LineMap = dict[tuple, int]

#: the largest YAML file read (scenarios, profiles, suites and traces are far smaller)
MAX_FILE_BYTES = 16 * 1024 * 1024
#: the most nodes (scalars, lists, mappings) a document may hold with every alias expanded
MAX_NODES = 200_000
#: the deepest nesting of lists and mappings
MAX_DEPTH = 64


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader whose composer refuses alias bombs and deep nesting.

    Each composed node's expanded size (1 + its children's, an alias counting as the
    whole node it names) is known when the node ends, so a bomb is refused after work
    linear in the text, before anything walks the expanded tree.
    """

    def __init__(self, text: str, source: str) -> None:
        super().__init__(text)
        self.source = source
        self._depth = 0
        self._sizes: dict[int, int] = {}  # id(node) -> expanded size (nodes stay alive)
        self._total = 0  # nodes so far, every alias counted as the node it names

    def _refuse(self, mark: Any, message: str) -> ConfigError:
        return ConfigError(message, location=f"{self.source}:{mark.line + 1}")

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            target = self.anchors.get(event.anchor)
            if target is not None:
                if id(target) not in self._sizes:
                    raise self._refuse(
                        event.start_mark, f"alias *{event.anchor} is inside the node it names"
                    )
                self._count(self._sizes[id(target)], event.start_mark)
            return super().compose_node(parent, index)  # the shared node: sized already
        start = self.peek_event().start_mark
        if self._depth >= MAX_DEPTH:
            raise self._refuse(start, f"YAML nested deeper than {MAX_DEPTH} levels")
        self._count(1, start)
        self._depth += 1
        node = super().compose_node(parent, index)
        self._depth -= 1
        self._sizes[id(node)] = 1 + sum(self._sizes[id(child)] for child in _children(node))
        return node

    def _count(self, nodes: int, mark: Any) -> None:
        # the running total is the root's expanded size so far: refused at the first
        # node past the bound, before the rest of the text is even parsed
        self._total += nodes
        if self._total > MAX_NODES:
            raise self._refuse(
                mark,
                f"YAML document expands to more than {MAX_NODES:,} nodes (aliases "
                "expanded); refused as an alias bomb or an oversized file",
            )


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _walk(root: yaml.Node, source: str) -> LineMap:
    """Lines of every key and item, in document order, each node visited once (an alias
    is not walked again, so its fields resolve to the line of the key holding the alias);
    duplicate keys are refused."""
    lines: LineMap = {}
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, tuple]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[tuple, int] = {}
            for key_node, _value in node.value:
                key = key_node.value
                line = key_node.start_mark.line + 1
                if not isinstance(key_node, yaml.ScalarNode):
                    raise ConfigError(
                        "a key must be a plain value, not a list or a mapping",
                        location=f"{source}:{line}",
                    )
                if key != "<<":
                    tagged = (key_node.tag, key)
                    if tagged in first:
                        raise ConfigError(
                            f"duplicate key {key!r} (first on line {first[tagged]}, "
                            f"again on line {line})",
                            location=f"{source}:{line}",
                            field=".".join(str(p) for p in (*path, key)),
                        )
                    first[tagged] = line
                lines[path + (key,)] = line
            stack.extend((v, path + (k.value,)) for k, v in reversed(node.value))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                lines[path + (i,)] = item.start_mark.line + 1
            stack.extend((v, path + (i,)) for i, v in reversed(list(enumerate(node.value))))
    return lines


def load_yaml(path: str | Path) -> tuple[Any, LineMap]:
    """Parse a YAML file safely; return (data, {key path: line})."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ConfigError(
                f"file is {size:,} bytes; the limit is {MAX_FILE_BYTES:,}", location=str(path)
            )
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read file: {exc.strerror}", location=str(path)) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})",
            location=f"{path}:{line}",
        ) from None
    return loads_yaml(text, str(path))


def loads_yaml(text: str, source: str = "<string>") -> tuple[Any, LineMap]:
    """Parse YAML text safely; syntax errors and refused documents become one-line
    ConfigErrors."""
    loader = None
    try:
        loader = _BoundedLoader(text, source)  # its reader refuses control characters
        node = loader.get_single_node()
        lines = _walk(node, source) if node is not None else {}
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        location = _where(exc, text, source)
        raise ConfigError(f"invalid YAML: {_problem(exc)}", location=location) from None
    except (ValueError, OverflowError, TypeError) as exc:  # e.g. 2024-13-01, a 5000-digit int
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"invalid YAML value: {first}", location=source) from None
    finally:
        if loader is not None:
            loader.dispose()
    return data, lines


def load_value(raw: str, flag: str) -> Any:
    """A command-line value (``--set KEY=VALUE``) parsed as YAML by the same bounded loader;
    ``flag`` (``--set KEY``) names it in the one-line error."""
    try:
        return loads_yaml(raw, flag)[0]
    except ConfigError as exc:
        shown = raw if len(raw) <= 60 else raw[:57] + "..."
        why = exc.message.removeprefix("invalid YAML: ")
        raise ConfigError(f"value {shown!r} is not valid YAML: {why}", field=flag) from None


def _problem(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None) or getattr(exc, "reason", None)
    context = getattr(exc, "context", None)
    if problem and context:
        return f"{context}, {problem}"
    return problem or (str(exc).splitlines() or [type(exc).__name__])[0]


def _where(exc: yaml.YAMLError, text: str, source: str) -> str:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if mark is not None:
        return f"{source}:{mark.line + 1}"
    position = getattr(exc, "position", None)  # a ReaderError (a control character)
    if isinstance(position, int):
        return f"{source}:{text[:position].count(chr(10)) + 1}"
    return source


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
