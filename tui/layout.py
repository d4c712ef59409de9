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
from .state import Match, TraceView, find_spans

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
        "body.head": "bold",
        "body.caption": "ansicyan bold",
        "body.label": "bold",
        "body.text": "ansigreen",
        "body.thinking": "ansibrightblack italic",
        "body.warn": "ansiyellow",
        "body.none": "ansibrightblack",
        "search.match": "bg:ansiyellow ansiblack",
        "search.current": "bg:ansimagenta ansiwhite bold",
        "search.row": "bold",
        "prompt": "bold",
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
        # the export view's curl line is one long line: wrapped, so all of it shows
        self.details_window = Window(FormattedTextControl(self._details),
                                     wrap_lines=Condition(lambda: view.mode == "export"))
        self.body_windows = [Window(FormattedTextControl(lambda c=c: self._column(c)), wrap_lines=True)
                             for c in (0, 1)]
        help_box = HSplit(
            [
                Window(FormattedTextControl(self._status), height=1),
                Window(FormattedTextControl(self._legend), wrap_lines=True, height=_legend_height),
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
        bodies = VSplit([
            Frame(self.body_windows[0], title=lambda: self._title("details", "Request body"),
                  width=Dimension(weight=50)),
            Frame(self.body_windows[1], title=lambda: self._title("details", "Response body"),
                  width=Dimension(weight=50)),
        ])
        showing_bodies = Condition(lambda: view.mode == "bodies")
        self.container = HSplit(
            [
                ConditionalContainer(requests, filter=Condition(lambda: view.show_requests)),
                ConditionalContainer(VSplit([events, details]), filter=~showing_bodies),
                ConditionalContainer(bodies, filter=showing_bodies),
                Frame(help_box, title="Help"),
            ]
        )
        self.layout = Layout(self.container)

    def page_height(self) -> int:
        window = {
            "requests": self.requests_window,
            "events": self.events_window,
            "details": self.body_windows[1] if self.view.mode == "bodies" else self.details_window,
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
            path = f"{req.path} ({req.note})" if req.note else req.path
            out.append((style, f"{i + 1:>3}  {req.method:<7} {path[:40]:<40} {req.status:>6} {req.duration:>9}"))
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
        hits = self.view.matching_rows()
        for i, row in enumerate(trace.rows):
            style = f"class:sev.{row.severity}"
            if i == self.view.selected_row:
                style += " class:row.selected"
            marker = ("class:search.match", "▶") if i in hits else ("", " ")
            out.append(marker)
            out.append((style, f"{row.number:>2}  {row.kind:<{_KIND_WIDTH}} {row.summary}"))
            out.append(("", "\n"))
        return out

    def _event_cursor(self) -> Point:
        return Point(0, self.view.selected_row)

    def _lines(self, lines: list[tuple[str, str]], current: int | None) -> StyleAndTextTuples:
        """``lines`` from the scroll position on, search matches highlighted (line ``current`` the current one)."""
        out: StyleAndTextTuples = []
        term = self.view.search_term or ""
        start = self.view.details_scroll
        for number, (style, line) in enumerate(lines[start:], start):
            base = f"class:{style}" if style else ""
            hit = "class:search.current" if number == current else "class:search.match"
            at = 0
            for begin, end in find_spans(line, term):
                out.append((base, line[at:begin]))
                out.append((hit, line[begin:end]))
                at = end
            out.append((base, line[at:]))
            out.append(("", "\n"))
        return out

    def _details(self) -> StyleAndTextTuples:
        match = self.view.current_match()
        current = match.line if match is not None and match.row == self.view.selected_row else None
        return self._lines(self.view.details_lines(), current)

    def _column(self, column: int) -> StyleAndTextTuples:
        match: Match | None = self.view.current_match()
        current = match.line if match is not None and match.row < 0 and match.column == column else None
        return self._lines(self.view.body_columns()[column], current)

    def _status(self) -> StyleAndTextTuples:
        if self.view.prompt is not None:
            return [("class:prompt", f"/{self.view.prompt}"), ("reverse", " ")]
        style = "class:status.error" if self.view.error else "class:status"
        search = self.view.search_status()
        return [(style, self.view.status_line()), ("class:search.row", f"  {search}" if search else "")]

    def _legend(self) -> StyleAndTextTuples:
        text = keys.prompt_legend_text() if self.view.prompt is not None else keys.legend_text()
        return [("class:legend", text)]
