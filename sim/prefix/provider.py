"""Provider prompt caching, the hosted-API view (rule 3.9): TTL, breakpoints, the bill.

Responsibility: given the calls of a trajectory (span content, the time of each call) say
which input tokens a provider serves from its prompt cache and what the trajectory pays.
Two modes:
- ``automatic``: any cached prefix is reused, in multiples of ``granularity_tokens`` from
  ``min_cacheable_tokens`` on; each call caches its own longest such prefix;
- ``breakpoints``: only prefixes ending at an explicit cache breakpoint are written (at
  most ``max_breakpoints`` per call; writing costs a surcharge); a lookup tries each
  breakpoint and up to ``lookback_boundaries`` earlier span ends before it (a span end is a
  message or content-block boundary), so the previous call's end breakpoint is found.
Entries expire after ``ttl_s`` without use (the caller passes the time; a hit refreshes the
entries it used). Tokens of a call split into ``cached`` (read, billed at
``cached_price_fraction``), ``written`` (billed at ``1 + write_surcharge_fraction``) and
``uncached`` (full rate). F17 per trajectory is cached / prompt tokens.

The presets below are *editable examples* shaped like public price sheets of 2025 (ratios
only; prices are in units of one uncached input token): they are not quotes, and a user
should copy one and set their provider's current numbers.

Invariant: deterministic; no wall clock (time comes from the caller); an entry is usable
only while ``now < expires_at``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from sim.errors import UnknownNameError
from sim.prefix.spans import n_tokens, prefix_hashes, segments

MODES = ("automatic", "breakpoints")


@dataclass(frozen=True)
class ProviderCacheSpec:
    """Parameters of a provider's prompt cache and prices (rule 3.9.4)."""

    name: str
    mode: str  # "automatic" or "breakpoints"
    ttl_s: float  # idle time after which an entry expires
    cached_price_fraction: float  # cached input tokens cost this fraction of the input rate
    write_surcharge_fraction: float = 0.0  # cache-write tokens cost (1 + this) x input rate
    min_cacheable_tokens: int = 1024  # shorter prefixes are never cached
    granularity_tokens: int = 128  # automatic mode: cached prefixes are multiples of this
    max_breakpoints: int = 4  # breakpoints mode: breakpoints honoured per call
    lookback_boundaries: int = 20  # breakpoints mode: earlier span ends also looked up
    input_price: float = 1.0  # price of one uncached input token (any currency unit)
    output_price: float = 0.0  # price of one output token

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise UnknownNameError("provider cache mode", self.mode, list(MODES))
        if self.ttl_s <= 0 or self.granularity_tokens < 1 or self.min_cacheable_tokens < 1:
            raise ValueError("ttl_s, granularity_tokens and min_cacheable_tokens must be > 0")


#: editable examples, not quotes (see module docstring)
PRESETS: dict[str, ProviderCacheSpec] = {
    p.name: p
    for p in (
        ProviderCacheSpec(
            "explicit-5m",
            "breakpoints",
            ttl_s=300,
            cached_price_fraction=0.10,
            write_surcharge_fraction=0.25,
            min_cacheable_tokens=1024,
        ),
        ProviderCacheSpec(
            "explicit-1h",
            "breakpoints",
            ttl_s=3600,
            cached_price_fraction=0.10,
            write_surcharge_fraction=1.0,
            min_cacheable_tokens=1024,
        ),
        ProviderCacheSpec(
            "automatic-5m",
            "automatic",
            ttl_s=300,
            cached_price_fraction=0.50,
            min_cacheable_tokens=1024,
            granularity_tokens=128,
        ),
        ProviderCacheSpec(
            "automatic-disk",
            "automatic",
            ttl_s=6 * 3600,
            cached_price_fraction=0.10,
            min_cacheable_tokens=64,
            granularity_tokens=64,
        ),
    )
}


def preset(name: str, **changes) -> ProviderCacheSpec:
    """A preset by name, with fields replaced (``preset("explicit-5m", ttl_s=600)``)."""
    try:
        return replace(PRESETS[name], **changes)
    except KeyError:
        raise UnknownNameError("provider cache preset", name, list(PRESETS)) from None


@dataclass(frozen=True)
class CallBill:
    """Token split and cost of one call."""

    time_s: float
    prompt_tokens: int
    cached_tokens: int  # read from the cache
    written_tokens: int  # written to the cache (surcharged)
    uncached_tokens: int  # neither
    output_tokens: int
    cost: float


@dataclass
class TrajectoryBill:
    """A trajectory's calls and totals."""

    calls: list[CallBill] = field(default_factory=list)

    def total(self, attr: str) -> float:
        return sum(getattr(c, attr) for c in self.calls)

    @property
    def cost(self) -> float:
        return self.total("cost")

    @property
    def hit_rate(self) -> float:
        """F17 from the bill: cached / prompt tokens (= r / (1 + r), r = cached/uncached)."""
        prompt = self.total("prompt_tokens")
        return self.total("cached_tokens") / prompt if prompt else 0.0


class ProviderCache:
    """One provider-side prompt cache (for one account/key), queried call by call."""

    def __init__(self, spec: ProviderCacheSpec):
        self.spec = spec
        self._expires: dict[int, float] = {}  # prefix hash -> expiry time (s)

    def _positions(self, segs, total: int, breakpoints) -> tuple[list[int], list[int]]:
        """(positions looked up, positions written) for one call."""
        s = self.spec
        if s.mode == "automatic":
            first = -(-s.min_cacheable_tokens // s.granularity_tokens) * s.granularity_tokens
            every = list(range(first, total + 1, s.granularity_tokens))
            return every, every
        bps = sorted({b for b in breakpoints if s.min_cacheable_tokens <= b <= total})
        bps = bps[len(bps) - s.max_breakpoints :] if len(bps) > s.max_breakpoints else bps
        ends, pos = [], 0
        for seg in segs:
            pos += seg[2]
            ends.append(pos)
        look = set(bps)
        for b in bps:  # earlier content boundaries are checked too, within the lookback
            before = [e for e in ends if s.min_cacheable_tokens <= e < b]
            look.update(
                before[len(before) - s.lookback_boundaries :] if s.lookback_boundaries else []
            )
        return sorted(look), bps

    def call(self, content, now_s: float, breakpoints=(), output_tokens: int = 0) -> CallBill:
        """Serve one call at time ``now_s``: look up, refresh, write, bill."""
        segs = segments(content)
        total = n_tokens(segs)
        look, write = self._positions(segs, total, breakpoints)
        every = sorted(set(look) | set(write))
        hashes = dict(zip(every, prefix_hashes(segs, every), strict=True))
        live = [p for p in look if self._expires.get(hashes[p], -1.0) > now_s]
        cached = max(live, default=0)
        expiry = now_s + self.spec.ttl_s
        for p in live:  # a hit refreshes the entries it used
            self._expires[hashes[p]] = expiry
        for p in write:  # written (or refreshed, when already there)
            self._expires[hashes[p]] = expiry
        written = max(0, max(write, default=0) - cached)
        uncached = total - cached - written
        s = self.spec
        cost = s.input_price * (
            uncached + cached * s.cached_price_fraction + written * (1 + s.write_surcharge_fraction)
        )
        cost += s.output_price * output_tokens
        if len(self._expires) > 4 * len(every) + 1024:
            self._expires = {h: t for h, t in self._expires.items() if t > now_s}
        return CallBill(now_s, total, cached, written, uncached, output_tokens, cost)


def bill_trajectory(
    prompts,
    times_s,
    spec: ProviderCacheSpec,
    breakpoint_zones: tuple[str, ...] = ("tools", "history", "end"),
    cache: ProviderCache | None = None,
) -> TrajectoryBill:
    """Bill a trajectory's prompts (``sim.prefix.prompt.Prompt``) sent at ``times_s``.

    Breakpoints go at the end of the named zones (rule 3.9.3a: after tool definitions and
    after long-lived history); ``"end"`` is the end of each prompt, which caches the whole
    conversation for the next call. Pass ``cache`` to share one cache between trajectories.
    """
    cache = cache or ProviderCache(spec)
    bill = TrajectoryBill()
    for p, t in zip(prompts, times_s, strict=True):
        bps = [end for zone, _, end in p.zones if zone in breakpoint_zones]
        if "end" in breakpoint_zones:
            bps.append(p.n_tokens)
        bill.calls.append(cache.call(p.segments, t, bps, n_tokens(p.output)))
    return bill
