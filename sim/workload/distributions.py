"""Parametric distributions for workload generators, as validated config objects.

Responsibility: the scenario's ``{kind: lognormal, median: 300, sigma: 1.0}`` blocks and
their vectorised sampling with a numpy ``Generator``. A bare number in YAML means a
constant. Every distribution may be clipped with ``min``/``max``; token counts are
rounded to whole numbers and are at least 1.

Invariant: sampling is a pure function of the config and the generator's state, and
draws exactly ``n`` variates from the generator for ``n`` samples (so adding a field to
one stream never shifts another stream).
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator


class _Dist(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    min: float | None = None  # clip below
    max: float | None = None  # clip above

    @model_validator(mode="after")
    def _range(self):
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) must be <= max ({self.max})")
        return self

    def _draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        raise NotImplementedError

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` variates as float64, clipped to [min, max]."""
        x = np.asarray(self._draw(rng, n), dtype=np.float64)
        if self.min is not None or self.max is not None:
            x = np.clip(x, self.min, self.max)
        return x

    def sample_tokens(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` whole token counts >= 1."""
        return np.maximum(1, np.rint(self.sample(rng, n))).astype(np.int64)


class Constant(_Dist):
    kind: Literal["constant"] = "constant"
    value: float

    def _draw(self, rng, n):
        return np.full(n, self.value)


class Uniform(_Dist):
    kind: Literal["uniform"] = "uniform"
    low: float
    high: float

    def _draw(self, rng, n):
        return rng.uniform(self.low, self.high, n)


class Exponential(_Dist):
    kind: Literal["exponential"] = "exponential"
    mean: float = Field(gt=0)

    def _draw(self, rng, n):
        return rng.exponential(self.mean, n)


class LogNormal(_Dist):
    """``exp(N(ln median, sigma))``: heavy right tail (tool waits, per-turn increments)."""

    kind: Literal["lognormal"] = "lognormal"
    median: float = Field(gt=0)
    sigma: float = Field(ge=0)

    def _draw(self, rng, n):
        return rng.lognormal(np.log(self.median), self.sigma, n)


class Normal(_Dist):
    """A normal variate; with ``abs: true`` its absolute value (InferCept's |N(11, 3)|)."""

    kind: Literal["normal"] = "normal"
    mean: float
    std: float = Field(ge=0)
    abs: bool = False

    def _draw(self, rng, n):
        x = rng.normal(self.mean, self.std, n)
        return np.abs(x) if self.abs else x


class Gamma(_Dist):
    kind: Literal["gamma"] = "gamma"
    shape: float = Field(gt=0)
    scale: float = Field(gt=0)

    def _draw(self, rng, n):
        return rng.gamma(self.shape, self.scale, n)


class Empirical(_Dist):
    """Draw from listed values (with optional weights)."""

    kind: Literal["empirical"] = "empirical"
    values: list[float] = Field(min_length=1)
    weights: list[float] | None = None

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


def _number_is_constant(value):
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return {"kind": "constant", "value": value}
    return value


#: a distribution field: a mapping with ``kind``, or a bare number (a constant)
Dist = Annotated[
    Annotated[
        Union[Constant, Uniform, Exponential, LogNormal, Normal, Gamma, Empirical],  # noqa: UP007
        Field(discriminator="kind"),
    ],
    BeforeValidator(_number_is_constant),
]


def constant(value: float) -> Constant:
    return Constant(value=value)
