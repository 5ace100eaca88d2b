"""``sim.yamlio.load_yaml`` remembers the last files it parsed under the default bounds:
the same path with the same text again is answered without parsing, as a deep copy
(``kvsim validate`` asks whether a file is a sweep file, then loads it; a cluster's node
groups read the same calibration)."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import pytest

import sim.yamlio as yamlio
from sim.errors import ConfigError


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sources the pure loader parsed during the test (the memo starts empty)."""
    seen: list[str] = []
    real = yamlio.loads_yaml

    def counting(text: str, source: str = "<string>", **kw):
        seen.append(source)
        return real(text, source, **kw)

    monkeypatch.setattr(yamlio, "loads_yaml", counting)
    monkeypatch.setattr(yamlio, "_REMEMBERED", OrderedDict())
    return seen


TEXT = "base: &b {x: 1, items: [1, 2]}\nboth: [*b, *b]\nwhen: 2024-01-02\n"


def test_the_same_file_twice_is_parsed_once_and_handed_out_as_copies(tmp_path: Path, parses):
    path = tmp_path / "s.yaml"
    path.write_text(TEXT, encoding="utf-8")
    first, lines = yamlio.load_yaml(path)
    first["base"]["items"].append(3)  # a caller changes what it got
    lines.clear()
    second, lines2 = yamlio.load_yaml(path)
    assert parses == [str(path)]
    assert second["base"] == {"x": 1, "items": [1, 2]}
    assert lines2 == yamlio.loads_yaml(TEXT, str(path))[1] and lines2[("when",)] == 3
    assert second["both"][0] is second["both"][1] is second["base"]  # aliases stay shared
    assert second == yamlio.loads_yaml(TEXT, str(path))[0]


def test_a_changed_file_another_path_or_other_bounds_are_parsed_again(tmp_path: Path, parses):
    path, other = tmp_path / "s.yaml", tmp_path / "t.yaml"
    path.write_text("a: 1\n", encoding="utf-8")
    other.write_text("a: 1\n", encoding="utf-8")
    assert yamlio.load_yaml(path)[0] == {"a": 1}
    path.write_text("a: 2\n", encoding="utf-8")
    assert yamlio.load_yaml(path)[0] == {"a": 2}
    assert yamlio.load_yaml(other)[0] == {"a": 1}
    assert yamlio.load_yaml(other, max_nodes=100)[0] == {"a": 1}  # large-file callers
    assert next(reversed(yamlio._REMEMBERED))[0] == str(other)
    assert yamlio.load_yaml(other, max_bytes=100)[0] == {"a": 1}
    assert parses == [str(path), str(path), str(other), str(other), str(other)]


def test_a_refused_file_is_refused_every_time(tmp_path: Path, parses):
    path = tmp_path / "bad.yaml"
    path.write_text("a: 1\na: 2\n", encoding="utf-8")
    for _ in range(2):
        with pytest.raises(ConfigError, match="duplicate|repeat|twice|already"):
            yamlio.load_yaml(path)
    assert parses == [str(path), str(path)] and not yamlio._REMEMBERED


def test_files_read_in_turn_are_each_parsed_once(tmp_path: Path, parses):
    """A cluster's node groups each read the scenario's calibration and profiles in turn."""
    paths = [tmp_path / f"f{i}.yaml" for i in range(3)]
    for i, p in enumerate(paths):
        p.write_text(f"a: {i}\n", encoding="utf-8")
    for _ in range(3):
        assert [yamlio.load_yaml(p)[0] for p in paths] == [{"a": 0}, {"a": 1}, {"a": 2}]
    assert parses == [str(p) for p in paths]


def test_what_is_remembered_is_bounded(tmp_path: Path, parses, monkeypatch: pytest.MonkeyPatch):
    """At most ``REMEMBERED_FILES`` files and ``REMEMBERED_TEXT_CHARS`` characters: the
    least recently used go first, and a file larger than the whole budget is never kept."""
    monkeypatch.setattr(yamlio, "REMEMBERED_FILES", 2)
    monkeypatch.setattr(yamlio, "REMEMBERED_TEXT_CHARS", 40)
    a, b, c, big = (tmp_path / f"{n}.yaml" for n in "abcz")
    for p in (a, b, c):
        p.write_text(f"name: {p.stem}\n", encoding="utf-8")
    big.write_text("text: " + "x" * 60 + "\n", encoding="utf-8")
    yamlio.load_yaml(a)
    yamlio.load_yaml(b)
    yamlio.load_yaml(a)  # a is now the most recent
    yamlio.load_yaml(c)  # b goes
    assert [k[0] for k in yamlio._REMEMBERED] == [str(a), str(c)]
    yamlio.load_yaml(big)
    assert [k[0] for k in yamlio._REMEMBERED] == [str(a), str(c)]
    long = tmp_path / "long.yaml"
    long.write_text("k: " + "y" * 25 + "\n", encoding="utf-8")  # 29 chars: c (8) stays, a goes
    yamlio.load_yaml(long)
    assert [k[0] for k in yamlio._REMEMBERED] == [str(c), str(long)]
    assert sum(len(k[1]) for k in yamlio._REMEMBERED) <= 40
