"""Safe YAML loading that remembers where each key came from, in bounded time and memory.

Invariant: user YAML is only ever parsed with PyYAML's safe loader (no tags that build
objects, no eval), once: the composed node tree is walked for line numbers and then
constructed. A file an installed kvsim ships (``load_yaml(..., shipped=True)``: its
profiles and calibrations in the package, ``sim.profiles.registry.is_shipped``; in a
checkout, such a file while its text is the committed one, ``committed_sha256``; the
shipped workload fits while their text is the one ``sim/workload/fitted/SHA256SUMS``
lists, ``sim.workload.params.committed_sha256``, in a wheel too) is scanned by libyaml when PyYAML has it, under the same composer, bounds
and safe constructor; every shipped file is tested to give the same data and lines both
ways, and any problem is parsed again by the pure loader, so messages never depend on it. Every mapping key and sequence item gets the 1-based line it was written
on, so validation errors can name ``file:line``. A document is refused with a one-line
``ConfigError`` (never a traceback, never unbounded work) when it is not UTF-8, is larger
than ``MAX_FILE_BYTES``, nests deeper than ``MAX_DEPTH``, would expand (aliases
included) to more than ``MAX_NODES`` nodes, has an alias that contains itself, repeats a
key in one mapping (the message names both lines), or holds a value that cannot be built
(``2024-13-45``: the message names its line). The two size bounds are the defaults; a
caller that reads large files by design (an allocation trace) passes its own. The last
few files parsed under the default bounds are remembered with their text (at most
``REMEMBERED_FILES``, ``REMEMBERED_TEXT_CHARS`` characters in all): the same path with the
same text again (``kvsim validate`` asks whether a file is a sweep file, then loads it; a
cluster's node groups read the same calibration) is answered from it, as a deep copy, so
the caller may change what it gets; nothing is kept on disk. ``load_json`` reads JSON with ``json`` (no aliases: memory proportional to the file), with
the lines of the top-level members and of the items of top-level lists. JSON is read
with ``unique_keys``: a key twice in one object is refused (``json`` keeps the last),
naming the row, or the file and the line of the second (``duplicate_key_line``).
"""

from __future__ import annotations

import copy
import hashlib
import json
import json.scanner
import re
import stat
import sys
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from sim.errors import ConfigError

if yaml.__with_libyaml__:
    from yaml.cyaml import CParser

LineMap = dict[tuple, int]

#: the largest YAML file read (scenarios, profiles, suites and traces are far smaller)
MAX_FILE_BYTES = 16 * 1024 * 1024
#: the most nodes (scalars, lists, mappings) a document may hold with every alias expanded
MAX_NODES = 200_000
#: the deepest nesting of lists and mappings
MAX_DEPTH = 64


#: a lone surrogate (U+D800-U+DFFF): what YAML's ``\uD800`` escapes make, no character
_SURROGATE = re.compile("[\ud800-\udfff]")


class _Bounds:
    """The composer's bounds and the line-aware constructor, shared by both loaders.

    Each composed node's expanded size (1 + its children's, an alias counting as the
    whole node it names) is known when the node ends, so a bomb is refused after work
    linear in the text, before anything walks the expanded tree.
    """

    def _bound(self, source: str, max_nodes: int) -> None:
        self.source = source
        self.max_nodes = max_nodes
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
        if self._total > self.max_nodes:
            raise self._refuse(
                mark,
                f"YAML document expands to more than {self.max_nodes:,} nodes (aliases "
                "expanded); refused as an alias bomb or an oversized file",
            )

    def construct_scalar(self, node: Any) -> Any:
        # ``"\udcff"``: YAML's escapes make a lone surrogate, which is no character (UTF-8
        # cannot write it: a report, a comparison's folder would fail at their first write)
        value = super().construct_scalar(node)
        if isinstance(value, str) and not value.isascii() and _SURROGATE.search(value):
            raise self._refuse(
                node.start_mark,
                f"invalid YAML value {_shown(node)}: a \\uD800-\\uDFFF escape is half of a "
                "UTF-16 pair, not a character",
            )
        return value

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        # a value the safe constructor cannot build (2024-13-45, a 5000-digit int) raises
        # a bare ValueError without a position: give it the node's line
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError, TypeError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise self._refuse(
                node.start_mark, f"invalid YAML value {_shown(node)}: {first}"
            ) from None


class _BoundedLoader(_Bounds, yaml.SafeLoader):
    """PyYAML's safe loader (pure Python) with the bounds: every user file's parser, and
    the one that words every problem."""

    def __init__(self, text: str, source: str, max_nodes: int = MAX_NODES) -> None:
        yaml.SafeLoader.__init__(self, text)
        self._bound(source, max_nodes)

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:
        # the scanner looks up to 1,024 characters ahead for a simple key at each open flow
        # level, so ``[[[[...`` costs about a second before the composer sees the depth:
        # refuse where the nesting is scanned (flow depth alone past the bound is too deep)
        if self.flow_level >= MAX_DEPTH:
            raise self._refuse(self.get_mark(), f"YAML nested deeper than {MAX_DEPTH} levels")
        super().fetch_flow_collection_start(TokenClass)


if yaml.__with_libyaml__:

    class _LibyamlLoader(_Bounds, Composer, CParser, SafeConstructor, Resolver):
        """libyaml's scanner and parser (C) under the same Python composer, bounds,
        resolver and safe constructor: about 10x faster (a 110 kB calibration file: ~200
        -> ~20 ms). Not PyYAML's twin on malformed text (it accepts ``a\\t`` and ``|#``,
        which PyYAML refuses), so it reads only the files kvsim ships, each checked to
        parse alike (tests/test_yamlio_parsers.py)."""

        def __init__(self, text: str, source: str, max_nodes: int = MAX_NODES) -> None:
            CParser.__init__(self, text)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)
            self._bound(source, max_nodes)

    _SHIPPED_LOADERS: tuple[type[_Bounds], ...] = (_LibyamlLoader,)
else:  # pragma: no cover  (PyYAML built without libyaml: the pure loader reads everything)
    _SHIPPED_LOADERS = ()


def _shown(node: yaml.Node) -> str:
    if isinstance(node, yaml.ScalarNode):
        text = node.value if len(node.value) <= 40 else node.value[:37] + "..."
        return repr(text)
    return f"({node.id})"


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


def read_sha256_manifest(path: Path) -> dict[str, str]:
    """A ``sha256sum`` manifest of shipped files (``<hex digest>  <name>`` lines, text or
    binary mode, ``./`` from ``find``): name -> lower-case hex digest; empty when the file
    is missing or unreadable (every file then goes to the pure loader)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    out: dict[str, str] = {}
    for line in text.splitlines():
        digest, sep, name = line.partition(" ")
        name = name.lstrip(" *").removeprefix("./")
        if sep and len(digest) == 64 and name:
            out[name] = digest.lower()
    return out


def load_yaml(
    path: str | Path, *, max_nodes: int | None = None, max_bytes: int | None = None,
    shipped: bool = False, shipped_sha256: str | None = None,
) -> tuple[Any, LineMap]:
    """Parse a YAML file safely; return (data, {key path: line}). A caller that reads large
    files by design (an allocation trace) passes its own bounds (default ``MAX_NODES``,
    ``MAX_FILE_BYTES``). ``shipped``: a file kvsim ships (its profiles and calibrations),
    parsed with libyaml when PyYAML has it (every shipped file is tested to parse alike);
    ``shipped_sha256``: the same, only while the text read has this hex SHA-256 (a
    checkout's file as committed, ``sim.profiles.registry.committed_sha256``; a shipped
    workload fit as committed, ``sim.workload.params.committed_sha256``); any
    problem is parsed again, and worded, by the pure loader."""
    path = Path(path)
    text = _read_text(path, max_bytes)
    if not shipped and shipped_sha256 is not None:
        shipped = hashlib.sha256(text.encode("utf-8")).hexdigest() == shipped_sha256
    if max_nodes is not None or max_bytes is not None:  # large files: never remembered
        return _load_text(text, str(path), max_nodes, shipped)
    key = (str(path), text, shipped)
    with _REMEMBERED_LOCK:
        hit = _REMEMBERED.get(key)
        if hit is not None:
            _REMEMBERED.move_to_end(key)
    if hit is None:
        hit = _load_text(text, str(path), None, shipped)
        _remember(key, hit)
    data, lines = hit
    return copy.deepcopy(data), dict(lines)  # the remembered data is never handed out


#: the files parsed last under the default bounds, least recently used first: (path,
#: text, shipped) -> (data, lines); at most ``REMEMBERED_FILES`` files and
#: ``REMEMBERED_TEXT_CHARS`` characters of text (a cluster's node groups each read the same
#: calibration and profiles: parsed once, not once per group)
_REMEMBERED: OrderedDict[tuple[str, str, bool], tuple[Any, LineMap]] = OrderedDict()
_REMEMBERED_LOCK = threading.Lock()
REMEMBERED_FILES = 8
REMEMBERED_TEXT_CHARS = 4 * 1024 * 1024


def _remember(key: tuple[str, str, bool], parsed: tuple[Any, LineMap]) -> None:
    if len(key[1]) > REMEMBERED_TEXT_CHARS:
        return
    with _REMEMBERED_LOCK:
        _REMEMBERED[key] = parsed
        _REMEMBERED.move_to_end(key)
        chars = sum(len(k[1]) for k in _REMEMBERED)
        while len(_REMEMBERED) > REMEMBERED_FILES or chars > REMEMBERED_TEXT_CHARS:
            old, _ = _REMEMBERED.popitem(last=False)
            chars -= len(old[1])


def _load_text(text: str, source: str, max_nodes: int | None, shipped: bool) -> tuple[Any, LineMap]:
    """``load_yaml`` of a file's text: libyaml first for a shipped file (when PyYAML has
    it), the pure loader otherwise and for any problem."""
    if shipped and _SHIPPED_LOADERS:
        limit = MAX_NODES if max_nodes is None else max_nodes
        try:
            return _parse(_SHIPPED_LOADERS[0], text, source, limit)
        except (yaml.YAMLError, ConfigError):
            pass
    return loads_yaml(text, source, max_nodes=max_nodes)


def read_bytes_bounded(path: Path, max_bytes: int | None = None) -> bytes:
    """A file's bytes, at most ``max_bytes`` (default ``MAX_FILE_BYTES``), or a one-line
    ``ConfigError``: a device, a socket or a folder is refused before it is opened
    (``/dev/zero`` never ends, and its size says 0); a regular file or a pipe (``<(...)``,
    ``/dev/stdin``) is read, and the read stops one byte past the limit whatever the size
    said."""
    max_bytes = MAX_FILE_BYTES if max_bytes is None else max_bytes
    try:
        st = path.stat()  # through links: a link to /dev/zero is /dev/zero
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
            what = "a folder" if stat.S_ISDIR(st.st_mode) else "a device or socket"
            raise ConfigError(f"not a regular file ({what})", location=str(path))
        if st.st_size > max_bytes:
            raise ConfigError(
                f"file is {st.st_size:,} bytes; the limit is {max_bytes:,}", location=str(path)
            )
        with path.open("rb") as fh:
            raw = fh.read(max_bytes + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read file: {exc.strerror}", location=str(path)) from None
    if len(raw) > max_bytes:
        raise ConfigError(f"file is over the limit of {max_bytes:,} bytes", location=str(path))
    return raw


def json_value(text: str | bytes, location: str, *, lines: bool = False) -> Any:
    """``json.loads`` of untrusted text, every refusal a one-line ``ConfigError`` at
    ``location``: bad syntax, nesting past the interpreter's depth, a number past
    Python's digit limit for integers, a key twice in one object (``unique_keys``: json
    keeps the last silently). ``lines``: the text is a whole file (``location`` its name),
    and the location gets the line of the problem (``summary.json:12``); otherwise it is
    one row, which ``location`` names already (``t.jsonl:3``)."""
    try:
        return json.loads(text, object_pairs_hook=unique_keys)
    except json.JSONDecodeError as exc:
        where = f"{location}:{exc.lineno}" if lines else location
        raise ConfigError(f"not valid JSON ({exc.msg}, column {exc.colno})", location=where) from None
    except DuplicateKeyError as exc:
        line = duplicate_key_line(text) if lines else None
        where = f"{location}:{line}" if line else location
        raise ConfigError(str(exc), location=where) from None
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"not valid JSON ({json_refusal(exc)})", location=location) from None


class DuplicateKeyError(ValueError):
    """A JSON object with a key twice (``unique_keys``); ``key`` is that key."""

    def __init__(self, key: str) -> None:
        self.key = key
        shown = key if len(key) <= 40 else key[:37] + "..."
        super().__init__(f"duplicate key {shown!r} in a JSON object")


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json``'s ``object_pairs_hook`` that refuses a key twice in one object
    (``DuplicateKeyError``) instead of keeping the last: linear in the object's size."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(key)
            seen.add(key)
    return obj


def duplicate_key_line(text: str | bytes, start: int = 0) -> int | None:
    """The 1-based line (in ``text``) of the second occurrence of the first key found
    twice in one object of the JSON value at ``start`` (the object ``unique_keys``
    refused); None when there is none or it cannot be found. Called only after a refusal:
    that value is decoded again by json's pure-Python scanner, which says where the
    refused object starts (linear time, ~3 s a 10 MB value; a value nested past the
    interpreter's depth gives None), and that object's members are walked for the key's
    position."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    decoder = json.JSONDecoder(object_pairs_hook=unique_keys)
    plain = decoder.parse_object

    def parse_object(s_and_end: tuple[str, int], *args: Any) -> Any:
        try:
            return plain(s_and_end, *args)
        except DuplicateKeyError as exc:
            if not hasattr(exc, "start"):  # the innermost object: the one refused
                exc.start = s_and_end[1] - 1  # type: ignore[attr-defined]
            raise

    decoder.parse_object = parse_object  # type: ignore[assignment]
    decoder.scan_once = json.scanner.py_make_scanner(decoder)
    try:
        decoder.scan_once(text, _skip_space(text, start))  # type: ignore[attr-defined]
    except DuplicateKeyError as exc:
        pos = _second_key_at(text, getattr(exc, "start", 0), exc.key)
        return text.count("\n", 0, pos) + 1
    except (ValueError, RecursionError, StopIteration):
        return None
    return None


def _second_key_at(text: str, start: int, key: str) -> int:
    """Where ``key`` starts again among the members of the object at ``start`` (a valid
    object whose values decode alone); ``start`` when it is not found."""
    decoder, seen, pos = json.JSONDecoder(), False, start + 1
    try:
        while True:
            pos = _skip_space(text, pos)
            at = pos
            name, pos = decoder.raw_decode(text, pos)
            if name == key:
                if seen:
                    return at
                seen = True
            pos = _skip_space(text, pos) + 1  # the ':'
            _, pos = decoder.raw_decode(text, _skip_space(text, pos))
            pos = _skip_space(text, pos) + 1  # the ',' (or the closing '}')
    except (ValueError, IndexError):
        return start


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def json_refusal(exc: ValueError | RecursionError) -> str:
    """Why ``json`` refused a text past its syntax, in a few words: nested too deeply, or a
    number past Python's digit limit for integers (its message, without the advice to
    raise the limit)."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return str(exc).splitlines()[0].split(";")[0]


def _read_text(path: Path, max_bytes: int | None) -> str:
    """A UTF-8 file of at most ``max_bytes``, as text (one-line errors otherwise)."""
    raw = read_bytes_bounded(path, max_bytes)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})",
            location=f"{path}:{line}",
        ) from None


def loads_yaml(
    text: str, source: str = "<string>", *, max_nodes: int | None = None
) -> tuple[Any, LineMap]:
    """Parse YAML text safely; syntax errors, values that cannot be built and refused
    documents become one-line ConfigErrors with the line."""
    max_nodes = MAX_NODES if max_nodes is None else max_nodes
    try:
        return _parse(_BoundedLoader, text, source, max_nodes)  # its reader refuses control chars
    except yaml.YAMLError as exc:
        location = _where(exc, text, source)
        raise ConfigError(f"invalid YAML: {_problem(exc)}", location=location) from None


def _parse(loader_class: Any, text: str, source: str, max_nodes: int) -> tuple[Any, LineMap]:
    """(data, lines) of ``text`` read by one loader class; its errors propagate."""
    loader = loader_class(text, source, max_nodes)
    try:
        node = loader.get_single_node()
        lines = _walk(node, source) if node is not None else {}
        data = loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()
    return data, lines


def load_json(path: str | Path, *, max_bytes: int | None = None) -> tuple[Any, LineMap]:
    """Parse a JSON file with ``json`` (no aliases, so memory stays proportional to the
    file); return (data, {key path: line}) with the lines of the top-level keys and items
    and of the items of top-level lists (``[op, ...]`` or ``{"ops": [op, ...]}``). A key
    twice in one object is refused at its second line (``unique_keys``)."""
    path = Path(path)
    text = _read_text(path, max_bytes)
    try:
        return _json_with_lines(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"invalid JSON: {exc.msg}", location=f"{path}:{exc.lineno}") from None
    except DuplicateKeyError as exc:  # json keeps the last silently: refused
        line = getattr(exc, "line", None) or duplicate_key_line(text)
        raise ConfigError(str(exc), location=f"{path}:{line}" if line else str(path)) from None
    except RecursionError:
        raise ConfigError("JSON nested too deeply", location=str(path)) from None
    except ValueError as exc:  # a number past Python's digit limit for integers
        raise ConfigError(f"invalid JSON: {json_refusal(exc)}", location=str(path)) from None


class _JsonLines:
    """Decode a JSON text member by member (``raw_decode``), noting the line of each
    top-level key or item and of each item of a top-level object's list (a running newline
    count: linear time)."""

    def __init__(self, text: str) -> None:
        self.text, self.pos, self.lines = text, 0, {}
        self._line, self._counted = 1, 0
        self._decoder = json.JSONDecoder(object_pairs_hook=unique_keys)

    def line(self) -> int:
        self._line += self.text.count("\n", self._counted, self.pos)
        self._counted = self.pos
        return self._line

    def skip(self) -> str:
        """Skip whitespace; the next character ('' at the end)."""
        text, n = self.text, len(self.text)
        while self.pos < n and text[self.pos] in " \t\r\n":
            self.pos += 1
        return text[self.pos] if self.pos < n else ""

    def fail(self, message: str) -> json.JSONDecodeError:
        return json.JSONDecodeError(message, self.text, self.pos)

    def value(self) -> Any:
        if self.skip() == "":
            raise self.fail("Expecting value")
        try:
            value, self.pos = self._decoder.raw_decode(self.text, self.pos)
        except DuplicateKeyError as exc:  # its line, found in this value alone
            exc.line = duplicate_key_line(self.text, self.pos)  # type: ignore[attr-defined]
            raise
        return value

    def members(self, path: tuple, close: str) -> list[tuple[Any, Any]]:
        """The members of the array (``close`` ']') or object ('}') at ``pos``, as
        (index or key, value); a top-level object's arrays are read member by member too."""
        self.pos += 1  # the opening bracket
        out: list[tuple[Any, Any]] = []
        if self.skip() == close:
            self.pos += 1
            return out
        while True:
            self.skip()
            line = self.line()
            key: Any = len(out)
            if close == "}":
                key = self.value()
                if not isinstance(key, str) or self.skip() != ":":
                    raise self.fail("Expecting a property name and ':'")
                self.pos += 1
            self.lines[(*path, key)] = line
            if not path and close == "}" and self.skip() == "[":
                out.append((key, [v for _, v in self.members((key,), "]")]))
            else:
                out.append((key, self.value()))
            after = self.skip()
            self.pos += 1
            if after == close:
                return out
            if after != ",":
                raise self.fail(f"Expecting ',' or '{close}'")


def _json_with_lines(text: str) -> tuple[Any, LineMap]:
    reader = _JsonLines(text)
    first = reader.skip()
    if first == "[":
        data: Any = [v for _, v in reader.members((), "]")]
    elif first == "{":
        members = reader.members((), "}")  # a key twice inside a member: its line is set
        try:
            data = unique_keys(members)
        except DuplicateKeyError as exc:  # a top-level key twice: the line of the second
            exc.line = reader.lines.get((exc.key,))  # type: ignore[attr-defined]
            raise
    else:
        data = reader.value()
    if reader.skip() != "":
        raise reader.fail("Extra data")
    return data, reader.lines


def load_value(raw: str, flag: str) -> Any:
    """A command-line value (``--set KEY=VALUE``) parsed as YAML by the same bounded loader;
    ``flag`` (``--set KEY``) names it in the one-line error. A value whose bytes are not
    UTF-8 (``$'x\\xff'``: kept by Python as surrogates) is refused as such, its bytes
    shown escaped as the other errors show a file name's (``x\\xff``)."""
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(_not_utf8_value(raw), field=flag) from None
    try:
        return loads_yaml(raw, flag)[0]
    except ConfigError as exc:
        shown = raw if len(raw) <= 60 else raw[:57] + "..."
        why = exc.message.removeprefix("invalid YAML: ")
        raise ConfigError(f"value {shown!r} is not valid YAML: {why}", field=flag) from None


def _not_utf8_value(raw: str) -> str:
    """Why a command-line value Python kept surrogates in cannot be parsed: its bytes are
    not UTF-8, or they are and Python decoded them as ASCII (``LANG=C`` without UTF-8
    mode: the line says how to fix it)."""
    try:
        data = raw.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate no decoding of the command line makes
        return f"value '{raw.encode('utf-8', 'backslashreplace').decode()}' is not UTF-8 text"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        shown = data.decode("utf-8", "backslashreplace")
        return f"value '{shown}' is not UTF-8 text (YAML values are)"
    return (f"value '{text}': Python decodes the command line as "
            f"{sys.getfilesystemencoding()} here (LANG=C without UTF-8 mode); set PYTHONUTF8=1")  # fmt: skip


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
    """The line of the longest prefix of ``loc`` that the file defines (a key the file
    wrote as a number, ``by_tp: {2: ...}``, is found by its text too: the map keeps keys
    as written)."""
    loc = tuple(loc)
    while loc:
        if loc in lines:
            return lines[loc]
        written = tuple(str(p) if isinstance(p, int) and not isinstance(p, bool) else p for p in loc)
        if written in lines:
            return lines[written]
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
        out.append(f"{where}: {field}: {validation_message(err)}")
    return "\n".join(out)


def validation_message(err: Any) -> str:
    """The message of one pydantic error (an item of ``ValidationError.errors()``), as
    ``format_validation_error`` (and the scenario loader, ``sim.scenario.load``) words it:
    ``unknown field`` for a field the model does not have; for a ``kind`` no member of a
    tagged union has (``union_tag_invalid``), or a string ``kind`` a model of one kind
    refuses (a ``literal_error`` at ``kind``), the project's form of an unknown name
    (``sim.errors.UnknownNameError``): ``unknown kind 'pagd'; valid: buddy, paged, ...``
    (sorted) instead of pydantic's "Input tag 'pagd' found using 'kind' does not match any
    of the expected tags: ..."; pydantic's own message otherwise."""
    kind, ctx = err["type"], err.get("ctx") or {}
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "union_tag_invalid" and ctx.get("discriminator") == "'kind'":
        return _unknown_kind(ctx.get("tag"), str(ctx.get("expected_tags", "")))
    loc = err.get("loc") or ()
    if kind == "literal_error" and loc and loc[-1] == "kind" and isinstance(err.get("input"), str):
        return _unknown_kind(err["input"], str(ctx.get("expected", "")))
    if kind == "int_parsing" and isinstance(err.get("input"), str):
        hint = _exponent_text_hint(err["input"])
        if hint:
            return f"{err['msg']}: {hint}"
    return str(err["msg"])


#: a number with an exponent that YAML 1.1 reads as text (``1e9``, ``4.0e3``, ``2e+3``:
#: its float form needs a dot and a signed exponent, ``4.0e+3``)
_EXPONENT_TEXT = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _exponent_text_hint(text: str) -> str | None:
    """Why a whole-number field refused what reads as a number (``4e3``), and what to
    write instead; None for any other text."""
    if not _EXPONENT_TEXT.fullmatch(text.strip()):
        return None
    value = float(text)
    write = f"write {int(value)}" if value.is_integer() and abs(value) < 1e18 else (
        "write a whole number")  # fmt: skip
    return (f"YAML reads {text.strip()!r} as text, not a number (YAML 1.1 needs a dot and a "
            f"signed exponent: {value:.1e}); {write}")  # fmt: skip


def _unknown_kind(tag: Any, expected: str) -> str:
    """``unknown kind 'TAG'; valid: A, B`` from pydantic's quoted list (``"'a', 'b'"``,
    ``"'a' or 'b'"``); the name shown at most 80 characters."""
    valid = sorted(_QUOTED.findall(expected))
    shown = repr(tag) if len(str(tag)) <= 80 else repr(str(tag)[:80]) + "..."
    return f"unknown kind {shown}; valid: {', '.join(valid)}"


#: a quoted name in pydantic's list of expected tags or literals
_QUOTED = re.compile(r"'([^']*)'")


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
