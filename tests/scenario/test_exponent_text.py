"""h121: a whole-number field written with an exponent (``max_num_batched_tokens: 4e3``,
``--set workload.num_trajectories=1e3``) is text to YAML 1.1 (its float form needs a dot
and a signed exponent, ``4.0e+3``), and the error was pydantic's "unable to parse string
as an integer" about what the user wrote as a number. The line now says why and what to
write (``sim.yamlio.validation_message``); any other text keeps pydantic's message."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.errors import KvsimError
from sim.scenario import load_scenario, parse_set
from sim.yamlio import validation_message

ROOT = Path(__file__).resolve().parents[2]
SWARM = ROOT / "workloads" / "agent_swarm.yaml"
PYDANTIC = "Input should be a valid integer, unable to parse string as an integer"


def _err(text: str) -> dict:
    return {"type": "int_parsing", "loc": ("x",), "msg": PYDANTIC, "input": text}


def test_exponent_text_gets_the_reason_and_the_whole_number():
    assert validation_message(_err("4e3")) == (
        f"{PYDANTIC}: YAML reads '4e3' as text, not a number (YAML 1.1 needs a dot and a "
        "signed exponent: 4.0e+03); write 4000")  # fmt: skip
    assert validation_message(_err("2.5e+3")).endswith("write 2500")
    assert validation_message(_err("1.5e0")).endswith("write a whole number")
    assert validation_message(_err("abc")) == PYDANTIC  # not a number: pydantic's own
    assert validation_message({**_err("4e3"), "type": "float_parsing"}) == PYDANTIC


def test_a_scenario_line_and_a_set_say_it(tmp_path):
    text = SWARM.read_text().replace("max_num_batched_tokens: 2048", "max_num_batched_tokens: 4e3")
    path = tmp_path / "s.yaml"
    path.write_text(text)
    line = text.splitlines().index("  max_num_batched_tokens: 4e3") + 1
    with pytest.raises(KvsimError) as exc:
        load_scenario(path)
    assert str(exc.value) == (f"{path}:{line}: scheduler.max_num_batched_tokens: {PYDANTIC}: "
                              "YAML reads '4e3' as text, not a number (YAML 1.1 needs a dot "
                              "and a signed exponent: 4.0e+03); write 4000")  # fmt: skip
    with pytest.raises(KvsimError, match=r"YAML reads '1e3' as text.*write 1000$"):
        load_scenario(SWARM, parse_set(["workload.num_trajectories=1e3"]))
