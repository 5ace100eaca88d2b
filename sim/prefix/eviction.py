"""Eviction strategies for the radix tree, registered by name, and the watermark trigger.

Responsibility: rank dormant leaves. A strategy is a small object (``EvictionStrategy``)
with one ranking method, ``key(node, tree) -> tuple``; the leaf with the smallest key is
evicted first, and the tree breaks ties the same way for every strategy: deepest first
(largest end position), then oldest node. Two abilities have defaults on the base: how many
trailing blocks of a leaf share its rank (``same_rank_blocks``: all of them, except for
``priority``, whose rank is the last block's), so the tree trims no further at once; and
whether the tree may grow a leaf in place (``merges_extensions``: true when the ranking
cannot tell a grown leaf from a child per insert, see ``radix``). Strategies never mutate
the tree.

Invariant: every name in ``EVICTION_STRATEGIES`` maps to one stateless strategy object, and
an unknown name raises ``UnknownNameError`` listing the valid ones. A rank holds no NaN:
the tree checks the ranks of every strategy whose ``key`` is not one of the shipped
strategies' (a plug-in's) and raises ``PluginError`` naming it. The shipped keys are
trusted by a private registry that only kvsim's own modules add to (``_trust_keys``
refuses a function defined anywhere else); ``SHIPPED_KEYS`` is a read-only snapshot of it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from sim.errors import ConfigError, PluginError, UnknownNameError


class EvictionStrategy(ABC):
    """Orders dormant leaves: smaller key = evicted sooner."""

    name: ClassVar[str]
    #: the ranking cannot tell a leaf grown in place from a child per insert: it ranks by
    #: last access (which a touch gives the whole path) or the last block's content
    merges_extensions: ClassVar[bool] = False

    @abstractmethod
    def key(self, node, tree) -> tuple:
        """The leaf's rank; the tree appends its tie-breaks (deepest, then oldest). No
        element may be NaN (it orders with nothing: the tree refuses it)."""

    def same_rank_blocks(self, node, tree) -> int:
        """Trailing blocks of the leaf that share its rank (all of them by default)."""
        return len(node.block_ids)


@dataclass(frozen=True)
class LRU(EvictionStrategy):
    """Least recently used first (rule 3.7; SGLang's default)."""

    name: ClassVar[str] = "lru"
    merges_extensions: ClassVar[bool] = True

    def key(self, node, tree) -> tuple:
        return (node.last_access,)


@dataclass(frozen=True)
class LFU(EvictionStrategy):
    """Fewest prefix hits first; ties by least recently used."""

    name: ClassVar[str] = "lfu"

    def key(self, node, tree) -> tuple:
        return (node.hit_count, node.last_access)


@dataclass(frozen=True)
class FIFO(EvictionStrategy):
    """Oldest inserted first, whatever its use since."""

    name: ClassVar[str] = "fifo"

    def key(self, node, tree) -> tuple:
        return (node.created_at,)


@dataclass(frozen=True)
class Priority(EvictionStrategy):
    """Lowest zone priority first (e.g. history before the system prompt); ties by LRU.

    A leaf is ranked by the priority of the content its last (deepest) block holds, since
    eviction trims a leaf from its end; the tree maps content ids to priorities.
    """

    name: ClassVar[str] = "priority"
    merges_extensions: ClassVar[bool] = True

    def key(self, node, tree) -> tuple:
        return (tree.priority_of(node), node.last_access)

    def same_rank_blocks(self, node, tree) -> int:
        """Trailing blocks whose last token has the same priority as the node's last block."""
        prio, run = tree.priority_of(node), 0
        for cid, _, n in reversed(node.label):
            if tree.content_priority.get(cid, 0) != prio:
                break
            run += n
        return -(-run // tree.block_size)


EVICTION_STRATEGIES: dict[str, EvictionStrategy] = {}
#: the ``key`` functions of the shipped strategies (the trace replay's add theirs): the tree
#: trusts their ranks and checks every other key's (a plug-in's) for NaN as it enters.
#: Private: only ``_trust_keys`` adds to it; read it as ``SHIPPED_KEYS`` (a frozenset)
_SHIPPED_KEYS: set[Callable] = set()
#: where a trusted key may be defined: kvsim's own prefix-cache modules
_SHIPPED_PREFIX = "sim.prefix."


def _trust_keys(*keys: Callable) -> None:
    """Trust the ranks of ``keys`` (the tree binds them unchecked): for kvsim's own
    strategies only, called where they are defined (``sim.prefix.eviction``,
    ``sim.prefix.replay_policies``). A function defined outside ``sim.prefix`` (a
    plug-in's key, whose ranks must be checked for NaN) is refused with ``PluginError``."""
    for key in keys:
        module = getattr(key, "__module__", None)
        if not isinstance(module, str) or not module.startswith(_SHIPPED_PREFIX):
            raise PluginError(
                f"{getattr(key, '__qualname__', key)!r} (module {module!r}): only the shipped "
                "strategies' keys are trusted unchecked; a plug-in's ranks are checked for "
                "NaN (docs/prefix_cache.md, adding a strategy)"
            )
        _SHIPPED_KEYS.add(key)


def is_shipped_key(key: Callable) -> bool:
    """Whether a strategy's bound ``key`` is a shipped one (trusted: bound unchecked)."""
    return getattr(key, "__func__", None) in _SHIPPED_KEYS


def __getattr__(name: str) -> frozenset[Callable]:
    """``SHIPPED_KEYS``: the trusted keys, a read-only snapshot (adding to it trusts nothing)."""
    if name == "SHIPPED_KEYS":
        return frozenset(_SHIPPED_KEYS)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_trust_keys(LRU.key, LFU.key, FIFO.key, Priority.key)


def register_strategy(strategy: EvictionStrategy) -> EvictionStrategy:
    """Add a strategy under its ``name`` (a later registration replaces an earlier one)."""
    EVICTION_STRATEGIES[strategy.name] = strategy
    return strategy


for _s in (LRU(), LFU(), FIFO(), Priority()):
    register_strategy(_s)


def get_strategy(name_or_strategy: str | EvictionStrategy) -> EvictionStrategy:
    """A registered strategy by name (an ``EvictionStrategy`` object passes through)."""
    if isinstance(name_or_strategy, EvictionStrategy):
        return name_or_strategy
    try:
        return EVICTION_STRATEGIES[name_or_strategy]
    except KeyError:
        raise UnknownNameError(
            "eviction strategy", name_or_strategy, list(EVICTION_STRATEGIES)
        ) from None


@dataclass(frozen=True)
class Watermark:
    """Rule 3.7.3: when free blocks drop below ``tau_low_blocks``, evict up to ``target_free``.

    Both zero (the default) means eviction happens only on an allocation shortfall.
    """

    tau_low_blocks: int = 0  # evict when free blocks < this
    target_free_blocks: int = 0  # ... until this many are free (or nothing is evictable)

    def __post_init__(self) -> None:
        if self.tau_low_blocks < 0 or self.target_free_blocks < 0:
            raise ConfigError("tau_low and target_free must be >= 0", field="eviction")
        if self.target_free_blocks < self.tau_low_blocks:
            raise ConfigError(
                f"target_free ({self.target_free_blocks}) must be >= tau_low "
                f"({self.tau_low_blocks})",
                field="eviction",
            )

    def blocks_to_evict(self, free_blocks: int) -> int:
        """How many blocks to evict now, given the free count (0 above the watermark)."""
        if free_blocks >= self.tau_low_blocks:
            return 0
        return self.target_free_blocks - free_blocks
