"""What every workload process shares: the environment, the node, RNG streams, run-wide ids.

Responsibility: hand out request, sequence and content ids (from the run, never from
class-level counters), build requests with their completion events, count trajectories
that started and ended, and tell the node when the last one has ended. ``call_submitted``
is a hook (a no-op here) through which ``kvsim workload sample`` lists a trajectory's calls. ``label`` names
the workload in the ``workload`` column of the request and trajectory tables (the kind, or
a ``mix`` component's name; ``sim.workload.mix`` makes one context per component).

Invariant: ids are consecutive integers in creation order; ``ended <= started <= total``
(a driver that starts or ends more trajectories than its kind's ``count`` said is refused
at once, in one line naming the kind and both numbers: ``miscounted``);
``node.workload_finished()`` is called exactly once, after the last trajectory ended.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from sim.errors import KvsimError
from sim.sched.request import Request
from sim.workload.billing import NO_BILL, Bill
from sim.workload.rng import Streams

#: how a trajectory ends (trajectories.parquet ``status``): every turn done, a request
#: refused or a branch set lost, or the harness out of context (``context_limit``)
TRAJECTORY_STATUSES = ("completed", "failed", "context_exhausted")


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
        #: the ``workload`` column of every request and trajectory this context records
        self.label = ""
        #: the workload kind whose driver runs on this context (set by its registered
        #: driver, ``sim.workload.kinds``; named by ``miscounted``)
        self.kind = ""
        #: where this workload's config sits in the scenario (named by config errors)
        self.field_prefix = "workload"
        #: (context, SimPy process) of each driver started on this context's behalf (a
        #: ``mix``'s components, ``sim.workload.mix``): ``sim.run`` checks each against
        #: its own count after the run, as it checks the workload's own driver
        self.component_drivers: list[tuple[WorkloadContext, Any]] = []
        self._req_ids = itertools.count()
        self._seq_ids = itertools.count()
        self._content_ids = itertools.count()

    # ------------------------------------------------------------------ ids
    def new_seq(self) -> int:
        return next(self._seq_ids)

    def new_content(self, kind: str) -> str:
        """A content id no other token shares."""
        return f"{kind}:{next(self._content_ids)}"

    def shared_id(self, name: int | str) -> int | str:
        """The content id of shared content (a system prompt, a trace's block): ``name``
        itself; a ``mix`` component's context keeps its components apart."""
        return name

    def set_total(self, total: int) -> None:
        """The trajectory count, when the driver learns it (a trace replayed whole)."""
        self.total = total

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
        tool_name: str = "tool",
        branch_id: int = 0,
        parent_branch_id: int = -1,
        depth: int = 0,
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
            tag=self.label,
            tool_name=tool_name,
            branch_id=branch_id,
            parent_branch_id=parent_branch_id,
            depth=depth,
        )

    def call_submitted(self, req: Request, tool: str | None, user_turn: int) -> None:
        """A trajectory's call ``req`` is being submitted; ``tool`` is the tool called after
        it (None: a fork or the end follows), ``user_turn`` the user turn it serves. A no-op
        in a run; ``sim.workload.sample`` records the calls through it."""

    def submit_and_wait(self, req: Request):
        """Submit ``req``; returns an event that fires (with the request) when it ends."""
        done = self.env.event()
        req.on_done = done.succeed
        self.node.submit(req)
        return done

    # ------------------------------------------------------------ lifecycle
    def trajectory_started(self) -> int:
        if self.started >= self.total:
            raise self.miscounted(f"started more (trajectory {self.started + 1})")
        self.started += 1
        return self.started - 1

    def trajectory_ended(self, row: tuple, completed: bool, label: str | None = None) -> None:
        """Record a trajectory's row (under ``label``, default this context's); the last one
        ends the workload."""
        if self.ended >= self.total:
            raise self.miscounted(f"ended more (trajectory {self.ended + 1})")
        self.rec.trajectory(row, self.label if label is None else label)
        self.ended += 1
        self.completed += completed
        if self.ended == self.total:
            self.node.workload_finished()

    def miscounted(self, what: str) -> KvsimError:
        """The one-line refusal of a driver that disagrees with its kind's ``count``:
        ``what`` says what the driver did (``started more (trajectory 5)``)."""
        where = "" if self.field_prefix == "workload" else f" ({self.field_prefix})"
        return KvsimError(
            f"workload kind {self.kind or self.label!r}{where}: its count says {self.total} "
            f"trajectories but its driver {what}; count(cfg) must be the number of "
            "trajectories the driver starts and ends (docs/plugins.md)"
        )

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
    *,
    depth: int = 0,
    pruned: int = 0,
    bill: Bill | None = None,
) -> tuple:
    """A row of ``TRAJECTORY_COLUMNS`` (hold byte-seconds are filled in by the run);
    ``bill`` is the provider view's (``workload.provider_cache``), None without one."""
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
        depth,
        pruned,
        *(NO_BILL if bill is None else bill.row()),
    )
