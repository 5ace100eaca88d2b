"""Where the runs of a sweep go: this process, a local process pool, or a Dask cluster.

One interface, ``Executor.run(fn, tasks)``: it submits every task and yields
``(index, result)`` as each finishes, in completion order. ``Executor.run_chains(fn,
tasks, follow)`` runs chains of dependent tasks (a capacity search's replications): each
task of ``tasks`` starts a chain, and as soon as a task finishes, ``follow(task, result)``
gives its chain's next task (None: the chain ends), submitted at once, so a worker never
waits for the other chains' tasks to finish; it yields ``(task, result)`` in completion
order. ``Executor.warm(fn, arg)`` starts the workers and runs ``fn(arg)`` once on
each without waiting (imports ahead of the first task). ``fn`` must be a module-level
function (it is pickled to the workers) that never raises for a bad task (a failed run is
a result with an ``error``); an exception from the executor itself is infrastructure: a
worker process that died (killed, out of memory) or a lost cluster, raised as
``WorkerLost`` once the tasks still running cannot finish. Kinds:

- ``inline``: this process, one task after the other (tests, one worker).
- ``local``: ``concurrent.futures.ProcessPoolExecutor`` with ``workers`` processes.
- ``dask``: ``distributed.Client(address)``, or a ``LocalCluster(n_workers=workers,
  threads_per_worker=1, processes=True, dashboard_address=None)`` started here and closed
  with the executor. Needs ``dask[distributed]`` (the ``dev`` extra); without it, a
  one-line ``KvsimError``.

Invariant: an executor is a context manager that leaves no process behind when it exits
(also on an error or Ctrl-C): its workers, and multiprocessing's forkserver and resource
tracker (``stop_helper_processes``); results are never lost once yielded.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sim.errors import KvsimError

#: ``run_chains``' ``follow(task, result)``: the chain's next task, or None when it ends
Follow = Callable[[Any, Any], Any]

#: the executor kinds ``kvsim sweep --executor`` accepts
EXECUTORS = ("local", "dask")


class WorkerLost(KvsimError):
    """A worker process died or the cluster went away: some tasks did not finish."""


class Executor:
    """Runs tasks and yields their results as they finish (see the module docstring)."""

    kind = "inline"
    workers = 1

    def run(self, fn: Callable[[Any], Any], tasks: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        for i, task in enumerate(tasks):
            yield i, fn(task)

    def run_chains(self, fn: Callable[[Any], Any], tasks: Sequence[Any],
                   follow: Follow) -> Iterator[tuple[Any, Any]]:  # fmt: skip
        """Chains of tasks (see the module docstring); here one task after the other, in
        the order they become ready."""
        ready = deque(tasks)
        while ready:
            task = ready.popleft()
            result = fn(task)
            nxt = follow(task, result)
            if nxt is not None:
                ready.append(nxt)
            yield task, result

    def warm(self, fn: Callable[[Any], Any], arg: Any) -> None:
        """Start the workers now and run ``fn(arg)`` once on each, without waiting (a head
        start: imports done while the caller prepares its first tasks); once per executor;
        here, nothing."""

    def close(self) -> None:
        """Stop the workers (idempotent)."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalExecutor(Executor):
    """A pool of worker processes on this machine."""

    kind = "local"

    def __init__(self, workers: int) -> None:
        from concurrent.futures import ProcessPoolExecutor

        self.workers = workers
        # forkserver: no fork of a process that holds threads (progress bars, Dask)
        methods = multiprocessing.get_all_start_methods()
        ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
        self._pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx)
        self._warmed = False

    def run(self, fn, tasks):
        from concurrent.futures import as_completed
        from concurrent.futures.process import BrokenProcessPool

        futures = {self._pool.submit(fn, task): i for i, task in enumerate(tasks)}
        done = 0
        try:
            for fut in as_completed(futures):
                try:
                    result = fut.result()
                except BrokenProcessPool:
                    raise WorkerLost(_lost(len(futures) - done)) from None
                done += 1
                yield futures[fut], result
        finally:
            for fut in futures:
                fut.cancel()

    def warm(self, fn, arg):
        if self._warmed:
            return
        self._warmed = True
        for _ in range(self.workers):  # the pool starts a worker per task it cannot place
            self._pool.submit(fn, arg)

    def run_chains(self, fn, tasks, follow):
        from concurrent.futures import FIRST_COMPLETED, wait
        from concurrent.futures.process import BrokenProcessPool

        pending = {self._pool.submit(fn, task): task for task in tasks}
        try:
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    task = pending.pop(fut)
                    try:
                        result = fut.result()
                    except BrokenProcessPool:
                        raise WorkerLost(_lost(len(pending) + 1)) from None
                    nxt = follow(task, result)
                    if nxt is not None:  # the worker just freed takes the chain's next task
                        pending[self._pool.submit(fn, nxt)] = nxt
                    yield task, result
        finally:
            for fut in pending:
                fut.cancel()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        stop_helper_processes()


class DaskExecutor(Executor):
    """A Dask cluster: the one at ``address``, or a LocalCluster of ``workers`` processes."""

    kind = "dask"

    def __init__(self, workers: int, address: str | None = None) -> None:
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise KvsimError(
                "--executor dask needs dask[distributed]: pip install 'dask[distributed]' "
                "(it comes with the dev extra: pip install -e '.[dev]')"
            ) from None
        self.workers = workers
        self._cluster = None
        try:
            if address:
                self._client = Client(address, timeout="10s")
            else:
                self._cluster = LocalCluster(
                    n_workers=workers,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                    # no dashboard, and the scheduler's remaining HTTP routes on a free
                    # local port rather than 8787 (taken when several sweeps or test
                    # workers run at once: "Port 8787 is already in use")
                    scheduler_kwargs={"dashboard": False, "dashboard_address": "127.0.0.1:0"},
                )
                self._client = Client(self._cluster)
        except OSError as exc:
            self.close()
            raise KvsimError(f"--scheduler-address {address}: cannot connect: {exc}") from None

    def run(self, fn, tasks):
        from distributed import as_completed

        futures = self._client.map(fn, list(tasks), pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        done = 0
        try:
            for fut in as_completed(futures):
                try:
                    result = fut.result()
                except Exception as exc:  # KilledWorker, a lost scheduler: infrastructure
                    raise WorkerLost(_lost(len(futures) - done, exc)) from None
                done += 1
                yield index[fut.key], result
        finally:
            for fut in futures:
                fut.cancel()

    def run_chains(self, fn, tasks, follow):
        from distributed import as_completed

        futures = {}
        for task in tasks:
            fut = self._client.submit(fn, task, pure=False)
            futures[fut.key] = (fut, task)
        ac = as_completed([f for f, _ in futures.values()])
        try:
            for fut in ac:
                _, task = futures.pop(fut.key)
                try:
                    result = fut.result()
                except Exception as exc:  # KilledWorker, a lost scheduler: infrastructure
                    raise WorkerLost(_lost(len(futures) + 1, exc)) from None
                nxt = follow(task, result)
                if nxt is not None:
                    new = self._client.submit(fn, nxt, pure=False)
                    futures[new.key] = (new, nxt)
                    ac.add(new)
                yield task, result
        finally:
            for fut, _ in futures.values():
                fut.cancel()

    def close(self) -> None:
        client, cluster = getattr(self, "_client", None), self._cluster
        self._client = self._cluster = None
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
            stop_helper_processes()


def stop_helper_processes() -> None:
    """Stop and reap multiprocessing's helper processes (the forkserver the local pool's
    workers are forked from, the resource tracker both executors start), so that none is
    left in the process group once the executor is closed: left alone, they end only
    after this process does, as zombies until the system reaps them. Both are started
    again on demand by the next pool. ``_stop`` is CPython's own (3.8 and later); a Python
    without it keeps the old behaviour."""
    from multiprocessing import forkserver, resource_tracker

    for helper in (getattr(forkserver, "_forkserver", None),
                   getattr(resource_tracker, "_resource_tracker", None)):  # fmt: skip
        stop = getattr(helper, "_stop", None)
        if stop is not None:
            try:
                stop()
            except (OSError, ChildProcessError):  # already gone
                pass


def _lost(n: int, exc: BaseException | None = None) -> str:
    why = f" ({type(exc).__name__}: {exc})" if exc is not None else ""
    line = why.splitlines()[0] if why else ""
    return f"a worker process died{line}; {n} task(s) did not finish"


def default_workers() -> int:
    """Worker processes by default: the CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def make_executor(kind: str = "local", workers: int | None = None, address: str | None = None) -> Executor:
    """An executor of ``kind`` (``inline``, ``local`` or ``dask``) with ``workers`` processes."""
    if workers is not None and not 1 <= workers <= 4096:
        raise KvsimError(f"--workers must be in [1, 4096], got {workers}")
    n = workers or default_workers()
    if address and kind != "dask":
        raise KvsimError("--scheduler-address needs --executor dask")
    if kind == "inline":
        return Executor()
    if kind == "local":
        return LocalExecutor(n)
    if kind == "dask":
        return DaskExecutor(n, address)
    raise KvsimError(f"--executor {kind!r}: valid: {', '.join(EXECUTORS)}")
