"""Writing a run folder never destroys what is there when a write fails."""

import pytest

from sim.errors import KvsimError
from sim.run.output import _replace


def test_failed_write_keeps_the_previous_file_and_leaves_no_partial(tmp_path):
    target = tmp_path / "summary.json"
    target.write_text("previous run")

    def broken(path):
        path.write_text("half")
        raise OSError(28, "No space left on device")

    with pytest.raises(KvsimError, match="cannot write .*No space left"):
        _replace(target, broken)
    assert target.read_text() == "previous run"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


def test_successful_write_replaces(tmp_path):
    target = tmp_path / "summary.json"
    target.write_text("previous run")
    _replace(target, lambda p: p.write_text("new"))
    assert target.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]
