"""Routers: which node serves a request (named strategies, registered by ``kind``).

Responsibility: given a request and a read-only view of the cluster (each node's
outstanding requests, KV use, prefix match, predicted TTFT, where the request's sequence
and trajectory live), pick a node or refuse. Each kind declares its options as a frozen
pydantic model (``Router.Options``); the scenario's ``cluster.router`` section is the
discriminated union of them (``router_options_union``), so ``--set
cluster.router.kind=least_load`` drops the old kind's options as ``allocator.kind`` does.

The kinds (docs/cluster.md):

* ``round_robin``: nodes in turn (Vidur's global scheduler).
* ``least_load``: the fewest outstanding requests (queued + running), then the lowest
  KV use, then the lowest node id (``by: kv``: KV use first, then outstanding requests).
* ``prefix_affinity``: F20, ``argmax_j mu Match_j / S - (1 - mu) (L_j / L_max)^gamma``
  over the prefix directory (chained 16-token chunk hashes, F19) and the request's own
  resident sequence; ``l_max: auto`` is ``max_j L_j`` (0 load everywhere: no load term).
* ``session_affinity``: a trajectory stays on the node that served its previous call
  unless that node has more than ``overload_queue_depth`` outstanding requests; new and
  displaced trajectories go to the least loaded node.
* ``vllm_dp``: vLLM's data-parallel load balancer (its API server in front of DP ranks,
  ``DPLBAsyncMPClient``): the lowest ``4 x waiting + running``, ties to the lowest rank;
  waiting counts every request routed there that is not running (queued, in its inbox,
  on the network). vLLM reads the counts from its coordinator (refreshed about every
  100 ms, plus its own placements since); kvsim reads them exactly.
* ``ttft_estimate``: Mooncake's cache-aware choice: the lowest predicted TTFT (the node's
  queued prefill plus the unmatched suffix, at its prefill rate); above ``ttft_slo_s`` the
  request is refused (``rejected_by_router``).

Invariant: a router is deterministic (no randomness, no clock but the view's); it returns
a node id in ``range(view.n_nodes)`` or None (refuse), and only ``ttft_estimate`` with
an SLO refuses. Ties go to the lowest node id.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Annotated, Any, ClassVar, Literal, Protocol, Union

from pydantic import ConfigDict, Field, field_validator

from sim.config_model import ConfigModel
from sim.errors import ConfigError
from sim.plugins import check_kind_tag


class ClusterView(Protocol):
    """What a router may read about the cluster (``sim.cluster.front.ClusterFront``)."""

    n_nodes: int

    def outstanding(self, node: int) -> int:
        """Requests routed to ``node`` and not yet ended (queued + running, L_j of F20)."""

    def kv_used_fraction(self, node: int) -> float:
        """Share of ``node``'s KV pool that is not free."""

    def match_tokens(self, req: Any) -> list[int]:
        """Per node, prompt tokens of ``req`` it already holds (directory or own sequence)."""

    def predicted_ttft_s(self, node: int, req: Any, match_tokens: int) -> float:
        """Queue + prefill of ``req``'s unmatched suffix on ``node``, in seconds."""

    def trajectory_node(self, traj_id: int) -> int | None:
        """The node that served the trajectory's latest call (None: none yet)."""

    def running(self, node: int) -> int:
        """Requests ``node``'s scheduler is running (the rest of ``outstanding`` waits)."""


class _Options(ConfigModel):
    # defer_build: built as a part of the scenario model (its cluster section)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)


class Router(ABC):
    """A routing strategy; subclasses set ``kind`` and ``Options`` and register."""

    kind: ClassVar[str]
    Options: ClassVar[type[_Options]]

    def __init__(self, options: _Options, n_nodes: int) -> None:
        self.options = options
        self.n_nodes = n_nodes

    #: whether the router reads prefix matches (the front then keeps a directory)
    uses_directory: ClassVar[bool] = False

    @property
    def directory_update_delay_s(self) -> float:
        """How late the directory sees the nodes' cache changes (0: at once)."""
        return 0.0

    @abstractmethod
    def route(self, req: Any, view: ClusterView) -> int | None:
        """The node for ``req``, or None to refuse it."""


_REGISTRY: dict[str, type[Router]] = {}


def register(cls: type[Router]) -> type[Router]:
    """Class decorator: make ``cls`` reachable by ``cls.kind`` (its ``Options`` tagged so;
    a kind already registered to another class is refused, as pause policies are)."""
    check_kind_tag("router kind", cls.kind, cls.Options)
    old = _REGISTRY.get(cls.kind)
    if old is not None and _qualified(old) != _qualified(cls):  # the same class reloaded is fine
        raise ValueError(
            f"router kind {cls.kind!r} is already registered ({_qualified(old)}); "
            "register yours under another name"
        )
    _REGISTRY[cls.kind] = cls
    return cls


def router_kinds() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def router_class(kind: str) -> type[Router]:
    try:
        return _REGISTRY[kind]
    except KeyError:
        raise ConfigError(
            f"unknown router kind {kind!r}; valid: {', '.join(_REGISTRY)}",
            field="cluster.router.kind",
        ) from None


def router_options_models() -> tuple[type[_Options], ...]:
    """Every registered router's options model, in registration order (read at each call:
    a router registered late is as visible as a shipped one)."""
    return tuple(cls.Options for cls in _REGISTRY.values())


def router_options_union(classes: tuple[type[_Options], ...] | None = None) -> Any:
    """The pydantic type of ``cluster.router``: the options of ``classes`` (default: every
    registered router's) by ``kind``."""
    classes = router_options_models() if classes is None else classes
    return Annotated[Union[classes], Field(discriminator="kind")]  # noqa: UP007


def make_router(options: _Options, n_nodes: int) -> Router:
    return router_class(options.kind)(options, n_nodes)


def _least_outstanding(view: ClusterView, by_kv: bool = False) -> int:
    def key(j: int):
        load, kv = view.outstanding(j), view.kv_used_fraction(j)
        return (kv, load, j) if by_kv else (load, kv, j)

    return min(range(view.n_nodes), key=key)


# ----------------------------------------------------------------------------- kinds
@register
class RoundRobin(Router):
    kind = "round_robin"

    class Options(_Options):
        model_config = ConfigDict(title="RoundRobinRouter")
        kind: Literal["round_robin"] = "round_robin"

    def __init__(self, options, n_nodes: int) -> None:
        super().__init__(options, n_nodes)
        self._next = 0

    def route(self, req, view) -> int:
        j = self._next
        self._next = (j + 1) % self.n_nodes
        return j


@register
class LeastLoad(Router):
    kind = "least_load"

    class Options(_Options):
        model_config = ConfigDict(title="LeastLoadRouter")
        kind: Literal["least_load"] = "least_load"
        by: Literal["queue", "kv"] = "queue"  # outstanding requests first, or KV use first

    def route(self, req, view) -> int:
        return _least_outstanding(view, self.options.by == "kv")


@register
class PrefixAffinity(Router):
    kind = "prefix_affinity"

    class Options(_Options):
        model_config = ConfigDict(title="PrefixAffinityRouter")
        kind: Literal["prefix_affinity"] = "prefix_affinity"
        mu: float = Field(0.5, ge=0, le=1)  # affinity vs load weight (F20)
        gamma: float = Field(1.0, gt=0, le=16)  # load-penalty exponent (F20)
        # normalizing load (F20's L_max): auto = max_j L_j, else a fixed count >= 1
        l_max: Literal["auto"] | int = "auto"
        directory_update_delay_s: float = Field(0.0, ge=0, le=3600)  # directory staleness
        chunk_tokens: int = Field(16, ge=1, le=4096)  # F19 chunk (16 in rule 3.15)

        @field_validator("l_max", mode="before")
        @classmethod
        def _l_max(cls, v):
            if v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
                return v
            raise ValueError(f"l_max must be auto or an integer >= 1, got {v!r}")

    uses_directory = True

    @property
    def directory_update_delay_s(self) -> float:
        return self.options.directory_update_delay_s

    def route(self, req, view) -> int:
        from sim.cluster.score import best_node, routing_score

        o = self.options
        match = view.match_tokens(req)
        loads = [view.outstanding(j) for j in range(self.n_nodes)]
        l_max = max(loads) if o.l_max == "auto" else int(o.l_max)
        scores = [
            routing_score(m, req.prompt_tokens, load, l_max, mu=o.mu, gamma=o.gamma)
            for m, load in zip(match, loads, strict=True)
        ]
        return best_node(scores)


@register
class SessionAffinity(Router):
    kind = "session_affinity"

    class Options(_Options):
        model_config = ConfigDict(title="SessionAffinityRouter")
        kind: Literal["session_affinity"] = "session_affinity"
        overload_queue_depth: int = Field(64, ge=0, le=10**6)

    def route(self, req, view) -> int:
        home = view.trajectory_node(req.traj_id) if req.traj_id >= 0 else None
        if home is not None and view.outstanding(home) <= self.options.overload_queue_depth:
            return home
        return _least_outstanding(view)


@register
class TtftEstimate(Router):
    kind = "ttft_estimate"

    class Options(_Options):
        model_config = ConfigDict(title="TtftEstimateRouter")
        kind: Literal["ttft_estimate"] = "ttft_estimate"
        ttft_slo_s: float | None = Field(None, gt=0, le=86_400)  # refuse above it (None: never)
        chunk_tokens: int = Field(16, ge=1, le=4096)

    uses_directory = True

    def route(self, req, view) -> int | None:
        match = view.match_tokens(req)
        est = [view.predicted_ttft_s(j, req, match[j]) for j in range(self.n_nodes)]
        j = min(range(self.n_nodes), key=lambda i: (est[i], i))
        slo = self.options.ttft_slo_s
        return None if slo is not None and est[j] > slo else j


@register
class VllmDp(Router):
    kind = "vllm_dp"

    class Options(_Options):
        model_config = ConfigDict(title="VllmDpRouter")
        kind: Literal["vllm_dp"] = "vllm_dp"

    #: vLLM's weight of a waiting request against a running one
    WAITING_WEIGHT: ClassVar[int] = 4

    def route(self, req, view) -> int:
        def score(j: int) -> tuple[int, int]:
            running = view.running(j)
            waiting = max(view.outstanding(j) - running, 0)
            return self.WAITING_WEIGHT * waiting + running, j

        return min(range(view.n_nodes), key=score)
