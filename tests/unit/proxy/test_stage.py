"""``Phase`` groups stages by the hooks they override, once (proxy/stage.py; pure)."""

from __future__ import annotations

from trioproxy.proxy.stage import Phase, Stage


class OnlyRequest(Stage):
    kind = "a"

    async def request(self, x):  # type: ignore[no-untyped-def]
        return None


class OnlyFinish(Stage):
    kind = "b"

    async def finish(self, x):  # type: ignore[no-untyped-def]
        return None


def test_a_stage_sits_only_in_the_hooks_it_overrides():
    """A stage without a response or finish hook costs nothing in those loops."""
    a, b = OnlyRequest(), OnlyFinish()
    phase = Phase("route", None, (a, b))
    assert phase.request == (a,)
    assert phase.response == ()
    assert phase.finish == (b,)
    assert repr(phase) == "<Phase route: a → b>"
    assert repr(Phase("gateway", None, ())) == "<Phase gateway: empty>"
