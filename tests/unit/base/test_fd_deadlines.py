"""fd_deadlines.py: a deadline ends a wait on a descriptor through ``notify_closing``, with no cancel
scope. Real socket pairs, pytest-trio's virtual clock (autojump): a deadline's time is exact."""

from __future__ import annotations

import socket

import pytest
import trio
import trio.testing

from trioproxy.fd_deadlines import FdDeadlines


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    yield a, b
    a.close()
    b.close()


async def test_an_armed_deadline_ends_the_wait_at_its_time(pair, autojump_clock):
    deadlines = FdDeadlines()
    start = trio.current_time()
    timer = deadlines.arm(pair[0].fileno(), start + 30)
    assert len(deadlines) == 1 and timer.armed is True and timer.fired is False
    with pytest.raises(trio.ClosedResourceError):
        await trio.lowlevel.wait_readable(pair[0])
    assert trio.current_time() - start == 30
    assert timer.fired is True and timer.armed is False and len(deadlines) == 0


async def test_a_disarmed_deadline_never_fires_and_the_socket_waits_as_before(pair, autojump_clock):
    deadlines = FdDeadlines()
    start = trio.current_time()
    timer = deadlines.arm(pair[0].fileno(), start + 10)

    async def answer_after_a_second() -> None:
        await trio.sleep(1)
        pair[1].send(b"x")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(answer_after_a_second)
        await trio.lowlevel.wait_readable(pair[0])
    deadlines.disarm(timer)
    deadlines.disarm(timer)  # twice is once
    assert pair[0].recv(10) == b"x" and len(deadlines) == 0 and timer.armed is False
    await trio.sleep(60)  # well past the deadline
    assert not timer.fired
    # the socket is still registered with Trio as it was: a later wait gets its bytes
    pair[1].send(b"y")
    await trio.lowlevel.wait_readable(pair[0])
    assert pair[0].recv(10) == b"y"


async def test_an_earlier_deadline_wakes_the_reaper_sleeping_for_a_later_one(autojump_clock):
    deadlines = FdDeadlines()
    a, b = socket.socketpair()
    c, d = socket.socketpair()
    with a, b, c, d:
        start = trio.current_time()
        late = deadlines.arm(a.fileno(), start + 100)
        await trio.sleep(1)  # the reaper sleeps until +100
        early = deadlines.arm(c.fileno(), start + 5)
        with pytest.raises(trio.ClosedResourceError):
            await trio.lowlevel.wait_readable(c)
        assert trio.current_time() - start == 5
        assert early.fired and not late.fired and late.armed
        with pytest.raises(trio.ClosedResourceError):
            await trio.lowlevel.wait_readable(a)
        assert trio.current_time() - start == 100 and late.fired


async def test_deadlines_fire_in_their_order_whatever_the_order_they_were_armed_in(autojump_clock):
    deadlines = FdDeadlines()
    pairs = [socket.socketpair() for _ in range(4)]
    start = trio.current_time()
    woken: list[tuple[int, float]] = []

    async def wait(i: int, after: float) -> None:
        deadlines.arm(pairs[i][0].fileno(), start + after)
        with pytest.raises(trio.ClosedResourceError):
            await trio.lowlevel.wait_readable(pairs[i][0])
        woken.append((i, trio.current_time() - start))

    try:
        async with trio.open_nursery() as nursery:
            for i, after in enumerate((7, 2, 9, 2)):
                nursery.start_soon(wait, i, after)
        assert sorted(woken, key=lambda w: w[1]) == woken
        assert sorted(woken) == [(0, 7), (1, 2), (2, 9), (3, 2)]
    finally:
        for a, b in pairs:
            a.close()
            b.close()


async def test_fire_ends_the_wait_now(pair, autojump_clock):
    deadlines = FdDeadlines()
    start = trio.current_time()
    timer = deadlines.arm(pair[0].fileno(), start + 3600)

    async def shut_down_after_a_second() -> None:
        await trio.sleep(1)
        deadlines.fire(timer)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(shut_down_after_a_second)
        with pytest.raises(trio.ClosedResourceError):
            await trio.lowlevel.wait_readable(pair[0])
    assert trio.current_time() - start == 1 and timer.fired and len(deadlines) == 0
    deadlines.fire(timer)  # a fired timer fires no more
    # a fired descriptor is registered again by its next wait
    pair[1].send(b"z")
    await trio.lowlevel.wait_readable(pair[0])
    assert pair[0].recv(10) == b"z"


async def test_a_deadline_that_passed_while_the_wait_was_ending_wakes_nobody(pair, autojump_clock):
    """The bytes came and the deadline passed in the same turn: the waiter has its bytes."""
    deadlines = FdDeadlines()
    timer = deadlines.arm(pair[0].fileno(), trio.current_time())  # due at once: fired on the reaper's first turn
    pair[1].send(b"x")
    await trio.lowlevel.wait_readable(pair[0])  # readable already: returns
    await trio.testing.wait_all_tasks_blocked()
    assert timer.fired and pair[0].recv(10) == b"x"


async def test_disarmed_timers_do_not_pile_up(pair):
    deadlines = FdDeadlines()
    now = trio.current_time()
    keep = deadlines.arm(pair[0].fileno(), now + 3600)
    for i in range(10_000):
        deadlines.disarm(deadlines.arm(pair[1].fileno(), now + 3600 + i))
        assert len(deadlines._heap) <= 2 * 2 + 1000  # rebuilt when past twice the armed ones (two) and 1,000
    assert len(deadlines) == 1 and keep.armed


async def test_the_heap_is_rebuilt_once_disarmed_timers_outnumber_the_armed_by_over_a_thousand(pair):
    deadlines = FdDeadlines()
    now = trio.current_time()
    deadlines.arm(pair[0].fileno(), now + 3600)
    for i in range(1003):  # each arm: two armed, the heap up to 1 + 1,003 = 2 * 2 + 1,000 entries
        deadlines.disarm(deadlines.arm(pair[1].fileno(), now + 3600 + i))
    assert len(deadlines._heap) == 1004
    deadlines.arm(pair[1].fileno(), now + 7200)  # one past it: only the two armed are left
    assert len(deadlines._heap) == 2 and len(deadlines) == 2


async def test_one_reaper_per_run_whatever_is_armed(autojump_clock):
    deadlines = FdDeadlines()
    a, b = socket.socketpair()
    with a, b:
        now = trio.current_time()
        before = trio.lowlevel.current_statistics().tasks_living
        first = deadlines.arm(a.fileno(), now + 100)
        await trio.sleep(1)
        names = [task.name for nursery in trio.lowlevel.current_root_task().child_nurseries
                 for task in nursery.child_tasks]
        assert names.count("trioproxy fd deadlines") == 1
        assert trio.lowlevel.current_statistics().tasks_living == before + 1
        earlier = deadlines.arm(b.fileno(), now + 50)  # wakes the sleeping reaper, starts none
        await trio.sleep(1)
        assert trio.lowlevel.current_statistics().tasks_living == before + 1
        deadlines.disarm(first)
        deadlines.disarm(earlier)


def test_each_trio_run_gets_its_own_reaper_and_none_of_the_last_ones_timers(pair):
    deadlines = FdDeadlines()
    left: list[object] = []

    async def run(wait: bool) -> float:
        start = trio.current_time()
        timer = deadlines.arm(pair[0].fileno(), start + 0.05)
        if not wait:
            left.append(timer)
            return 0.0  # the run ends with the timer armed
        with pytest.raises(trio.ClosedResourceError):
            await trio.lowlevel.wait_readable(pair[0])
        return trio.current_time() - start

    trio.run(run, False)
    assert len(deadlines) == 0  # the ended run's timers are dropped, not fired in the next run
    assert left[0].armed is False  # type: ignore[attr-defined]
    assert 0.05 <= trio.run(run, True) < 5
    assert not left[0].fired  # type: ignore[attr-defined]
