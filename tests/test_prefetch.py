"""`remote_keras.pipeline.prefetch`: an iterator's thread pools and its bounded look-ahead.

`WorkerPools` makes its three pools on first use in each process, lets their threads go after
`idle_s` without work (calling `on_idle`) and makes them again on the next `get`; `close()`
never waits for a stalled task. `Prefetcher` keeps at most `depth` batches nobody asked for.
Every test closes its pools (the suite checks that no `remote_keras-` thread is left).
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time

import pytest

from remote_keras.pipeline.prefetch import Prefetcher, WorkerPools


def ours():
    """The names of this process's `remote_keras-` threads (but the process-wide one)."""
    return sorted(
        t.name
        for t in threading.enumerate()
        if t.name.startswith("remote_keras-") and t.name != "remote_keras-interrupts"
    )


def wait_until(condition, timeout=10.0):
    """Whether `condition()` came true within `timeout` seconds (polled)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


@pytest.fixture
def make_pools():
    """Makes `WorkerPools`, closed after the test."""
    made = []

    def make(batch=1, fetch=1, decode=1, idle_s=60.0, on_idle=None):
        pools = WorkerPools(batch, fetch, decode, idle_s=idle_s, on_idle=on_idle)
        made.append(pools)
        return pools

    yield make
    for pools in made:
        pools.close()


class Gate:
    """Tasks that record their thread's name, then wait for the gate to open."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.ran: list[str] = []

    def task(self, value=None):
        def run():
            self.ran.append(threading.current_thread().name)
            assert self.event.wait(10), "the gate was never opened"
            return value

        return run

    def open(self) -> None:
        self.event.set()


def threads_used(pool, size):
    """Runs `size + 1` waiting tasks on `pool`: the names of the threads that ran them.

    Asserts that `size` ran at once and the last waited for one of them to end.
    """
    gate = Gate()
    futures = [pool.submit(gate.task(i)) for i in range(size + 1)]
    assert wait_until(lambda: len(gate.ran) >= size)
    time.sleep(0.05)
    assert len(gate.ran) == size  # every thread busy: the last task waits
    gate.open()
    assert [f.result(timeout=10) for f in futures] == list(range(size + 1))
    return gate.ran


# --------------------------------------------------------------------------- WorkerPools


def test_pools_are_made_on_first_get_with_their_sizes_and_thread_names(make_pools):
    pools = make_pools(batch=3, fetch=2, decode=None)
    cores = os.cpu_count() or 1
    assert pools.sizes == {"batch": 3, "fetch": 2, "decode": cores}
    assert ours() == []  # nothing runs before the first `get`, not even the idle timer
    batch = pools.get("batch")
    assert pools.get("batch") is batch
    assert ours() == ["remote_keras-idle"]  # a pool's threads start with its first task
    for kind, size in (("batch", 3), ("fetch", 2), ("decode", cores)):
        names = threads_used(pools.get(kind), size)
        assert len(set(names)) == size
        assert all(name.startswith(f"remote_keras-{kind}_") for name in names)
    assert len({id(pools.get(kind)) for kind in ("batch", "fetch", "decode")}) == 3


def test_a_batch_task_can_use_the_other_pools(make_pools):
    # What `batches.load` does on a batch thread: fetch and decode on their own threads.
    pools = make_pools(batch=1, fetch=1, decode=2)

    def batch():
        fetched = pools.get("fetch").submit(lambda: b"bytes").result(timeout=10)
        decoded = [pools.get("decode").submit(len, fetched) for _ in range(4)]
        return [f.result(timeout=10) for f in decoded]

    assert pools.get("batch").submit(batch).result(timeout=10) == [5] * 4


@pytest.mark.slow
def test_idle_pools_are_released_once_then_made_again_by_the_next_get(make_pools):
    calls = []
    idle_s = 0.15
    pools = make_pools(
        batch=2,
        idle_s=idle_s,
        on_idle=lambda: calls.append((time.monotonic(), threading.current_thread().name)),
    )
    first = pools.get("batch")
    assert first.submit(lambda: 41 + 1).result(timeout=10) == 42
    assert pools.get("decode").submit(lambda: "d").result(timeout=10) == "d"
    done = time.monotonic()
    assert wait_until(lambda: calls)
    released_at, thread = calls[0]
    assert released_at - done >= idle_s - 0.05  # not before `idle_s` without work
    assert thread == "remote_keras-idle"
    assert wait_until(lambda: ours() == [])  # the pools' threads and the timer exited
    time.sleep(2 * idle_s)
    assert len(calls) == 1 and pools.releases == 1  # nothing more to release: once
    second = pools.get("batch")
    assert second is not first
    name = second.submit(lambda: threading.current_thread().name).result(timeout=10)
    assert name.startswith("remote_keras-batch_")
    assert wait_until(lambda: len(calls) == 2)  # and released again once idle
    assert pools.releases == 2


@pytest.mark.slow
def test_work_in_progress_or_a_get_keeps_the_pools(make_pools):
    calls = []
    idle_s = 0.25
    pools = make_pools(idle_s=idle_s, on_idle=lambda: calls.append(1))
    gate = Gate()
    running = pools.get("fetch").submit(gate.task("slow request"))
    time.sleep(2 * idle_s)  # idle periods with a task running
    assert calls == [] and pools.releases == 0
    gate.open()
    assert running.result(timeout=10) == "slow request"
    end = time.monotonic() + 2 * idle_s
    while time.monotonic() < end:  # no task, but the pools are asked for
        pools.get("decode")
        time.sleep(0.01)
    assert calls == [] and pools.releases == 0
    assert wait_until(lambda: calls == [1])


def test_a_pool_released_while_idle_still_takes_work(make_pools):
    # A batch thread keeps the pools it got (`batches.load`): one released meanwhile
    # hands its work to new pools, and the count of work in progress stays right.
    calls = []
    pools = make_pools(idle_s=0.1, on_idle=lambda: calls.append(1))
    old = pools.get("decode")
    assert wait_until(lambda: pools.releases == 1)
    name = old.submit(lambda: threading.current_thread().name).result(timeout=10)
    assert name.startswith("remote_keras-decode_")
    assert wait_until(lambda: pools.releases == 2)  # idle again: not held busy by the retry
    assert calls == [1, 1]
    pools.close()
    with pytest.raises(RuntimeError, match="closed"):
        old.submit(lambda: None)


def test_close_returns_at_once_while_a_task_is_stalled(make_pools):
    calls = []
    pools = make_pools(idle_s=0.1, on_idle=lambda: calls.append(1))
    gate = Gate()
    running = pools.get("fetch").submit(gate.task("finished"))
    queued = pools.get("fetch").submit(gate.task("never"))
    assert wait_until(lambda: len(gate.ran) == 1)
    start = time.monotonic()
    pools.close()
    assert time.monotonic() - start < 0.5
    assert queued.cancelled()
    assert not running.done() and "remote_keras-fetch_0" in ours()  # stalled, not waited for
    with pytest.raises(RuntimeError, match="closed"):
        pools.get("batch")
    start = time.monotonic()
    pools.close()  # again: nothing to do
    assert time.monotonic() - start < 0.5
    gate.open()
    assert running.result(timeout=10) == "finished"
    assert wait_until(lambda: ours() == [])  # the stalled thread ends once its task does
    assert gate.ran == ["remote_keras-fetch_0"] and calls == []  # closed: never "idle"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_makes_its_own_pools(make_pools):
    pools = make_pools(batch=1)
    parent = pools.get("batch")
    assert parent.submit(os.getpid).result(timeout=10) == os.getpid()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's threads do not exist here
        answer = b"error"
        try:
            pool = pools.get("batch")
            same = pool is parent
            ran = pool.submit(os.getpid).result(timeout=10) == os.getpid()
            pools.close()
            answer = b"new pool ran" if ran and not same else b"parent's pool"
        finally:
            os.write(write, answer)
            os._exit(0)
    os.close(write)
    try:
        ready, _, _ = select.select([read], [], [], 30)
        answer = os.read(read, 100) if ready else b"no answer"
    finally:
        os.close(read)
        if not ready:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert answer == b"new pool ran"
    assert pools.get("batch") is parent  # the child's `close` was its own
    assert parent.submit(lambda: 3).result(timeout=10) == 3


# --------------------------------------------------------------------------- Prefetcher


def look_ahead(prefetcher, keys, gate, started):
    """What the iterators do under their lock: start each key wanted, ahead of time."""
    for key in keys:
        if prefetcher.wants(key):
            prefetcher.ahead(key, gate.task(key))
            started.append(key)


def test_at_most_depth_batches_are_held_without_being_asked_for(make_pools):
    pools = make_pools(batch=8)
    prefetcher = Prefetcher(pools, depth=3)
    gate, started = Gate(), []
    keys = [(0, i) for i in range(20)]
    for _ in range(5):  # however often it is asked to look ahead
        look_ahead(prefetcher, keys, gate, started)
    assert started == keys[:3]
    assert wait_until(lambda: len(gate.ran) == 3)
    claimed = prefetcher.claim((0, 1))
    assert claimed is not None and prefetcher.claim((0, 1)) is None  # handed out once
    look_ahead(prefetcher, keys, gate, started)
    assert started == keys[:4]  # one claimed: room for one more; (0, 1) is not built again
    assert not prefetcher.wants((0, 1))
    gate.open()
    assert claimed.result(timeout=10) == (0, 1)
    assert wait_until(lambda: len(gate.ran) == 4)
    time.sleep(0.05)
    assert len(gate.ran) == 4  # no task started but the four


def test_claim_hands_over_the_future_started_ahead_and_start_is_not_counted(make_pools):
    pools = make_pools(batch=4)
    prefetcher = Prefetcher(pools, depth=1)
    prefetcher.ahead((2, 7), lambda: "batch 7")
    assert not prefetcher.wants((2, 8))  # depth 1: full
    future = prefetcher.claim((2, 7))
    assert future.result(timeout=10) == "batch 7"
    assert prefetcher.claim((2, 7)) is None
    assert prefetcher.claim((2, 8)) is None  # never started ahead: the caller starts it
    gate = Gate()
    asked = [prefetcher.start(gate.task(i)) for i in range(3)]  # batches asked for
    assert prefetcher.wants((2, 9))  # are not held ahead: no room taken
    assert wait_until(lambda: len(gate.ran) == 3)
    assert all(name.startswith("remote_keras-batch_") for name in gate.ran)
    gate.open()
    assert [f.result(timeout=10) for f in asked] == [0, 1, 2]


def test_asked_batches_are_not_built_ahead_again_within_two_epochs(make_pools):
    prefetcher = Prefetcher(make_pools(), depth=2)
    assert prefetcher.claim((5, 1)) is None
    assert not prefetcher.wants((5, 1)) and prefetcher.wants((5, 2))
    prefetcher.claim((6, 0))
    assert not prefetcher.wants((5, 1))  # the epoch before is remembered
    prefetcher.claim((7, 0))
    assert prefetcher.wants((5, 1))  # two epochs before: forgotten
    assert not prefetcher.wants((6, 0)) and not prefetcher.wants((7, 0))
    assert ours() == []  # asking and wanting start no thread


def test_clear_cancels_queued_batches_and_forgets_them_all(make_pools):
    pools = make_pools(batch=1)  # one batch thread: the second and third wait in its queue
    prefetcher = Prefetcher(pools, depth=3)
    gate, started = Gate(), []
    keys = [(0, i) for i in range(3)]
    look_ahead(prefetcher, keys, gate, started)
    assert started == keys and wait_until(lambda: len(gate.ran) == 1)
    prefetcher.clear()
    assert all(prefetcher.claim(key) is None for key in keys)  # the running one too
    gate.open()
    # The pool's queue runs in order: had they been queued still, they would run first.
    assert pools.get("batch").submit(lambda: "after").result(timeout=10) == "after"
    assert len(gate.ran) == 1
    assert all(prefetcher.wants((1, i)) for i in range(3))  # room for `depth` again


def test_claim_gives_none_for_a_batch_cancelled_by_close(make_pools):
    pools = make_pools(batch=1)
    prefetcher = Prefetcher(pools, depth=2)
    gate, started = Gate(), []
    look_ahead(prefetcher, [(0, 0), (0, 1)], gate, started)
    assert wait_until(lambda: len(gate.ran) == 1)
    pools.close()  # cancels (0, 1), still queued; (0, 0) goes on
    assert prefetcher.claim((0, 1)) is None  # to be read anew, not waited for forever
    running = prefetcher.claim((0, 0))
    assert running is not None
    gate.open()
    assert running.result(timeout=10) == (0, 0)
    with pytest.raises(RuntimeError, match="closed"):
        prefetcher.start(lambda: None)
