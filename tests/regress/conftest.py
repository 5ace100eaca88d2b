"""Fixtures for the regress tests: a ``fixed`` runner whose metrics are its inputs, and a
helper that writes a suite file."""

from __future__ import annotations

import textwrap
from typing import ClassVar

import pytest
from pydantic import BaseModel, ConfigDict

from sim.regress.runners import register_runner


class FixedInputs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    values: dict[str, float | int | None]


class FixedRunner:
    """Reports exactly ``inputs.values``: the tests control every number."""

    name: ClassVar[str] = "fixed"
    inputs_model: ClassVar[type[BaseModel]] = FixedInputs

    def run(self, inputs, ctx):
        return dict(inputs.values)


register_runner(FixedRunner(), replace=True)


@pytest.fixture
def write_suite(tmp_path):
    """Write ``text`` (dedented) as ``tmp_path/suite/suite.yaml``; return the folder."""

    def _write(text: str):
        d = tmp_path / "suite"
        d.mkdir(exist_ok=True)
        (d / "suite.yaml").write_text(textwrap.dedent(text).lstrip("\n"))
        return d

    return _write
