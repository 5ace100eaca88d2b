"""The decision job of a pause: what the engine knows -> ``PauseFacts`` -> the policy.

Responsibility: build the facts a policy sees at a tool call (the context's bytes per GPU
and in total, the predicted wait, HBM pressure, the links, the prefill rate and the
recompute FLOPs, free host/NVMe room, the step's swap budget) and ask the scenario's
policy (``sim.policy``); learn tool waits as they are observed.

Invariant: facts are read from the KV manager and the scheduler only (never an
allocator); the policy is called once per pause, with facts of that moment, and its
answer is a ``Decision`` (anything else: one line naming the policy, O(1) per pause);
the running batch's bytes (O(running)) are summed only for a policy that
``reads_running_batch``.
"""

from __future__ import annotations

from typing import Any

from sim.errors import KvsimError
from sim.memory.kv_manager import KVManager
from sim.memory.tiers import FramePool
from sim.policy import ACTIONS, Decision, PauseFacts, PausePolicy, WaitPredictor, make_policy
from sim.sched import Request, Scheduler
from sim.sizing import layer_group_counts, model_prefill_flops


class PauseDecider:
    """Facts for a pause and the policy's answer."""

    def __init__(self, options: Any, resolved: Any, cost: Any) -> None:
        self.policy = make_policy(options)
        p = options.predictor
        self.predictor = WaitPredictor(
            p.mode, quantile=p.quantile, window=p.window, prior_wait_s=p.prior_wait_s
        )
        self.oracle = p.mode == "oracle"
        self.model = resolved.model
        self._layer_counts = layer_group_counts(resolved.model)  # F23's terms, built once
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
        self.params = cfg.params or resolved.model.active_params
        self.attention = cfg.attention_flops
        self.prefill_rate = cfg.mfu_prefill * cost.peak * cost.tp
        self._budget = (-1.0, 0.0)  # (step end, link bytes per GPU left): min_waste's budget

    def decide(self, facts: PauseFacts) -> Decision:
        """The policy's answer, checked where it enters the engine: a ``Decision`` (a
        plug-in's ``None`` or action name is a one-line ``KvsimError`` naming it)."""
        d = self.policy.decide(facts)
        if d.__class__ is not Decision and not isinstance(d, Decision):
            raise not_a_decision(self.policy, d)
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
        running = self.running_bytes(req, sched, block) if self.policy.reads_running_batch else 0.0
        total = self.held_bytes(tokens, block)
        dense = self.groups is None and not self.saved_bpt
        per_gpu = tokens * self.bpt_gpu if dense else total / self.num_gpus
        return PauseFacts(
            tokens=tokens,
            state_bytes_per_gpu=per_gpu,
            state_bytes_total=total,
            predicted_wait_s=wait,
            hbm_free_fraction=min(1.0, max(0.0, free)),
            link_bw_bytes_per_s=t.link_bw_bytes_per_s,
            prefill_flops_per_s=self.prefill_rate,
            recompute_flops=self.recompute_flops(tokens),
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

    def running_bytes(self, req: Request, sched: Scheduler, block_size: int) -> float:
        """KV of the running requests but ``req``, each as ``held_bytes`` counts it
        (O(running): summed only for a policy that ``reads_running_batch``)."""
        if self.groups is None:
            tokens: int = sum(r.num_computed for r in sched.running if r is not req)
            return float(tokens * self.table_bpt)  # an int times a float, as before
        return sum(self.held_bytes(r.num_computed, block_size) for r in sched.running if r is not req)

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

    def recompute_flops(self, tokens: int) -> float:
        """FLOPs to rebuild ``tokens`` of context by prefill (F30, F23 with attention, by
        layer group: windows over their window, state layers linear in tokens)."""
        if tokens <= 0:
            return 0.0
        return model_prefill_flops(
            self.model, tokens, self.params, self.attention, self._layer_counts
        )


def not_a_decision(policy: PausePolicy, got: object) -> KvsimError:
    """The refusal of a policy's answer that is not a ``Decision``, naming the policy."""
    cls = type(policy)
    shown = repr(got) if len(repr(got)) <= 60 else repr(got)[:57] + "..."
    return KvsimError(
        f"pause policy {policy.name!r} ({cls.__module__}.{cls.__qualname__}) "
        f"returned {type(got).__name__} {shown} from decide; it must return a "
        f"sim.policy.Decision (action one of: {', '.join(ACTIONS)})"
    )


def free_bytes(pool: FramePool | None) -> float:
    """Free bytes a state is sure to fit in (one frame of rounding kept back)."""
    if pool is None:
        return 0.0
    return max(0, pool.free_frames - 1) * pool.frame_bytes
