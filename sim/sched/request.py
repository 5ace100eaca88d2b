"""One LLM call (a turn of a trajectory) as the scheduler and the KV manager see it.

Responsibility: the state of a request (vLLM V1 style: ``num_tokens`` known tokens,
``num_computed`` of them with KV; a request needs no separate prefill/decode phase, its
computed tokens simply catch up with its tokens) and the token content behind it, as
spans, so a prefix cache can match it without one Python int per token.

Invariants: ``0 <= num_computed <= num_tokens = prompt_tokens + num_output``;
``num_output <= output_limit <= max_output_tokens``; ``prompt_tokens + output_limit`` is
within the context window once the scheduler accepted the request; ``num_computed`` only decreases on preemption (to 0)
and ``num_output`` never decreases. Times are set by the engine (the scheduler never sees
a clock); ``None`` means "not yet".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sim.prefix.spans import Segments, concat, segments, slice_tokens

WAITING, RUNNING, FINISHED, REJECTED, CANCELLED = range(5)
STATUS_NAMES = ("waiting", "running", "finished", "rejected", "cancelled")
#: why a request ended (requests.parquet ``finish_reason``; null while unfinished):
#: ``stop`` generated its whole target, ``length`` cut by the context window,
#: ``rejected_too_long`` its prompt leaves no room for one output token in the window,
#: ``rejected_never_fits`` it can never fit the KV pool, ``cancelled`` a pruned branch,
#: ``rejected_by_router`` a cluster router refused it (``ttft_estimate`` above its SLO)
FINISH_REASONS = (
    "stop",
    "length",
    "rejected_too_long",
    "rejected_never_fits",
    "cancelled",
    "rejected_by_router",
)
STOP, LENGTH, TOO_LONG, NEVER_FITS, CANCELLED_REASON, BY_ROUTER = FINISH_REASONS
#: the finish reasons that are rejections (summary.json ``rejected_by_reason``)
REJECT_REASONS = (TOO_LONG, NEVER_FITS, BY_ROUTER)


class Request:
    """A prompt of ``prompt_tokens`` (the whole context) and ``max_output_tokens`` to generate."""

    __slots__ = (
        "req_id",  # run-wide id, in submission order
        "seq_id",  # the KV sequence it reads and extends (a trajectory branch's context)
        "traj_id",  # owning trajectory (-1 for none)
        "turn",  # turn index within the trajectory branch
        "branch",  # 0 for the main line, i > 0 for the i-th forked branch of a trajectory
        "branch_id",  # unique within the trajectory: 0 the main line, forks number 1, 2, ...
        "parent_branch_id",  # the branch it forked from (-1 on the main line)
        "depth",  # fork nesting: 0 on the main line, parent's depth + 1 in a branch
        "prompt_tokens",  # context length at submission: every token before the first output
        "max_output_tokens",  # the sampled target: tokens the model would generate (>= 1)
        "output_limit",  # tokens it may generate: the target, cut at the context window
        "content",  # prompt content as normal segments, or None when content is not tracked
        "output_id",  # content id of the generated tokens (a fresh id per request)
        "last_turn",  # True: the sequence is released when this request finishes
        "arrival_s",  # submission time
        "status",
        "finish_reason",  # None while queued/running; see FINISH_REASONS
        "num_computed",  # tokens whose KV is resident (vLLM num_computed_tokens)
        "num_output",  # tokens generated so far
        "preemptions",  # times this request was preempted (recompute)
        "lookup_tokens",  # tokens looked up in a prefix cache before any preemption (F17 denominator)
        "hit_tokens",  # of those, tokens served from the cache (F17 numerator)
        "preempted_lookup_tokens",  # tokens looked up again after a preemption (vLLM apart)
        "preempted_hit_tokens",  # of those, tokens served from the cache
        "held_tokens",  # tokens already resident in its own sequence at first admission
        "remote_tokens",  # prompt tokens whose KV a prefill instance computed and shipped
        "admitted_s",  # first admission
        "queued_s",  # the step boundary at which the engine received it (vLLM's queued_ts)
        "scheduled_s",  # when the plan that first admitted it was made (vLLM's scheduled_ts)
        "first_token_s",
        "finish_s",
        "last_emit_step",  # engine step index of the latest token (-1 before the first)
        "itl_max_s",  # largest inter-token gap so far
        "on_done",  # callback(request) when it finishes, is rejected or cancelled
        "tag",  # free slot for the workload (its trajectory object)
        "tool_name",  # the tool called after this turn (per-tool wait statistics)
        "next_pause_s",  # the true wait of that tool call (oracle prediction); None = unknown
        "spec_drafts",  # draft tokens in the verify scheduled now (0: none; speculative decoding)
        "spec_credit",  # expected accepted drafts not yet taken, in [0, 1) (sched.speculative)
        "hint",  # the harness's KV hint for the pause after this turn (a sim.policy.KVHint)
        # a decode cohort's member (sim.sched.cohort): the cohort's tick when it joined
        # (its counters above are then its counts at that tick), its entry there, and its
        # place in the running order
        "_joined",
        "_entry",
        "_serial",
    )

    def __init__(
        self,
        req_id: int,
        seq_id: Any,
        prompt_tokens: int,
        max_output_tokens: int,
        arrival_s: float = 0.0,
        *,
        content: Segments | None = None,
        output_id: Any = None,
        traj_id: int = -1,
        turn: int = 0,
        branch: int = 0,
        last_turn: bool = True,
        on_done: Callable[[Request], object] | None = None,
        tag: Any = None,
        tool_name: str = "tool",
        next_pause_s: float | None = None,
        hint: Any = None,
        branch_id: int = 0,
        parent_branch_id: int = -1,
        depth: int = 0,
    ) -> None:
        if prompt_tokens < 1 or max_output_tokens < 1:
            raise ValueError(
                f"request {req_id}: prompt and output must be >= 1 token, got "
                f"{prompt_tokens} and {max_output_tokens}"
            )
        self.req_id = req_id
        self.seq_id = seq_id
        self.traj_id = traj_id
        self.turn = turn
        self.branch = branch
        self.branch_id = branch_id
        self.parent_branch_id = parent_branch_id
        self.depth = depth
        self.prompt_tokens = prompt_tokens
        self.max_output_tokens = max_output_tokens
        self.output_limit = max_output_tokens
        self.content = content
        self.output_id = output_id if output_id is not None else f"o:{req_id}"
        self.last_turn = last_turn
        self.arrival_s = arrival_s
        self.status = WAITING
        self.finish_reason: str | None = None
        self.num_computed = 0
        self.num_output = 0
        self.preemptions = 0
        self.lookup_tokens = 0
        self.hit_tokens = 0
        self.preempted_lookup_tokens = 0
        self.preempted_hit_tokens = 0
        self.held_tokens = 0
        self.remote_tokens = 0
        self.admitted_s: float | None = None
        self.queued_s: float | None = None
        self.scheduled_s: float | None = None
        self.first_token_s: float | None = None
        self.finish_s: float | None = None
        self.last_emit_step = -1
        self.itl_max_s = 0.0
        self.on_done = on_done
        self.tag = tag
        self.tool_name = tool_name
        self.next_pause_s = next_pause_s
        self.spec_drafts = 0
        self.spec_credit = 0.0
        self.hint = hint  # sched sits below sim.policy: typed there (KVHint), None = no hint
        self._joined = 0
        self._entry: Any = None
        self._serial = 0

    # ------------------------------------------------------------------ state
    @property
    def num_tokens(self) -> int:
        """Known tokens: the prompt and every token sampled so far."""
        return self.prompt_tokens + self.num_output

    @property
    def remaining_output(self) -> int:
        return self.output_limit - self.num_output

    def cap_output(self, max_model_len: int | None) -> None:
        """Cut the output where prompt + output reaches the context window (vLLM stops
        generation there with finish reason ``length``)."""
        if max_model_len is not None:
            self.output_limit = min(self.max_output_tokens, max_model_len - self.prompt_tokens)

    def finish(self) -> None:
        """Mark the request finished: ``stop`` when it generated its whole target (the
        model's natural end), ``length`` when the context window cut it."""
        self.status = FINISHED
        self.finish_reason = STOP if self.num_output >= self.max_output_tokens else LENGTH

    def end(self, status: int, reason: str) -> None:
        """End the request without finishing it (rejected or cancelled)."""
        self.status = status
        self.finish_reason = reason

    @property
    def is_decode(self) -> bool:
        """One token to compute, and it is a sampled one (not the end of a prompt)."""
        return self.num_output > 0 and self.num_computed + 1 == self.num_tokens

    # ------------------------------------------------------------------ content
    def content_slice(self, start: int, stop: int) -> Segments | None:
        """Content of tokens ``[start, stop)`` (prompt, then generated tokens)."""
        if self.content is None:
            return None
        p = self.prompt_tokens
        if stop <= p:
            return slice_tokens(self.content, start, stop)
        oid = self.output_id
        if start >= p and stop > start and type(oid) in (int, str):
            return ((oid, start - p, stop - start),)  # generated tokens only: already normal
        out = segments([(oid, max(0, start - p), stop - max(start, p))])
        if start >= p:
            return out
        return concat(slice_tokens(self.content, start, p), out)

    def __repr__(self) -> str:
        return (
            f"Request(#{self.req_id} seq={self.seq_id!r} {STATUS_NAMES[self.status]} "
            f"computed={self.num_computed}/{self.num_tokens} out={self.num_output}/"
            f"{self.max_output_tokens})"
        )
