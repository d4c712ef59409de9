"""prompt-toolkit containers drawing a ``TraceView``: request list, events table | details, help.

Only drawing lives here; every decision about what to show is made by ``tui.state``.
"""

from __future__ import annotations

from prompt_toolkit.application import get_app
from prompt_toolkit.data_structures import Point
from prompt_toolkit.filters import Condition
from prompt_toolkit.formatted_text import StyleAndTextTuples
from prompt_toolkit.layout import (
    ConditionalContainer,
    Dimension,
    FormattedTextControl,
    HSplit,
    Layout,
    VSplit,
    Window,
)
from prompt_toolkit.styles import Style
from prompt_toolkit.widgets import Frame

from . import keys
from .state import TraceView

STYLE = Style.from_dict(
    {
        "header": "bold underline",
        "row.selected": "reverse",
        "sev.info": "",
        "sev.success": "ansigreen",
        "sev.warn": "ansiyellow",
        "sev.error": "ansired bold",
        "diff.add": "ansigreen",
        "diff.del": "ansired",
        "diff.hunk": "ansicyan",
        "diff.caption": "bold",
        "title.focused": "bold reverse",
        "title": "bold",
        "status": "bold",
        "status.error": "ansired bold",
        "legend": "ansibrightblack",
    }
)

_KIND_WIDTH = 15
DEFAULT_PAGE = 10


def _legend_height() -> Dimension:
    """Lines the wrapped key legend needs at the current terminal width (inside the frame)."""
    width = max(10, get_app().output.get_size().columns - 2)
    return Dimension.exact(-(-len(keys.legend_text()) // width))


class TraceLayout:
    """Holds the windows so the app can ask for their rendered heights (page size)."""

    def __init__(self, view: TraceView) -> None:
        self.view = view
        self.requests_window = Window(
            FormattedTextControl(self._request_lines, get_cursor_position=self._request_cursor),
            height=Dimension(min=3, max=8, preferred=8),
        )
        self.events_window = Window(
            FormattedTextControl(self._event_lines, get_cursor_position=self._event_cursor),
        )
        self.details_window = Window(FormattedTextControl(self._details), wrap_lines=False)
        help_box = HSplit(
            [
                Window(FormattedTextControl(self._status), height=1),
                Window(FormattedTextControl([("class:legend", keys.legend_text())]), wrap_lines=True,
                       height=_legend_height),
            ]
        )
        requests = Frame(
            HSplit([Window(FormattedTextControl(self._request_header), height=1), self.requests_window]),
            title=lambda: self._title("requests", "Requests"),
        )
        events = Frame(
            HSplit([Window(FormattedTextControl(self._event_header), height=1), self.events_window]),
            title=lambda: self._title("events", "Events"),
            width=Dimension(weight=55),  # a fixed split, not one sized by the content
        )
        details = Frame(self.details_window, title=lambda: self._title("details", view.details_title()),
                        width=Dimension(weight=45))
        self.container = HSplit(
            [
                ConditionalContainer(requests, filter=Condition(lambda: view.show_requests)),
                VSplit([events, details]),
                Frame(help_box, title="Help"),
            ]
        )
        self.layout = Layout(self.container)

    def page_height(self) -> int:
        window = {
            "requests": self.requests_window,
            "events": self.events_window,
            "details": self.details_window,
        }[self.view.focus]
        info = window.render_info
        return max(1, info.window_height - 1) if info else DEFAULT_PAGE

    # -- fragments ---------------------------------------------------------------------------
    def _title(self, pane: str, text: str) -> StyleAndTextTuples:
        style = "class:title.focused" if self.view.focus == pane else "class:title"
        return [(style, f" {text} ")]

    def _request_header(self) -> StyleAndTextTuples:
        return [("class:header", f"{'#':>3}  {'Method':<7} {'Path':<40} {'Status':>6} {'Duration':>9}")]

    def _request_lines(self) -> StyleAndTextTuples:
        out: StyleAndTextTuples = []
        for i, req in enumerate(self.view.requests):
            style = "class:row.selected" if i == self.view.selected_request else ""
            out.append((style, f"{i + 1:>3}  {req.method:<7} {req.path[:40]:<40} {req.status:>6} {req.duration:>9}"))
            out.append(("", "\n"))
        return out

    def _request_cursor(self) -> Point:
        return Point(0, self.view.selected_request)

    def _event_header(self) -> StyleAndTextTuples:
        return [("class:header", f"{'#':>3}  {'Type':<{_KIND_WIDTH}} Summary")]

    def _event_lines(self) -> StyleAndTextTuples:
        trace = self.view.trace
        if trace is None:
            return [("", "")]
        out: StyleAndTextTuples = []
        for i, row in enumerate(trace.rows):
            style = f"class:sev.{row.severity}"
            if i == self.view.selected_row:
                style += " class:row.selected"
            out.append((style, f"{row.number:>3}  {row.kind:<{_KIND_WIDTH}} {row.summary}"))
            out.append(("", "\n"))
        return out

    def _event_cursor(self) -> Point:
        return Point(0, self.view.selected_row)

    def _details(self) -> StyleAndTextTuples:
        out: StyleAndTextTuples = []
        for style, line in self.view.details_lines()[self.view.details_scroll :]:
            out.append((f"class:{style}" if style else "", line))
            out.append(("", "\n"))
        return out

    def _status(self) -> StyleAndTextTuples:
        style = "class:status.error" if self.view.error else "class:status"
        return [(style, self.view.status_line())]
