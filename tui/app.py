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

from .keys import KEYMAP, PROMPT_KEYMAP
from .layout import STYLE, TraceLayout
from .state import Event, TraceView

_END = 10**9  # move() clamps, so this means "to the last line"


class TraceApp:
    def __init__(
        self,
        source: AsyncIterator[Event] | None,
        view: TraceView | None = None,
        *,
        input: Input | None = None,
        output: Output | None = None,
    ) -> None:
        self.view = view or TraceView()
        self.source = source
        self.layout = TraceLayout(self.view)
        self.history: list[tuple[str, str]] = []  # (command, details title) as run, for tests
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
        self.app.invalidate()

    def _type(self, event: KeyPressEvent) -> None:
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
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pump
            aclose = getattr(self.source, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()


async def run_tui(source: AsyncIterator[Event] | None, *, follow: bool = False) -> int:
    view = TraceView(show_requests=follow)
    return await TraceApp(source, view).run()
