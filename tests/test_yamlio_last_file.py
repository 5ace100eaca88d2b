"""``sim.yamlio.load_yaml`` remembers the last file it parsed under the default bounds:
the same path with the same text again is answered without parsing, as a deep copy
(``kvsim validate`` asks whether a file is a sweep file, then loads it)."""

from __future__ import annotations

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
    monkeypatch.setattr(yamlio, "_LAST", [])
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
    assert yamlio._LAST[0][0][0] == str(other)
    assert yamlio.load_yaml(other, max_bytes=100)[0] == {"a": 1}
    assert parses == [str(path), str(path), str(other), str(other), str(other)]


def test_a_refused_file_is_refused_every_time(tmp_path: Path, parses):
    path = tmp_path / "bad.yaml"
    path.write_text("a: 1\na: 2\n", encoding="utf-8")
    for _ in range(2):
        with pytest.raises(ConfigError, match="duplicate|repeat|twice|already"):
            yamlio.load_yaml(path)
    assert parses == [str(path), str(path)] and yamlio._LAST == []
