"""What every workload process shares: the environment, the node, RNG streams, run-wide ids.

Responsibility: hand out request, sequence and content ids (from the run, never from
class-level counters), build requests with their completion events, count trajectories
that started and ended, and tell the node when the last one has ended.

Invariant: ids are consecutive integers in creation order; ``ended <= started <= total``;
``node.workload_finished()`` is called exactly once, after the last trajectory ended.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from sim.sched.request import Request
from sim.workload.rng import Streams


class WorkloadContext:
    """Shared state of the workload processes of one run."""

    def __init__(
        self,
        env,
        node,
        streams: Streams,
        recorder,
        base_dir: Path,
        total_trajectories: int,
        context_window: int | None = None,
    ) -> None:
        self.env, self.node, self.streams, self.rec = env, node, streams, recorder
        self.base_dir = base_dir
        self.total = total_trajectories
        #: the model's context window as the server enforces it (scheduler.max_model_len);
        #: None = no window. Harnesses (``workload.context_limit``) act on it.
        self.context_window = context_window
        self.started = 0
        self.ended = 0
        self.completed = 0  # trajectories that finished every turn
        self._req_ids = itertools.count()
        self._seq_ids = itertools.count()
        self._content_ids = itertools.count()

    # ------------------------------------------------------------------ ids
    def new_seq(self) -> int:
        return next(self._seq_ids)

    def new_content(self, kind: str) -> str:
        """A content id no other token shares."""
        return f"{kind}:{next(self._content_ids)}"

    def request(
        self,
        seq: int,
        prompt_tokens: int,
        output_tokens: int,
        content,
        *,
        traj_id: int,
        turn: int = 0,
        branch: int = 0,
        last_turn: bool = True,
        on_done=None,
        next_pause_s: float | None = None,
    ) -> Request:
        """A new request arriving now."""
        rid = next(self._req_ids)
        return Request(
            rid,
            seq,
            int(prompt_tokens),
            int(output_tokens),
            self.env.now,
            content=content,
            output_id=f"o:{rid}",
            traj_id=traj_id,
            turn=turn,
            branch=branch,
            last_turn=last_turn,
            on_done=on_done,
            next_pause_s=next_pause_s,
        )

    def submit_and_wait(self, req: Request):
        """Submit ``req``; returns an event that fires (with the request) when it ends."""
        done = self.env.event()
        req.on_done = done.succeed
        self.node.submit(req)
        return done

    # ------------------------------------------------------------ lifecycle
    def trajectory_started(self) -> int:
        self.started += 1
        return self.started - 1

    def trajectory_ended(self, row: tuple, completed: bool) -> None:
        """Record a trajectory's row; the last one ends the workload."""
        self.rec.trajectory(row)
        self.ended += 1
        self.completed += completed
        if self.ended == self.total:
            self.node.workload_finished()

    def resolve(self, path: str) -> Path:
        p = Path(path).expanduser()
        return p if p.is_absolute() else self.base_dir / p

    @property
    def now(self) -> float:
        return self.env.now

    def __repr__(self) -> str:
        return f"<WorkloadContext started={self.started} ended={self.ended}/{self.total}>"


def trajectory_row(
    traj_id: int,
    kind: str,
    start_s: float,
    end_s: float,
    status: str,
    turns: int,
    requests: list[Any],
    branches: int,
    pause_s: float,
    compactions: int = 0,
) -> tuple:
    """A row of ``TRAJECTORY_COLUMNS`` (hold byte-seconds are filled in by the run)."""
    out = sum(r.num_output for r in requests)
    look = sum(r.lookup_tokens for r in requests)
    hit = sum(r.hit_tokens for r in requests)
    return (
        traj_id,
        kind,
        start_s,
        end_s,
        status,
        turns,
        len(requests),
        branches,
        out,
        look,
        hit,
        pause_s,
        compactions,
        float("nan"),
    )
