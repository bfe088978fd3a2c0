"""Several cells at once in one process: concurrency is not process count.

A cell spends nearly all its time waiting: on the agent (the model, over the network) and
on its checks (child processes). So one process can run many cells at once in threads, and
N cells at once need not be N pytest processes, each importing pytest and the plugin.

pytest still runs items one after the other and reports them in order. The pool starts the
cells ahead of pytest: when pytest runs an item, the pool makes sure this item and the next
ones it knows of are submitted (at most `2 x size` ahead, `size` running at any time), then
waits for this item's record. A slow cell delays the *report* of the ones behind it, not
their run.

What "the next ones" are: without xdist, the rest of the session's items; under xdist, only
the item the worker was handed next (a worker's later queue can be stolen by another worker,
and a cell must never run twice), so each worker overlaps two cells.

Stopping (Ctrl-C, SIGTERM, the session's end): queued cells never start; running ones are
killed with their trees, and since a killed agent's record would read as the agent's own
failure, the result file of a cell stopped this way is removed, so a resume runs it again
(its spend stays on the ledger).
"""
from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

from pytest_ponybench.cell import workspace
from pytest_ponybench.processes import procs
from pytest_ponybench.store.record import CellRecord
from pytest_ponybench.store.rundir import records_dir


class Stopped(Exception):
    """The pool was stopped before or while this cell ran."""


class CellPool:
    def __init__(self, size: int):
        self.size = size
        self.executor = ThreadPoolExecutor(max_workers=size, thread_name_prefix="ponybench-cell")
        self.futures: dict[str, Future] = {}
        self.stopping = threading.Event()
        # The session's items and each one's position, to find the cells after the current one.
        self.indexed: list | None = None
        self.positions: dict[int, int] = {}

    def _job(self, run: Callable[[], CellRecord], workspace_dir) -> CellRecord:
        if self.stopping.is_set():
            raise Stopped("the session stopped before this cell started")
        record = run()
        if self.stopping.is_set():
            # Killed mid-way by the stop: this record describes the kill, not the agent.
            if workspace_dir is not None:
                (records_dir(workspace_dir) / f"{workspace.RESULT}.json").unlink(missing_ok=True)
            raise Stopped("the session stopped while this cell ran")
        return record

    def submit(self, key: str, run: Callable[[], CellRecord], workspace_dir=None) -> None:
        if key not in self.futures and not self.stopping.is_set():
            self.futures[key] = self.executor.submit(self._job, run, workspace_dir)

    def pending(self) -> int:
        return len(self.futures)

    def result(self, key: str, run: Callable[[], CellRecord], workspace_dir=None) -> CellRecord:
        """This cell's record (its exceptions, a skip included, re-raised here)."""
        self.submit(key, run, workspace_dir)
        return self.futures.pop(key).result()

    def stop(self) -> None:
        """Start no more cells and kill the running ones' trees."""
        self.stopping.set()
        self.executor.shutdown(wait=False, cancel_futures=True)
        procs.kill_all_live()


_pool: CellPool | None = None
_pool_lock = threading.Lock()


def get(size: int) -> CellPool:
    global _pool
    with _pool_lock:
        if _pool is None or _pool.stopping.is_set():
            _pool = CellPool(size)
        return _pool


def stop() -> None:
    """Stop this process's pool, if any (on SIGTERM, Ctrl-C or at the session's end)."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.stop()


NEXT_ITEM_ATTR = "_ponybench_next_item"  # set by hooks.pytest_runtest_protocol under xdist


def _upcoming(item, pool: CellPool) -> list:
    """The cells this process will run after `item`, as far as it can know them."""
    if hasattr(item.config, "workerinput"):
        following = getattr(item, NEXT_ITEM_ATTR, None)
        return [following] if following is not None else []
    items = item.session.items
    if pool.indexed is not items:  # once per session: positions by identity
        pool.indexed, pool.positions = items, {id(it): i for i, it in enumerate(items)}
    start = pool.positions.get(id(item), len(items)) + 1
    return items[start:start + 2 * pool.size]


def record_for(item, state) -> CellRecord:
    """`item`'s record, produced in the pool; the cells after it are started meanwhile."""
    from functools import partial

    def workspace_of(cell_item):  # None for a rescore: a stop must never touch a kept result
        return None if cell_item.rescore_workspace is not None else state.run_dir.cell_dir(cell_item.cell.id)

    state.cell_context(item.config.hook)  # a rehearsal starts here, in the main thread, once
    pool = get(state.settings.at_once)
    for cell_item in [item, *_upcoming(item, pool)]:
        # A cell item is what can produce a record (collect.CellItem); other items (a task's
        # selftest) run as pytest runs them. Collection calls the pool, so the pool does not
        # import collection's class.
        if hasattr(cell_item, "produce_record") and pool.pending() < 2 * pool.size:
            pool.submit(cell_item.nodeid, partial(cell_item.produce_record, state), workspace_of(cell_item))
    return pool.result(item.nodeid, partial(item.produce_record, state), workspace_of(item))
