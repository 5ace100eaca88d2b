"""The hosted-API view of a run: what a provider's prompt cache would bill (``workload.provider_cache``).

Responsibility: send every call an agent workload submits, at its submission time and with
its prompt's spans, through one ``sim.prefix.provider.ProviderCache`` (one account for the
workload: a ``mix`` component has its own), and add up each trajectory's bill: prompt
tokens, tokens read from the provider's cache, tokens written to it, and the cost in US
dollars (input at ``input_usd_per_mtok``, cached reads and cache writes at the preset's
fractions of it, output at ``output_usd_per_mtok``). Breakpoints (``breakpoints`` mode) go
where a harness puts them (rule 3.9.3a; ``sim.workload.agent``): at the end of the leading
zones (a per-call field at the front, system prompt, tools), at the end of the
conversation, and at the end of the prompt (after a per-call field at the end).

This is a view beside the simulated engine, not part of it: the engine's own prefix cache
(``allocator``) decides the run's hits and times; the provider view says what the same
calls would cost on a hosted API with the preset's TTL and prices.

Invariant: deterministic (time is the simulation's); a call is billed once, when it is
submitted (a cancelled or refused call too: its input was sent); no provider view, no
bill (the trajectory columns are NaN and the summary's ``provider_*`` are null).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import ConfigDict, Field

from sim.config_model import ConfigModel
from sim.prefix.provider import PRESETS, ProviderCache, ProviderCacheSpec, preset
from sim.prefix.spans import Segments
from sim.workload.distributions import MAX_TIME_S, MAX_TOKENS

PresetName = Literal[tuple(PRESETS)]  # type: ignore[valid-type]
#: the most US dollars per million tokens a price may state
MAX_USD_PER_MTOK = 1e6


class ProviderCacheConfig(ConfigModel):
    """Scenario key ``workload.provider_cache``: a preset of ``sim.prefix.provider`` with
    any of its fields replaced, and the prices in US dollars per million tokens (editable
    examples shaped like 2025 price sheets, not quotes)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    preset: PresetName
    ttl_s: float | None = Field(None, gt=0, le=MAX_TIME_S)
    cached_price_fraction: float | None = Field(None, ge=0, le=100)
    write_surcharge_fraction: float | None = Field(None, ge=0, le=100)
    min_cacheable_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    granularity_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    max_breakpoints: int | None = Field(None, ge=1, le=1_000)
    lookback_boundaries: int | None = Field(None, ge=0, le=1_000)
    input_usd_per_mtok: float = Field(3.0, ge=0, le=MAX_USD_PER_MTOK)
    output_usd_per_mtok: float = Field(15.0, ge=0, le=MAX_USD_PER_MTOK)

    def spec(self) -> ProviderCacheSpec:
        """The preset with this config's fields, prices per token in US dollars."""
        changes = {
            k: v
            for k, v in self.model_dump().items()
            if v is not None and k not in ("preset", "input_usd_per_mtok", "output_usd_per_mtok")
        }
        return preset(
            self.preset,
            input_price=self.input_usd_per_mtok / 1e6,
            output_price=self.output_usd_per_mtok / 1e6,
            **changes,
        )


@dataclass
class Bill:
    """One trajectory's bill so far."""

    prompt_tokens: int = 0
    cached_tokens: int = 0
    written_tokens: int = 0
    usd: float = 0.0

    def row(self) -> tuple[float, float, float, float]:
        """The trajectory row's ``provider_*`` columns."""
        return (
            float(self.prompt_tokens),
            float(self.cached_tokens),
            float(self.written_tokens),
            self.usd,
        )


#: the ``provider_*`` columns of a trajectory without a provider view
NO_BILL = (float("nan"),) * 4


class Provider:
    """One account's prompt cache; bills calls into trajectories' ``Bill``s."""

    def __init__(self, config: ProviderCacheConfig) -> None:
        self.spec = config.spec()
        self.cache = ProviderCache(self.spec)

    def call(
        self, bill: Bill, prompt: Segments, breakpoints: tuple[int, ...], now_s: float
    ) -> None:
        """Bill a call's prompt, sent at ``now_s`` with cache ``breakpoints`` (token
        positions; used in ``breakpoints`` mode)."""
        c = self.cache.call(prompt, now_s, breakpoints)
        bill.prompt_tokens += c.prompt_tokens
        bill.cached_tokens += c.cached_tokens
        bill.written_tokens += c.written_tokens
        bill.usd += c.cost

    def output(self, bill: Bill, tokens: int) -> None:
        """Bill a reply's ``tokens``."""
        bill.usd += self.spec.output_price * tokens
