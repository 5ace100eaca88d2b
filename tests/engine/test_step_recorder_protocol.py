"""``sim.engine.node.StepRecorder`` is every call the node makes to its recorder, with the
recorder's own signatures (``sim.metrics.Recorder``), so a recorder written to the
Protocol alone works, and mypy checks the one the run hands to the node against it."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from sim.engine.node import StepRecorder
from sim.metrics import Recorder

NODE = Path(inspect.getfile(StepRecorder))


def _protocol_methods() -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(fn)
        for name, fn in vars(StepRecorder).items()
        if callable(fn) and not name.startswith("_")
    }


def _calls_on_the_recorder() -> set[str]:
    """Every ``rec.X(...)`` / ``self.rec.X(...)`` / ``rec.X`` read in node.py."""
    found = set()
    for node in ast.walk(ast.parse(NODE.read_text())):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        if (isinstance(owner, ast.Name) and owner.id == "rec") or (
            isinstance(owner, ast.Attribute) and owner.attr == "rec"
        ):
            found.add(node.attr)
    return found


def test_the_protocol_lists_every_call_the_node_makes():
    declared = set(_protocol_methods()) | set(StepRecorder.__annotations__)
    assert _calls_on_the_recorder() - declared == set()
    assert _calls_on_the_recorder() >= {"step", "emit", "memory", "events", "decisions"}


def test_the_recorder_matches_the_protocol_parameter_for_parameter():
    for name, sig in _protocol_methods().items():
        mine = inspect.signature(getattr(Recorder, name))
        theirs = [(p.name, p.kind, p.default) for p in sig.parameters.values()]
        ours = [(p.name, p.kind, p.default) for p in mine.parameters.values()]
        assert ours == theirs, name
    rec = Recorder(pool_bytes=1e9, phi_ext_request_bytes=0.0)
    assert isinstance(rec.decisions, int)
