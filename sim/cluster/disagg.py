"""Disaggregated prefill and decode: a request's prompt computed on a prefill instance,
its KV shipped over a contended link, its output generated on a decode instance.

Responsibility: the front of a cluster whose node groups have roles (``prefill``,
``decode``; ``sim.cluster.config``). Each request picks its decode instance (the node
holding its sequence, so a paused agent's next turn returns to its KV; else the decode
node with the fewest outstanding requests, ties to the lowest id) and counts the prompt
tokens that instance does not hold. Up to ``remote_prefill_min_tokens`` of them, the
decode instance prefills them itself (conditional disaggregation, as Dynamo and llm-d
route); above, the least loaded prefill instance runs the prompt as a one-token request
(vLLM's prefill side with ``max_tokens=1``; its sequence goes to that node's prefix
cache when it ends), the KV of the tokens the decode side lacks crosses the link between
the two groups (``KVLinks``), and the request is then submitted to the decode instance
with those tokens already computed (``Request.remote_tokens``; it queues there like any
request until its admission finds memory, and recomputes the last prompt token for its
logits, its first decode step).

The link (F-link, docs/cluster.md): a ``simpy.Resource`` of ``concurrency`` slots per
(prefill group, decode group) pair. A transfer of B bytes over L layers, whose prefill ran
for D seconds, holds a slot from the prefill's end for ``latency + B / bw`` (after_prefill)
or, layer by layer, ``latency + max(B / (L bw), B / bw - D (L - 1) / L)`` (layerwise: layer
l is ready at l D / L and the link sends layers one after another, so only the last
layer's share is left unless the link falls behind the prefill).

Invariants: every request ends exactly once (a refusal on the prefill instance ends it
with that reason); bytes come from ``sim.sizing.groups.group_bytes`` (per layer group:
full-attention tokens, a window's last tokens, a state once); the same scenario and seed
give the same placements (no randomness, ties to the lowest id).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import simpy

from sim.cluster.config import TransferLink
from sim.cluster.front import ClusterFront
from sim.cluster.routers import Router
from sim.sched.request import CANCELLED, CANCELLED_REASON, FINISHED, Request
from sim.sizing.groups import GroupBytes

#: request ids of the prefill halves (kept apart from the workload's ids)
PREFILL_ID_BASE = 1 << 40


def transfer_bytes(groups: Sequence[GroupBytes], context_tokens: int, new_tokens: int) -> float:
    """Bytes of KV a decode instance holding ``context_tokens - new_tokens`` of a context
    of ``context_tokens`` needs: per group, the new tokens it keeps (a sliding window keeps
    at most its window) and, for a state group, the state once (whole copies: every TP
    rank's share)."""
    if new_tokens <= 0:
        return 0.0
    total = 0.0
    for g in groups:
        if g.holds_state:
            total += g.num_layers * g.state_bytes_per_layer
        else:
            kept = min(new_tokens, g.held_tokens(context_tokens))
            total += g.num_layers * kept * g.bytes_per_token_per_layer
    return total


def link_hold_s(link: TransferLink, nbytes: float, num_layers: int, prefill_s: float) -> float:
    """Seconds a transfer holds its link slot after the prefill ends (module docstring)."""
    if nbytes <= 0:
        return 0.0
    whole = nbytes / link.bandwidth_bytes_per_s
    if link.streaming == "after_prefill" or num_layers <= 1:
        return link.latency_s + whole
    lag = whole - prefill_s * (num_layers - 1) / num_layers
    return link.latency_s + max(whole / num_layers, lag)


@dataclass
class Phases:
    """One remotely prefilled request's path (seconds are simulation times)."""

    prefill_node: int
    decode_node: int
    nbytes: float
    prefill_start_s: float | None = None
    prefill_end_s: float | None = None
    transfer_end_s: float | None = None


class KVLinks:
    """The links between prefill and decode groups, with their figures."""

    def __init__(self, env: simpy.Environment, link: TransferLink) -> None:
        self.env, self.link = env, link
        self._res: dict[tuple[int, int], simpy.Resource] = {}
        self.busy_s = 0.0  # slot-seconds held
        self.bytes = 0.0
        self.transfers = 0
        self.waits_s: list[float] = []

    @property
    def n_links(self) -> int:
        return len(self._res)

    def ship(self, pair: tuple[int, int], nbytes: float, hold_s: float):
        """A process: wait for a slot of ``pair``'s link, hold it ``hold_s``."""
        res = self._res.get(pair)
        if res is None:
            res = self._res[pair] = simpy.Resource(self.env, capacity=self.link.concurrency)
        asked = self.env.now
        with res.request() as slot:
            yield slot
            self.waits_s.append(self.env.now - asked)
            start = self.env.now
            yield self.env.timeout(hold_s)
            self.busy_s += self.env.now - start
            self.bytes += nbytes
            self.transfers += 1

    def utilisation(self, sim_time_s: float, n_pairs: int) -> float | None:
        """Busy slot-seconds over the slot-seconds of every possible link."""
        cap = sim_time_s * n_pairs * self.link.concurrency
        return self.busy_s / cap if cap > 0 else None


class DisaggFront(ClusterFront):
    """A cluster front with prefill and decode instances (module docstring)."""

    def __init__(self, env: simpy.Environment, nodes: Sequence[Any], *, roles: Sequence[str],
                 groups: Sequence[int], link: TransferLink, kv_groups: Sequence[Sequence[GroupBytes]],
                 num_layers: Sequence[int], **kw: Any) -> None:  # fmt: skip
        # the base front's router is never asked (submit is this class's own)
        super().__init__(env, nodes, cast(Router, _NoRouter()), **kw)
        self.roles, self.groups, self.link = list(roles), list(groups), link
        self.kv_groups, self.num_layers = list(kv_groups), list(num_layers)
        self.prefill_nodes = [j for j, r in enumerate(roles) if r == "prefill"]
        self.decode_nodes = [j for j, r in enumerate(roles) if r == "decode"]
        self.links = KVLinks(env, link)
        self.phases: dict[int, Phases] = {}  # by the workload's req_id
        self.local_prefills = 0  # requests the decode instance prefilled itself
        self._prefill_live = [0] * self.n_nodes  # prefill halves per node, not yet ended
        self._dropped: set[int] = set()  # cancelled while prefilled or shipped

    @property
    def n_link_pairs(self) -> int:
        return len({self.groups[j] for j in self.prefill_nodes}) * len(
            {self.groups[j] for j in self.decode_nodes})  # fmt: skip

    def submit(self, req: Request) -> None:
        d = self._decode_node(req)
        held = min(self.nodes[d].kv.resident_tokens(req.seq_id), req.prompt_tokens)
        new = req.prompt_tokens - held
        if new <= self.link.remote_prefill_min_tokens:
            self.local_prefills += 1
            self._to_node(req, d)
            return
        p = min(self.prefill_nodes, key=lambda j: (self._prefill_live[j], j))
        nbytes = transfer_bytes(self.kv_groups[p], req.prompt_tokens, new)
        ph = self.phases[req.req_id] = Phases(p, d, nbytes)
        self.routed[d] += 1
        self._book(req, d)  # the decode side owns the request from now (load, home)
        sub = Request(PREFILL_ID_BASE + req.req_id, ("prefill", req.req_id), req.prompt_tokens,
                      1, self.env.now, content=req.content, traj_id=req.traj_id, turn=req.turn,
                      branch=req.branch, last_turn=True, tag=req.tag, tool_name=req.tool_name)  # fmt: skip
        self._prefill_live[p] += 1

        def prefilled(s: Request) -> None:
            self._prefill_live[p] -= 1
            ph.prefill_start_s, ph.prefill_end_s = s.admitted_s, s.finish_s
            if s.status != FINISHED:  # refused there (never fits): the request ends so
                self._fail(req, s.status, s.finish_reason or "rejected_never_fits")
                return
            if req.req_id in self._dropped:
                self._fail(req, CANCELLED, CANCELLED_REASON)
                return
            self.env.process(self._ship(req, ph, s))

        sub.on_done = prefilled
        self._send(p, "submit", sub)

    def cancel(self, req: Request | None, seq: Any) -> None:
        """A request cancelled before its KV reached the decode instance ends when its
        prefill or transfer does (the decode instance never sees it)."""
        ph = self.phases.get(req.req_id) if req is not None else None
        if req is not None and ph is not None and ph.transfer_end_s is None:
            self._dropped.add(req.req_id)
        super().cancel(req, seq)

    # ------------------------------------------------------------------ inside
    def _ship(self, req: Request, ph: Phases, sub: Request):
        end = sub.finish_s if sub.finish_s is not None else self.env.now
        ran = end - (sub.admitted_s if sub.admitted_s is not None else end)
        hold = link_hold_s(self.link, ph.nbytes, self.num_layers[ph.prefill_node], ran)
        pair = (self.groups[ph.prefill_node], self.groups[ph.decode_node])
        yield self.env.process(self.links.ship(pair, ph.nbytes, hold))
        ph.transfer_end_s = self.env.now
        if req.req_id in self._dropped:
            self._fail(req, CANCELLED, CANCELLED_REASON)
            return
        req.remote_tokens = req.prompt_tokens
        self._send(ph.decode_node, "submit", req)

    def _decode_node(self, req: Request) -> int:
        home = self.home.get(req.seq_id)
        if home is not None and self.roles[home] == "decode":
            return home
        return min(self.decode_nodes, key=lambda j: (self._outstanding[j], j))

    def _to_node(self, req: Request, j: int) -> None:
        self.routed[j] += 1
        self._book(req, j)
        self._send(j, "submit", req)

    def _fail(self, req: Request, status: int, reason: str) -> None:
        """End a request that never reached its decode instance (recorded by the front)."""
        self._dropped.discard(req.req_id)
        req.end(status, reason)
        req.finish_s = self.env.now
        if status != CANCELLED:  # refused on the prefill side: the decode home hears of it
            self._tell_home_refused(req)
        if self.on_rejected is not None:
            self.on_rejected(req)
        if req.on_done is not None:
            req.on_done(req)


class _NoRouter:
    """A disaggregated front places requests itself (no router, no directory)."""

    uses_directory = False

    def route(self, req: Request, view: Any) -> int | None:
        raise TypeError("DisaggFront places requests itself; its submit never routes")
