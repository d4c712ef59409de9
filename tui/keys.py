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
    "view.bodies": "bodies side by side",
    "search.start": "search",
    "search.next": "next match",
    "search.prev": "previous match",
    "request.export": "export HAR + curl",
    "request.replay": "replay",
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
    Binding("b", "view.bodies"),
    Binding("/", "search.start"),
    Binding("n", "search.next"),
    Binding("N", "search.prev"),
    Binding("x", "request.export"),
    Binding("r", "request.replay"),
    Binding("c", "details.copy"),
    Binding("q", "app.quit"),
    Binding("escape", "app.quit"),
    Binding("c-c", "app.quit"),
)

#: While a search term is typed after ``/`` the keys above are off and these edit the term (any other
#: key types itself).
PROMPT_COMMANDS: dict[str, str] = {
    "prompt.accept": "search",
    "prompt.backspace": "delete",
    "prompt.cancel": "cancel",
}

PROMPT_KEYMAP: tuple[Binding, ...] = (
    Binding("enter", "prompt.accept"),
    Binding("backspace", "prompt.backspace"),
    Binding("escape", "prompt.cancel"),
    Binding("c-c", "prompt.cancel"),
)

_KEY_LABELS = {
    "tab": "tab", "s-tab": "S-tab", "up": "↑", "down": "↓", "pageup": "PgUp",
    "pagedown": "PgDn", "home": "Home", "end": "End", "escape": "Esc", "c-c": "^C",
    "enter": "Enter", "backspace": "BkSp",
}
# commands folded into one legend entry to keep the help box to a line or two
_LEGEND_GROUPS = (
    (("cursor.up", "cursor.down"), "scroll"),
    (("cursor.page_up", "cursor.page_down"), "page"),
    (("cursor.home", "cursor.end"), "top/bottom"),
    (("search.next", "search.prev"), "next/previous match"),
)


def keys_for(command: str, keymap: tuple[Binding, ...] = KEYMAP) -> list[str]:
    return [b.key for b in keymap if b.command == command]


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


def prompt_legend_text() -> str:
    """The help line while a search term is typed."""
    return "  ".join("/".join(label(k) for k in keys_for(command, PROMPT_KEYMAP)) + f" {text}"
                     for command, text in PROMPT_COMMANDS.items())
