"""The decision job of a pause: what the engine knows -> ``PauseFacts`` -> the policy.

Responsibility: build the facts a policy sees at a tool call (the context's bytes per GPU
and in total, the predicted wait, HBM pressure, the links, the prefill rate, the recompute's
FLOPs and seconds, free host/NVMe room, the step's swap budget) and ask the scenario's
policy (``sim.policy``); learn tool waits as they are observed. A recompute is priced by
the run's own step pricer (the engine's ``CostModel``, calibration included), as that
prefill run alone in the scheduler's chunks (``recompute_price``): the facts' price the
whole context, a pause's record the suffix its next turn really recomputed over the prefix
still cached.

Invariant: facts are read from the KV manager and the scheduler only (never an
allocator); the policy is called once per pause, with facts of that moment, and its
answer is a ``Decision`` (anything else: one line naming the policy, O(1) per pause);
the running batch's bytes (O(running)) are summed only for a policy that
``reads_running_batch``.
"""

from __future__ import annotations

from typing import Any

from sim.errors import KvsimError, shown
from sim.memory.kv_manager import KVManager
from sim.memory.tiers import FramePool
from sim.policy import ACTIONS, Decision, PauseFacts, PausePolicy, WaitPredictor, make_policy
from sim.sched import Request, Scheduler


class PauseDecider:
    """Facts for a pause and the policy's answer."""

    def __init__(self, options: Any, resolved: Any, cost: Any) -> None:
        self.policy = make_policy(options)
        p = options.predictor
        self.predictor = WaitPredictor(
            p.mode, quantile=p.quantile, window=p.window, prior_wait_s=p.prior_wait_s
        )
        self.oracle = p.mode == "oracle"
        self.cost = cost  # the engine's own step pricer: recomputes are priced with it
        self.bpt_gpu = resolved.kv_bytes_per_token_per_gpu
        self.bpt = resolved.kv_bytes_per_token
        # a hybrid model's sequence holds its table tokens plus its side groups' blocks or
        # states, not every layer for every token (F1); None: a dense model, F1 exactly
        self.groups = resolved.kv_groups
        self.table_bpt = resolved.allocator_kv_bytes_per_token
        self.saved_bpt = resolved.saved_state_bytes_per_token  # mamba_cache_mode all
        self.num_gpus = resolved.num_gpus
        self.pool_bytes = resolved.pool_bytes
        self.tiers = resolved.tiers
        cfg = cost.config
        # F30's sustained rate: what a facts' recompute falls back on without a price
        self.prefill_rate = cfg.mfu_prefill * cost.peak * cost.tp
        self._budget = (-1.0, 0.0)  # (step end, link bytes per GPU left): min_waste's budget

    def decide(self, facts: PauseFacts) -> Decision:
        """The policy's answer, checked where it enters the engine: a ``Decision`` (a
        plug-in's ``None`` or action name is a one-line ``KvsimError`` naming it) whose
        ``reason`` and ``hint_refused`` are text (``str``: another type failed only when
        the run's pause table was written)."""
        d = self.policy.decide(facts)
        if d.__class__ is not Decision and not isinstance(d, Decision):
            raise not_a_decision(self.policy, d)
        if d.reason.__class__ is not str or d.hint_refused.__class__ is not str:
            raise not_text(self.policy, d)  # (the pause table's text columns)
        return d

    def observe(self, tool_name: str, wait_s: float) -> None:
        """A tool call's wait was seen (at its return)."""
        self.predictor.observe(tool_name, wait_s)

    def facts(
        self,
        req: Request,
        tokens: int,
        kv: KVManager,
        sched: Scheduler,
        pools: tuple[FramePool | None, FramePool | None],
        now: float,
        last_step_s: float,
    ) -> PauseFacts:
        """What the policy sees when ``req``'s turn ended with ``tokens`` of context."""
        t = self.tiers
        host, nvme = pools
        wait = req.next_pause_s if self.oracle else self.predictor.predict(req.tool_name)
        free = kv.free_bytes / self.pool_bytes if self.pool_bytes else 0.0
        block = kv.block_size or 1
        running = self.running_bytes(req, sched, block, kv) if self.policy.reads_running_batch else 0.0
        total = self.held_bytes(tokens, block)
        dense = self.groups is None and not self.saved_bpt
        per_gpu = tokens * self.bpt_gpu if dense else total / self.num_gpus
        recompute_s, recompute_flops = self.recompute_price(sched, 0, tokens)
        return PauseFacts(
            tokens=tokens,
            state_bytes_per_gpu=per_gpu,
            state_bytes_total=total,
            predicted_wait_s=wait,
            hbm_free_fraction=min(1.0, max(0.0, free)),
            link_bw_bytes_per_s=t.link_bw_bytes_per_s,
            prefill_flops_per_s=self.prefill_rate,
            recompute_flops=recompute_flops,
            recompute_priced_s=recompute_s,
            host_free_bytes=free_bytes(host),
            nvme_free_bytes=free_bytes(nvme),
            nvme_bw_bytes_per_s=t.nvme_bw_bytes_per_s if nvme is not None else 0.0,
            tool_name=req.tool_name,
            tool_min_wait_s=self.predictor.min_wait_s(req.tool_name),
            running_batch_bytes=running,
            swap_budget_bytes_per_gpu=self._swap_budget(now, last_step_s),
            hint=req.hint,
            pool_bytes=self.pool_bytes,
        )

    def running_bytes(
        self, req: Request, sched: Scheduler, block_size: int, kv: KVManager
    ) -> float:
        """KV of the running requests but ``req``, each as ``held_bytes`` counts it
        (O(running): summed only for a policy that ``reads_running_batch``); on a hybrid
        model a request in the middle of its prompt holds its side groups' blocks of the
        chunk it runs (``kv``'s ``step_of``: the window's ``w - 1`` tokens before the chunk
        and the chunk, as vLLM V1 allocates them), not the decode rule of its tokens."""
        if self.groups is None:
            tokens: int = sum(r.num_computed for r in sched.running if r is not req)
            return float(tokens * self.table_bpt)  # an int times a float, as before
        step_of = kv.step_of
        total = 0.0
        for r in sched.running:
            if r is req:
                continue
            step = step_of(r.seq_id)
            if step is None:
                total += self.held_bytes(r.num_computed, block_size)
            else:
                side = self.groups.step_side_bytes(step[0], step[1], block_size)
                total += float(r.num_computed * self.table_bpt + side)
        return total

    def held_bytes(self, tokens: int, block_size: int) -> float:
        """Bytes a sequence of ``tokens`` holds over the engine instance: every layer per
        token for a dense model (F1); for a hybrid one its block table's tokens plus its
        side groups' blocks (``block_size`` tokens each) or states (``KVGroups``); the
        states saved under ``mamba_cache_mode: all`` ride on the table's bytes per token."""
        if self.groups is None:  # table_bpt is bpt unless saved states are charged
            return float(tokens * self.table_bpt)
        return float(tokens * self.table_bpt + self.groups.side_bytes(tokens, block_size))

    def _swap_budget(self, now: float, last_step_s: float) -> float:
        """Link bytes per GPU the step that just ended could hide (shared by its pauses)."""
        end, left = self._budget
        if end != now:
            left = self.tiers.link_bw_bytes_per_s * last_step_s
            self._budget = (now, left)
        return left

    def recompute_price(self, sched: Scheduler, cached: int, tokens: int) -> tuple[float, float]:
        """(seconds, FLOPs over the replica) the run's step pricer charges to prefill
        ``tokens`` after ``cached`` tokens still in HBM, run alone in the chunks the
        scheduler would cut (``Scheduler.prefill_chunks``): each chunk attends over the
        cached prefix and the chunks before it, under the cost section's
        ``attention_mask`` (causal by default), with the calibration the run priced its
        steps with (``CostModel.prefill_alone``). (0.0, 0.0) for no tokens."""
        chunks = sched.prefill_chunks(cached, tokens) if tokens > 0 else ()
        price: tuple[float, float] = self.cost.prefill_alone(chunks, cached)
        return price


def not_a_decision(policy: PausePolicy, got: object) -> KvsimError:
    """The refusal of a policy's answer that is not a ``Decision``, naming the policy."""
    return KvsimError(
        f"{_named(policy)} returned {shown(got)} from decide; it must return a "
        f"sim.policy.Decision (action one of: {', '.join(ACTIONS)})"
    )


def not_text(policy: PausePolicy, got: Decision) -> KvsimError:
    """The refusal of a ``Decision`` whose ``reason`` or ``hint_refused`` is not a ``str``."""
    field, value = ("reason", got.reason) if got.reason.__class__ is not str else ("hint_refused", got.hint_refused)
    return KvsimError(
        f"{_named(policy)} returned a Decision whose {field} is {shown(value)}; it must "
        "be a str (one short phrase, recorded with the pause)"
    )


def _named(policy: PausePolicy) -> str:
    """``pause policy 'name' (module.Class)``: how a refusal names the policy."""
    cls = type(policy)
    return f"pause policy {policy.name!r} ({cls.__module__}.{cls.__qualname__})"


def free_bytes(pool: FramePool | None) -> float:
    """Free bytes a state is sure to fit in (one frame of rounding kept back)."""
    if pool is None:
        return 0.0
    return max(0, pool.free_frames - 1) * pool.frame_bytes
