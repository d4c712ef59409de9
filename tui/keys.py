"""The one key table of the trace viewer (key → named command), mitmproxy-style.

Handlers are looked up by command name in ``tui.app``; the help legend is generated from this
table, so a binding cannot exist without being documented (``tests/unit/tui/test_tui_keys.py``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Binding:
    key: str  # prompt-toolkit key name
    command: str


# command name -> short help, in legend order
COMMANDS: dict[str, str] = {
    "pane.next": "switch pane",
    "pane.prev": "previous pane",
    "cursor.up": "up",
    "cursor.down": "down",
    "cursor.page_up": "page up",
    "cursor.page_down": "page down",
    "cursor.home": "first",
    "cursor.end": "last",
    "view.event": "raw event",
    "view.snapshot": "snapshot",
    "view.diff": "snapshot diff",
    "view.format": "yaml/json",
    "details.copy": "copy details",
    "app.quit": "quit",
}

KEYMAP: tuple[Binding, ...] = (
    Binding("tab", "pane.next"),
    Binding("s-tab", "pane.prev"),
    Binding("up", "cursor.up"),
    Binding("k", "cursor.up"),
    Binding("down", "cursor.down"),
    Binding("j", "cursor.down"),
    Binding("pageup", "cursor.page_up"),
    Binding("pagedown", "cursor.page_down"),
    Binding("home", "cursor.home"),
    Binding("g", "cursor.home"),
    Binding("end", "cursor.end"),
    Binding("G", "cursor.end"),
    Binding("e", "view.event"),
    Binding("s", "view.snapshot"),
    Binding("d", "view.diff"),
    Binding("f", "view.format"),
    Binding("c", "details.copy"),
    Binding("q", "app.quit"),
    Binding("escape", "app.quit"),
    Binding("c-c", "app.quit"),
)

_KEY_LABELS = {
    "tab": "tab", "s-tab": "S-tab", "up": "↑", "down": "↓", "pageup": "PgUp",
    "pagedown": "PgDn", "home": "Home", "end": "End", "escape": "Esc", "c-c": "^C",
}
# commands folded into one legend entry to keep the help box to a line or two
_LEGEND_GROUPS = (
    (("cursor.up", "cursor.down"), "scroll"),
    (("cursor.page_up", "cursor.page_down"), "page"),
    (("cursor.home", "cursor.end"), "top/bottom"),
)


def keys_for(command: str) -> list[str]:
    return [b.key for b in KEYMAP if b.command == command]


def label(key: str) -> str:
    return _KEY_LABELS.get(key, key)


def legend() -> list[tuple[str, str, tuple[str, ...]]]:
    """(keys label, help, commands covered) entries; grouped commands share one entry."""
    grouped = {c: (cmds, text) for cmds, text in _LEGEND_GROUPS for c in cmds}
    entries: list[tuple[str, str, tuple[str, ...]]] = []
    done: set[str] = set()
    for command, text in COMMANDS.items():
        if command in done:
            continue
        cmds, text = grouped.get(command, ((command,), text))
        done.update(cmds)
        if len(cmds) > 1:
            keys = "/".join(label(keys_for(c)[0]) for c in cmds if keys_for(c))
        else:
            keys = "/".join(label(k) for k in keys_for(command))
        entries.append((keys, text, cmds))
    return entries


def legend_text() -> str:
    return "  ".join(f"{keys} {text}" for keys, text, _ in legend())
