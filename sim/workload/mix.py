"""``mix``: several workloads on one engine, each with its own arrival process.

Responsibility: run every component of a ``mix`` config (any registered workload kind but
``mix``) through its own driver, each with a ``ComponentContext``: the run's context as
seen by one component. It shares the run's environment, node, recorder and id counters,
and its trajectory counts feed the run's (the node hears ``workload_finished`` once, after
the last trajectory of the last component); it differs in four ways:

- trajectory ids are offset by the counts of the components before it, so ids stay unique
  across the mix (component k's trajectory i is ``offset_k + i``);
- random streams are the run's streams named ``"<label>/<stream>"``, so adding a component
  or changing one never moves another's draws;
- shared content ids (``shared_id``: system prompts, trace blocks) are prefixed with the
  label, so two components never share a prefix by accident of naming;
- its ``label`` (the component's name) fills the ``workload`` column of its requests and
  trajectories.

Invariant: the run's trajectory total is the sum of the components' totals; every
component's driver is built (traces read, times drawn) before the simulation runs.
"""

from __future__ import annotations

from sim.workload.context import WorkloadContext
from sim.workload.kinds import workload_kind


class ComponentContext(WorkloadContext):
    """The run's context as one ``mix`` component sees it (see the module docstring)."""

    def __init__(
        self, parent: WorkloadContext, index: int, label: str, traj_offset: int, total: int
    ):
        # the shared state is the parent's; only the view's own fields are set here
        self.parent = parent
        self.env, self.node, self.rec = parent.env, parent.node, parent.rec
        self.base_dir, self.context_window = parent.base_dir, parent.context_window
        self.label = label
        self.kind = ""  # set by the component's registered driver
        self.field_prefix = f"{parent.field_prefix}.components.{index}"
        self.traj_offset = traj_offset
        self.total = total
        self.started = self.ended = self.completed = 0
        self.component_drivers = []  # a component runs no driver of its own behalf

        def streams(name: str):
            return parent.streams(f"{label}/{name}")

        self.streams = streams

    # ids come from the run, so they are unique across components
    def new_seq(self) -> int:
        return self.parent.new_seq()

    def new_content(self, kind: str) -> str:
        return self.parent.new_content(kind)

    def shared_id(self, name: int | str) -> str:
        return f"{self.label}/{name}"

    def request(self, seq, prompt_tokens, output_tokens, content, *, traj_id: int, **kw):
        req = self.parent.request(
            seq, prompt_tokens, output_tokens, content, traj_id=traj_id + self.traj_offset, **kw
        )
        req.tag = self.label
        return req

    def call_submitted(self, req, tool, user_turn) -> None:
        self.parent.call_submitted(req, tool, user_turn)

    def trajectory_started(self) -> int:
        if self.started >= self.total:
            raise self.miscounted(f"started more (trajectory {self.started + 1})")
        self.started += 1
        self.parent.trajectory_started()
        return self.started - 1

    def trajectory_ended(self, row: tuple, completed: bool) -> None:
        if self.ended >= self.total:
            raise self.miscounted(f"ended more (trajectory {self.ended + 1})")
        self.ended += 1
        self.completed += completed
        row = (row[0] + self.traj_offset, *row[1:])
        self.parent.trajectory_ended(row, completed, self.label)

    def __repr__(self) -> str:
        return (
            f"<ComponentContext {self.label!r} offset={self.traj_offset} "
            f"started={self.started} ended={self.ended}/{self.total}>"
        )


def mix_count(cfg) -> int:
    """The trajectory count known from the config (the drivers may raise it: a whole trace)."""
    return sum(workload_kind(c.kind).count(c) for c in cfg.components)


def mix_driver(cfg, ctx: WorkloadContext):
    """Build every component's driver now; the returned generator starts them all at t=0."""
    drivers, views, offset = [], [], 0
    for i, (label, comp) in enumerate(zip(cfg.labels(), cfg.components, strict=True)):
        kind = workload_kind(comp.kind)
        view = ComponentContext(ctx, i, label, offset, kind.count(comp))
        drivers.append(kind.driver(comp, view))
        views.append(view)
        offset += view.total
    ctx.set_total(offset)
    return _start_all(ctx, views, drivers)


def _start_all(ctx: WorkloadContext, views: list[ComponentContext], drivers: list):
    """Start every component's driver, each its own process (kept in ``ctx.component_drivers``: a
    component's driver still running when its trajectories have all ended is refused
    after the run, naming the component, as a single kind's is)."""
    for view, driver in zip(views, drivers, strict=True):
        ctx.component_drivers.append((view, ctx.env.process(driver)))
    return
    yield  # a generator, like every workload driver
