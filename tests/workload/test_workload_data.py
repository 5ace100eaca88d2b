"""The data the fitted generators need is inside the project, with its source and licence,
and ships in the wheel; the quantile distribution and the fit files are validated."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import numpy as np
import pytest
from pydantic import TypeAdapter, ValidationError

from sim.errors import ConfigError
from sim.workload.distributions import Dist
from sim.workload.params import FITTED_KINDS, load_params, params_from_text, shipped_path

ROOT = Path(__file__).resolve().parents[2]
FITTED = ROOT / "sim/workload/fitted"
DIST = TypeAdapter(Dist)


def test_every_fitted_file_ships_in_the_wheel():
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["sim.workload"]
    shipped = {p for g in globs for p in (ROOT / "sim/workload").glob(g)}
    assert shipped == {p for p in FITTED.rglob("*") if p.is_file()}
    assert shipped_path("coding_agent") == FITTED / "coding_agent.yaml"


@pytest.mark.parametrize("kind", FITTED_KINDS)
def test_each_fit_names_its_source_and_licence_and_has_its_evidence(kind):
    fit = load_params(kind)
    assert fit.kind == kind and fit.source.calls > 0 and fit.source.trajectories > 0
    assert fit.source.licence and "[" in fit.source.data  # the data set and its file
    head = shipped_path(kind).read_text().splitlines()[:3]
    assert head[0].startswith("# kvsim fitted parameters") and "licence" in head[2]
    assert (FITTED / "LICENSES" / f"{kind}.txt").stat().st_size > 500
    fixture = json.loads((ROOT / f"workloads/fit/fixtures/{kind}.json").read_text())
    assert fixture["kind"] == kind and fixture["bootstrap"]["resamples"] == 200


def test_quantiles_interpolate_and_keep_the_extremes():
    d = DIST.validate_python({"kind": "quantiles", "p": [0, 0.5, 1], "values": [1, 3, 100]})
    assert d.ppf(np.array([0.0, 0.25, 0.5, 0.75, 1.0])).tolist() == [1, 2, 3, 51.5, 100]
    x = d.sample(np.random.default_rng(0), 10_000)
    assert x.min() >= 1 and x.max() <= 100 and abs((x <= 3).mean() - 0.5) < 0.02


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"p": [0, 0.5], "values": [1, 2]}, "p must rise strictly from 0 to 1"),
        ({"p": [0, 0.5, 0.5, 1], "values": [1, 2, 3, 4]}, "p must rise strictly"),
        ({"p": [0, 1], "values": [2, 1]}, "values must not decrease"),
        ({"p": [0, 1], "values": [1, 2, 3]}, "one value per p"),
        ({"p": [0, 1.5], "values": [1, 2]}, "less than or equal to 1"),
    ],
)
def test_bad_quantiles_are_refused(spec, message):
    with pytest.raises(ValidationError, match=message):
        DIST.validate_python({"kind": "quantiles", **spec})


def test_a_bad_fit_file_is_one_line_naming_the_field():
    text = shipped_path("coding_agent").read_text().replace("timeout_s: 60.0", "timeout_s: -1")
    with pytest.raises(ConfigError) as exc:
        params_from_text("coding_agent", text, "mine.yaml")
    msg = str(exc.value)
    assert msg.startswith("mine.yaml:") and "timeout_s" in msg and "\n" not in msg
    with pytest.raises(ConfigError, match="these are 'coding_agent' parameters"):
        params_from_text("human_in_loop", shipped_path("coding_agent").read_text())
    with pytest.raises(ConfigError, match="no such file"):
        load_params("coding_agent", ROOT / "nope.yaml")
