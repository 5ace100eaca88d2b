"""Parametric distributions for workload generators, as validated config objects.

Responsibility: the scenario's ``{kind: lognormal, median: 300, sigma: 1.0}`` blocks and
their vectorised sampling with a numpy ``Generator``. A bare number in YAML means a
constant. Every distribution may be clipped with ``min``/``max``; token counts are
rounded to whole numbers, are at least 1 and at most ``MAX_TOKENS``.

Validation: every parameter is a finite number (no ``.nan``/``.inf``); a field's range
(``within``: tokens, seconds, counts) applies to every value the user wrote (constants,
bounds, medians, means, listed values, ``min``/``max``), so a negative token count or
pause is an error, never silently clipped.

Invariant: sampling is a pure function of the config and the generator's state, and
draws exactly ``n`` variates from the generator for ``n`` samples (so adding a field to
one stream never shifts another stream).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Literal, Union

from pydantic import BeforeValidator, ConfigDict, Field, model_validator

from sim.config_model import ConfigModel
from sim.lazy_numpy import numpy_on_first_use

if TYPE_CHECKING:
    import numpy as np
else:
    np = numpy_on_first_use(globals())

#: the largest token count a distribution may state or a sample may take
MAX_TOKENS = 10_000_000
#: the longest time in seconds a distribution may state (about 31.7 years)
MAX_TIME_S = 1e9
#: the most knots of a ``quantiles`` distribution
MAX_KNOTS = 10_000
#: the largest lognormal sigma (already a spread of e^(+-10) around the median at 1 sigma)
MAX_SIGMA = 10.0


class _Dist(ConfigModel):
    # defer_build: built as a part of the model that holds it (sim.workload.config)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)

    min: float | None = None  # clip below
    max: float | None = None  # clip above

    @model_validator(mode="after")
    def _range(self):
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) must be <= max ({self.max})")
        return self

    def _draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        raise NotImplementedError

    def _written(self) -> list[tuple[str, float]]:
        """The values the user wrote in the field's unit (not shapes such as sigma)."""
        raise NotImplementedError

    def written(self) -> list[tuple[str, float]]:
        """(parameter, value) for every value in the field's unit, ``min``/``max`` too."""
        clip = [(k, v) for k, v in (("min", self.min), ("max", self.max)) if v is not None]
        return self._written() + clip

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` variates as float64, clipped to [min, max]."""
        x = np.asarray(self._draw(rng, n), dtype=np.float64)
        if self.min is not None or self.max is not None:
            x = np.clip(x, self.min, self.max)
        return x

    def sample_tokens(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` whole token counts in [1, MAX_TOKENS] (a heavy tail cannot overflow)."""
        return self._whole(self.sample(rng, n))

    def tokens_at(self, u: np.ndarray) -> np.ndarray:
        """Whole token counts at probabilities ``u`` through the quantile function (kinds
        with a ``ppf``: ``empirical`` and ``quantiles``), clipped as ``sample_tokens``."""
        x = np.asarray(self.ppf(u), dtype=np.float64)  # type: ignore[attr-defined]
        if self.min is not None or self.max is not None:
            x = np.clip(x, self.min, self.max)
        return self._whole(x)

    @staticmethod
    def _whole(x: np.ndarray) -> np.ndarray:
        return np.clip(np.rint(x), 1, MAX_TOKENS).astype(np.int64)


class Constant(_Dist):
    kind: Literal["constant"] = "constant"
    value: float

    def _draw(self, rng, n):
        return np.full(n, self.value)

    def _written(self):
        return [("value", self.value)]


class Uniform(_Dist):
    kind: Literal["uniform"] = "uniform"
    low: float
    high: float

    @model_validator(mode="after")
    def _order(self):
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must be <= high ({self.high})")
        return self

    def _draw(self, rng, n):
        return rng.uniform(self.low, self.high, n)

    def _written(self):
        return [("low", self.low), ("high", self.high)]


class Exponential(_Dist):
    kind: Literal["exponential"] = "exponential"
    mean: float = Field(gt=0)

    def _draw(self, rng, n):
        return rng.exponential(self.mean, n)

    def _written(self):
        return [("mean", self.mean)]


class LogNormal(_Dist):
    """``exp(N(ln median, sigma))``: heavy right tail (tool waits, per-turn increments)."""

    kind: Literal["lognormal"] = "lognormal"
    median: float = Field(gt=0)
    sigma: float = Field(ge=0, le=MAX_SIGMA)

    def _draw(self, rng, n):
        return rng.lognormal(np.log(self.median), self.sigma, n)

    def _written(self):
        return [("median", self.median)]


class Normal(_Dist):
    """A normal variate; with ``abs: true`` its absolute value (InferCept's |N(11, 3)|)."""

    kind: Literal["normal"] = "normal"
    mean: float
    std: float = Field(ge=0)
    abs: bool = False

    def _draw(self, rng, n):
        x = rng.normal(self.mean, self.std, n)
        return np.abs(x) if self.abs else x

    def _written(self):
        return [("mean", abs(self.mean) if self.abs else self.mean), ("std", self.std)]


class Gamma(_Dist):
    kind: Literal["gamma"] = "gamma"
    shape: float = Field(gt=0)
    scale: float = Field(gt=0)

    def _draw(self, rng, n):
        return rng.gamma(self.shape, self.scale, n)

    def _written(self):
        return [("scale", self.scale), ("mean (shape x scale)", self.shape * self.scale)]


class Empirical(_Dist):
    """Draw from listed values (with optional weights)."""

    kind: Literal["empirical"] = "empirical"
    values: list[float] = Field(min_length=1)
    weights: list[Annotated[float, Field(ge=0, le=1e12)]] | None = None  # no overflowing sum

    @model_validator(mode="after")
    def _weights(self):
        if self.weights is not None:
            if len(self.weights) != len(self.values):
                raise ValueError("weights must have one entry per value")
            if min(self.weights) < 0 or sum(self.weights) <= 0:
                raise ValueError("weights must be >= 0 and not all zero")
        return self

    def _draw(self, rng, n):
        p = None
        if self.weights is not None:
            w = np.asarray(self.weights, dtype=np.float64)
            p = w / w.sum()
        return rng.choice(np.asarray(self.values, dtype=np.float64), size=n, p=p)

    def ppf(self, u: np.ndarray) -> np.ndarray:
        """The quantile function at probabilities ``u`` (in [0, 1]): the smallest value
        whose cumulative share exceeds ``u`` (the values in ascending order)."""
        order = np.argsort(np.asarray(self.values, dtype=np.float64), kind="stable")
        vals = np.asarray(self.values, dtype=np.float64)[order]
        w = np.ones(vals.size) if self.weights is None else np.asarray(self.weights)[order]
        cum = np.cumsum(w) / w.sum()
        i = np.searchsorted(cum, np.asarray(u, dtype=np.float64), side="right")
        return vals[np.minimum(i, vals.size - 1)]

    def _written(self):
        return [(f"values[{i}]", v) for i, v in enumerate(self.values)]


class Quantiles(_Dist):
    """An empirical quantile function: ``values[i]`` is the ``p[i]`` quantile, linear in
    between (``p`` rises from 0 to 1, ``values`` never fall). Keeps a fitted tail (p99, the
    maximum) that a parametric shape would smooth away; ``kvsim workload fit`` writes it."""

    kind: Literal["quantiles"] = "quantiles"
    p: list[Annotated[float, Field(ge=0, le=1)]] = Field(min_length=2, max_length=MAX_KNOTS)
    values: list[float] = Field(min_length=2, max_length=MAX_KNOTS)

    @model_validator(mode="after")
    def _shape(self):
        if len(self.p) != len(self.values):
            raise ValueError("quantiles need one value per p")
        p, v = np.asarray(self.p), np.asarray(self.values)
        if p[0] != 0 or p[-1] != 1 or (np.diff(p) <= 0).any():
            raise ValueError("p must rise strictly from 0 to 1")
        if (np.diff(v) < 0).any():
            raise ValueError("values must not decrease")
        return self

    def ppf(self, u: np.ndarray) -> np.ndarray:
        """The quantile function at probabilities ``u`` (in [0, 1])."""
        return np.interp(u, self.p, self.values)

    def _draw(self, rng, n):
        return self.ppf(rng.random(n))

    def _written(self):
        return [(f"values[{i}]", v) for i, v in enumerate(self.values)]


#: a float literal with an exponent (``1e9``, ``-2.5E+3``), which YAML 1.1 reads as text when
#: it has no dot or no exponent sign; the only strings a distribution field accepts as a
#: number (``kvsim schema`` states the same pattern), never ``"1_0"`` or ``" 3 "``. Written
#: to mean the same in Python's ``re`` and in JSON Schema's ECMA regexes: ``[0-9]``, not
#: ``\d`` (Unicode digits in Python), and ``$(?!\n)`` (Python's ``$`` also matches before
#: a final newline)
FLOAT_TEXT_PATTERN = r"^[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)$(?!\n)"
_FLOAT_TEXT = re.compile(FLOAT_TEXT_PATTERN)


def _number_is_constant(value):
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        if not _FLOAT_TEXT.fullmatch(value):
            return value  # the union then says what a distribution may be
        value = float(value)
    if isinstance(value, int | float):
        return {"kind": "constant", "value": value}
    return value


#: a distribution field: a mapping with ``kind``, or a bare number (a constant)
Dist = Annotated[
    Annotated[
        Union[  # noqa: UP007
            Constant, Uniform, Exponential, LogNormal, Normal, Gamma, Empirical, Quantiles
        ],
        Field(discriminator="kind"),
    ],
    BeforeValidator(_number_is_constant),
]


def constant(value: float) -> Constant:
    return Constant(value=value)


def within(low: float, high: float, unit: str) -> Callable[[_Dist], _Dist]:
    """An after-validator: every value the distribution states lies in [low, high]."""

    def check(dist: _Dist) -> _Dist:
        for name, value in dist.written():
            if not low <= value <= high:
                raise ValueError(
                    f"{dist.kind} {name} = {value:g} is out of range: {unit} must be in "
                    f"[{_number(low)}, {_number(high)}]"
                )
        return dist

    return check


def _number(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"
