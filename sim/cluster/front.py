"""The cluster front: the one "node" the workload talks to, routing to several nodes.

Responsibility: implement the node's workload API (``submit``, ``fork``, ``release``,
``cancel``, ``call_at_boundary``, ``workload_finished``) over several ``Node``s. Each
submission asks the router for a node; a sequence lives on one node at a time (its
*home*): forks go to the parent's home, releases and cancellations to the sequence's
home, and a request routed away from its sequence's home moves the sequence (the old
node releases it, the new one prefills whatever its prefix cache does not hold: no KV is
migrated between nodes). Every message to a node arrives ``network_delay_s`` later (one
constant delay, so each node sees the messages in the order they were sent). The front
also serves the routers' view (``sim.cluster.routers.ClusterView``): outstanding requests
per node, KV use, prefix matches (the ``PrefixDirectory`` plus the request's own resident
sequence on its home) and a predicted TTFT.

Invariants: ``outstanding[j]`` = requests routed to node j whose ``on_done`` has not yet
run (each request ends exactly once); a sequence has at most one home; routing decisions
are deterministic; a router's answer is a node index in ``range(n_nodes)`` or None (any
other value is a one-line error naming the router, checked in O(1) per submission); with
one node and ``round_robin`` the nodes see exactly the calls a single-node run makes
(tested: identical results).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import simpy

from sim.cluster.routers import Router
from sim.cost import StepWork
from sim.errors import KvsimError
from sim.sched.request import BY_ROUTER, REJECTED, Request


class ClusterFront:
    """Routes the workload's calls to ``nodes`` (see the module docstring)."""

    def __init__(
        self,
        env: simpy.Environment,
        nodes: Sequence[Any],
        router: Router,
        *,
        pool_bytes: Sequence[float],
        directory: Any = None,
        network_delay_s: float = 0.0,
        on_rejected: Callable[[Request], None] | None = None,
    ) -> None:
        self.env, self.nodes, self.router = env, list(nodes), router
        self.n_nodes = len(self.nodes)
        self.pool_bytes = list(pool_bytes)
        self.directory = directory
        self.delay_s = network_delay_s
        self.on_rejected = on_rejected
        self._outstanding = [0] * self.n_nodes
        # per node, the requests routed there and not yet ended, by req_id (the TTFT
        # estimate counts their prompts: the node's inbox and messages in flight included)
        self._live: list[dict[int, Request]] = [{} for _ in range(self.n_nodes)]
        self.routed = [0] * self.n_nodes  # routing decisions per node
        self.home: dict[Hashable, int] = {}  # sequence -> node that holds it
        self._traj_node: dict[int, int] = {}  # trajectory -> node of its latest call
        self.moves = 0  # sequences moved to another node
        self.rejected = 0  # requests the router refused
        # prefix matches seen by routers that read them (prefix_affinity, ttft_estimate):
        # prompt tokens routed, matched on the chosen node, and on the best node (what one
        # global cache holding everything any node holds would serve)
        self.match_prompt_tokens = 0
        self.match_chosen_tokens = 0
        self.match_best_tokens = 0
        self._last_match: tuple[int, list[int]] | None = None
        self._rate_cache: dict[int, float] = {}  # node -> seconds per prefill token

    # ------------------------------------------------------------- workload API
    def submit(self, req: Request) -> None:
        j = self.router.route(req, self)
        if j is None:
            self._refuse(req)
            return
        if j.__class__ is not int or not 0 <= j < self.n_nodes:
            j = self._node_index(j, req)
        self.routed[j] += 1
        last = self._last_match
        if last is not None and last[0] == req.req_id:  # the router read the matches
            self.match_prompt_tokens += req.prompt_tokens
            self.match_chosen_tokens += last[1][j]
            self.match_best_tokens += max(last[1])
        seq = req.seq_id
        home = self.home.get(seq)
        if home is not None and home != j:  # the sequence moves: the old node lets it go
            self._send(home, "release", seq)
            self.moves += 1
        self._book(req, j)
        self._send(j, "submit", req)

    def _node_index(self, j: object, req: Request) -> int:
        """A router's answer other than a node index of type ``int`` in range: any integer
        type but a bool, in ``range(n_nodes)`` (-1 is not the last node); anything else
        is a one-line ``KvsimError`` naming the router and the valid range."""
        if not isinstance(j, bool):
            try:
                index = operator.index(j)  # type: ignore[arg-type]
            except TypeError:
                index = -1
            if 0 <= index < self.n_nodes:
                return index
        cls = type(self.router)
        shown = repr(j) if len(repr(j)) <= 60 else repr(j)[:57] + "..."
        raise KvsimError(
            f"router {getattr(self.router, 'kind', '?')!r} ({cls.__module__}.{cls.__qualname__}) "
            f"returned {type(j).__name__} {shown} for request {req.req_id}; it must return a "
            f"node index in 0..{self.n_nodes - 1} (an int) or None to refuse the request "
            "(docs/cluster.md, routers)"
        )

    def _book(self, req: Request, j: int) -> None:
        """Place ``req`` on node ``j`` in the front's books (its sequence's home, its
        trajectory's node, the node's outstanding and live requests) and undo the load when
        it ends; the sequence's home goes with its last turn or a rejection."""
        self.home[req.seq_id] = j
        self._traj_node[req.traj_id] = j
        self._outstanding[j] += 1
        self._live[j][req.req_id] = req
        done = req.on_done

        def ended(r: Request, j: int = j, done=done) -> None:
            self._outstanding[j] -= 1
            self._live[j].pop(r.req_id, None)
            if (r.last_turn or r.status == REJECTED) and self.home.get(r.seq_id) == j:
                del self.home[r.seq_id]  # the node released the sequence itself
            if done is not None:
                done(r)

        req.on_done = ended

    def fork(self, parent: Hashable, child: Hashable) -> None:
        j = self.home.get(parent)
        if j is None:  # the parent holds nothing anywhere: the child starts empty
            return
        self.home[child] = j
        self._send(j, "fork", parent, child)

    def release(self, seq: Hashable) -> None:
        j = self.home.pop(seq, None)
        if j is not None:
            self._send(j, "release", seq)

    def cancel(self, req: Request | None, seq: Hashable) -> None:
        j = self.home.pop(seq, None)
        if j is not None:
            self._send(j, "cancel", req, seq)

    def call_at_boundary(self, fn: Callable[[], Any]) -> None:
        """At node 0's next step boundary (workload timers that belong to no node)."""
        self.nodes[0].call_at_boundary(fn)

    def workload_finished(self) -> None:
        for j in range(self.n_nodes):
            self._send(j, "workload_finished")

    # ------------------------------------------------------------ router view
    def in_flight(self, node: int) -> list[Request]:
        """Requests routed to ``node`` that have not ended (queued, running, waiting for
        their context, in its inbox or on the network), in routing order."""
        return list(self._live[node].values())

    def outstanding(self, node: int) -> int:
        return self._outstanding[node]

    def running(self, node: int) -> int:
        return len(self.nodes[node].sched.running)

    def kv_used_fraction(self, node: int) -> float:
        pool = self.pool_bytes[node]
        return 1.0 - self.nodes[node].kv.free_bytes / pool if pool > 0 else 1.0

    def trajectory_node(self, traj_id: int) -> int | None:
        return self._traj_node.get(traj_id)

    def match_tokens(self, req: Request) -> list[int]:
        """Per node, prompt tokens already there: the directory's match (a multiple of its
        chunk) and, on the sequence's home, the tokens the sequence holds resident."""
        d = self.directory
        # the sequence names the line of prompts (each its last one plus new spans), so
        # the directory re-hashes only what is new (answers do not depend on it)
        out = d.match_tokens(req.content, req.prompt_tokens, req.seq_id) if d is not None else None
        out = list(out) if out is not None else [0] * self.n_nodes
        home = self.home.get(req.seq_id)
        if home is not None:
            held = min(self.nodes[home].kv.resident_tokens(req.seq_id), req.prompt_tokens)
            out[home] = max(out[home], held)
        self._last_match = (req.req_id, out)
        return out

    def predicted_ttft_s(self, node: int, req: Request, match_tokens: int) -> float:
        """The prompt tokens still to prefill on ``node`` (requests routed there, not yet
        ended and without their first token: running, waiting, in its inbox or still on the
        network) plus this request's unmatched suffix, at the node's prefill rate (a
        full-budget chunk with no history, priced by its cost model)."""
        pending = 0
        for r in self._live[node].values():
            if r.first_token_s is None:
                pending += max(r.prompt_tokens - r.num_computed, 0)
        suffix = max(req.prompt_tokens - match_tokens, 0)
        return (pending + suffix) * self._seconds_per_prefill_token(node)

    def _seconds_per_prefill_token(self, node: int) -> float:
        rate = self._rate_cache.get(node)
        if rate is None:
            n = self.nodes[node]
            budget = n.sched.token_budget
            step = n.cost.iteration_time(StepWork(prefill_chunks=((budget, 0),)))
            rate = self._rate_cache[node] = step.total_s / budget
        return rate

    # ---------------------------------------------------------------- helpers
    def _tell_home_refused(self, req: Request) -> None:
        """A turn refused before it reached a node: the node holding its sequence (its
        home) ends the sequence's pause ``refused`` and frees its KV (``Node.refused``),
        as a node refusing the turn itself would; sent before the workload hears of the
        refusal, so it arrives before the workload's own release or cancel."""
        j = self.home.get(req.seq_id)
        if j is not None:
            self._send(j, "refused", req)

    def _send(self, node: int, op: str, *args: Any) -> None:
        call = getattr(self.nodes[node], op)
        if self.delay_s <= 0:
            call(*args)
            return
        self.env.timeout(self.delay_s).callbacks.append(lambda _ev: call(*args))

    def _refuse(self, req: Request) -> None:
        self.rejected += 1
        req.status = REJECTED
        req.finish_reason = BY_ROUTER
        req.finish_s = self.env.now
        self._tell_home_refused(req)
        if self.on_rejected is not None:
            self.on_rejected(req)
        if req.on_done is not None:
            req.on_done(req)
