"""The full-screen trace viewer: prompt-toolkit on asyncio, fed by an async iterator of events.

The event source (SSE over httpx, or a file) runs as a task on the same asyncio loop as the UI, so
reading never blocks drawing or keys. Keys go through ``tui.keys.KEYMAP`` to the named handlers in
``TraceApp.commands``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator, Callable

from prompt_toolkit.application import Application
from prompt_toolkit.filters import Condition
from prompt_toolkit.input import Input
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.output import Output

from ..telemetry.export import ExportError, exchange_from_trace
from .actions import ActionError, export_request, replay_request
from .keys import KEYMAP, PROMPT_KEYMAP
from .layout import STYLE, TraceLayout
from .state import Event, ExportShown, TraceView

_END = 10**9  # move() clamps, so this means "to the last line"


class TraceApp:
    def __init__(
        self,
        source: AsyncIterator[Event] | None,
        view: TraceView | None = None,
        *,
        input: Input | None = None,
        output: Output | None = None,
        admin: str | None = None,
        base_url: str | None = None,
        credentials: dict[str, str] | None = None,
    ) -> None:
        self.view = view or TraceView()
        self.source = source
        self.admin = admin  # host:port of the admin server (replay); None for a trace read from a file
        self.base_url = base_url  # the gateway listener the curl line is aimed at, when known
        # headers the trace hides (``<redacted>``) that the user gave (``trioproxy trace --credential``):
        # sent with a replay and written into the curl line; without them those headers are left out
        self.credentials = dict(credentials or {})
        self.tasks: set[asyncio.Task[None]] = set()
        self.layout = TraceLayout(self.view)
        self.history: list[tuple[str, str]] = []  # (command, details title) as run, for tests
        self.notices: list[str | None] = []  # the status notice each command left, for tests
        self.commands: dict[str, Callable[[], None]] = {
            "pane.next": lambda: self.view.focus_next(1),
            "pane.prev": lambda: self.view.focus_next(-1),
            "cursor.up": lambda: self.view.move(-1),
            "cursor.down": lambda: self.view.move(1),
            "cursor.page_up": lambda: self.view.move(-self.layout.page_height()),
            "cursor.page_down": lambda: self.view.move(self.layout.page_height()),
            "cursor.home": lambda: self.view.move(-_END),
            "cursor.end": lambda: self.view.move(_END),
            "view.event": lambda: self.view.set_mode("event"),
            "view.snapshot": lambda: self.view.set_mode("snapshot"),
            "view.diff": lambda: self.view.set_mode("diff"),
            "view.format": self.view.toggle_format,
            "view.bodies": lambda: self.view.set_mode("bodies"),
            "search.start": self.view.prompt_open,
            "search.next": lambda: self.view.search_next(1),
            "search.prev": lambda: self.view.search_next(-1),
            "request.export": self.export_selected,
            "request.replay": self.replay_selected,
            "details.copy": self.copy_details,
            "app.quit": self.quit,
        }
        self.prompt_commands: dict[str, Callable[[], None]] = {
            "prompt.accept": self.view.prompt_accept,
            "prompt.backspace": self.view.prompt_backspace,
            "prompt.cancel": self.view.prompt_cancel,
        }
        typing = Condition(lambda: self.view.prompt is not None)
        kb = KeyBindings()
        for binding in KEYMAP:
            kb.add(binding.key, filter=~typing)(self._handler(binding.command))
        for binding in PROMPT_KEYMAP:
            kb.add(binding.key, filter=typing)(self._handler(binding.command))
        kb.add("<any>", filter=typing)(self._type)
        self.app: Application[int] = Application(
            layout=self.layout.layout,
            key_bindings=kb,
            style=STYLE,
            full_screen=True,
            input=input,
            output=output,
        )
        self.app.ttimeoutlen = 0.05  # a lone Esc quits without half a second's wait
        self.source_done = asyncio.Event()  # set when the source ends or fails (tests wait on it)

    def _handler(self, command: str) -> Callable[[KeyPressEvent], None]:
        def handle(event: KeyPressEvent) -> None:
            self.run_command(command)

        return handle

    def run_command(self, command: str) -> None:
        self.view.notice = None
        (self.commands.get(command) or self.prompt_commands[command])()
        self.history.append((command, self.view.details_title()))
        self.notices.append(self.view.notice)
        self.app.invalidate()

    def _type(self, event: KeyPressEvent) -> None:
        key = event.key_sequence[0].key
        if len(key) == 1:  # a character; named keys (arrows, function keys) type nothing
            self.view.prompt_type(event.data)
            self.app.invalidate()

    def quit(self) -> None:
        if not self.app.is_done:
            self.app.exit(result=0)

    def copy_details(self) -> None:
        """Copy via OSC 52 so it works over ssh and in tmux, with no clipboard library."""
        text = self.view.details_text()
        payload = base64.b64encode(text.encode()).decode()
        self.app.output.write_raw(f"\x1b]52;c;{payload}\x07")
        self.app.output.flush()
        self.view.notice = f"copied {len(text.splitlines())} lines to the clipboard (OSC 52)"

    def _selected(self) -> tuple[int, list[Event]] | None:
        trace = self.view.trace
        if trace is None or not trace.finished:
            self.view.notice = "no finished request selected: wait for requestFinished"
            return None
        return self.view.selected_request, list(trace.events)

    def export_selected(self) -> None:
        """``x``: HAR file in the current directory, curl line in the details pane (``c`` copies it)."""
        selected = self._selected()
        if selected is None:
            return
        index, events = selected
        try:
            done = export_request(events, index + 1, base_url=self.base_url, credentials=self.credentials)
        except ActionError as error:
            self.view.notice = str(error)
            return
        self.view.show_export(ExportShown(index + 1, str(done.path), done.curl, done.curl_error))
        self.view.notice = f"wrote {done.path.name}" + ("; c copies the curl line" if done.curl else "")

    def replay_selected(self) -> None:
        """``r``: the request sent again through the gateway; its fresh trace is added and selected."""
        if self.admin is None:
            self.view.notice = "replay needs a gateway: a trace read from a file has none (trioproxy replay FILE)"
            return
        selected = self._selected()
        if selected is None:
            return
        index, events = selected
        try:
            supplied = {name.lower() for name in self.credentials}
            hidden = sorted(h for h in exchange_from_trace(events).redacted if h.lower() not in supplied)
        except ExportError as error:
            self.view.notice = f"cannot replay: {error}"
            return
        self.view.notice = f"replaying request {index + 1}…"
        task = asyncio.get_running_loop().create_task(self._replay(self.admin, index, events, hidden))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _replay(self, admin: str, index: int, events: list[Event], hidden: list[str]) -> None:
        try:
            answer = await replay_request(admin, events, self.credentials)
        except ActionError as error:
            self.view.notice = str(error)
        else:
            trace = answer.get("trace")
            at = self.view.add_trace(trace if isinstance(trace, list) else [], note=f"replay of {index + 1}")
            notice = f"replayed request {index + 1}: status {answer.get('status')} (request {at + 1})"
            if hidden:
                notice += f"; not sent (hidden by the trace): {', '.join(hidden)}"
            self.view.notice = notice
        self.app.invalidate()

    async def _pump(self) -> None:
        try:
            if self.source is not None:
                async for event in self.source:
                    self.view.add_event(event)
                    self.app.invalidate()
            self.view.complete = True
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # shown in the status line; the user still sees what arrived
            self.view.error = str(exc) or type(exc).__name__
        finally:
            self.source_done.set()
            self.app.invalidate()

    async def run(self) -> int:
        """Run until the user quits; the terminal is restored by prompt-toolkit on exit."""
        pump = asyncio.create_task(self._pump())
        try:
            return await self.app.run_async()
        finally:
            for task in (pump, *self.tasks):
                task.cancel()
            for task in (pump, *self.tasks):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            aclose = getattr(self.source, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()


async def run_tui(source: AsyncIterator[Event] | None, *, follow: bool = False, admin: str | None = None,
                  base_url: str | None = None, credentials: dict[str, str] | None = None) -> int:
    view = TraceView(show_requests=follow)
    return await TraceApp(source, view, admin=admin, base_url=base_url, credentials=credentials).run()
