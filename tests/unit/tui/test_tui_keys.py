from prompt_toolkit.key_binding import KeyBindings

from trioproxy.tui import keys
from trioproxy.tui.app import TraceApp


def test_every_binding_resolves_to_a_command():
    for binding in keys.KEYMAP:
        assert binding.command in keys.COMMANDS, binding


def test_every_key_is_a_valid_prompt_toolkit_key_and_bound_once():
    kb = KeyBindings()
    for binding in keys.KEYMAP:
        kb.add(binding.key)(lambda e: None)
    names = [b.key for b in keys.KEYMAP]
    assert len(names) == len(set(names))


def test_every_command_has_a_key_a_handler_and_help():
    handlers = TraceApp(None).commands
    assert set(handlers) == set(keys.COMMANDS)
    documented = {c for _, _, cmds in keys.legend() for c in cmds}
    assert documented == set(keys.COMMANDS)
    for command in keys.COMMANDS:
        assert keys.keys_for(command), command


def test_legend_shows_the_contract_keys():
    text = keys.legend_text()
    for part in ("tab switch pane", "e raw event", "s snapshot", "d snapshot diff", "q/Esc/^C quit", "↑/↓ scroll"):
        assert part in text


def test_legend_shows_the_body_view_and_search_keys():
    text = keys.legend_text()
    for part in ("b bodies side by side", "/ search", "n/N next/previous match"):
        assert part in text


def test_prompt_keys_have_handlers_and_their_own_legend():
    handlers = TraceApp(None).prompt_commands
    assert set(handlers) == set(keys.PROMPT_COMMANDS) == {b.command for b in keys.PROMPT_KEYMAP}
    assert keys.prompt_legend_text() == "Enter search  BkSp delete  Esc/^C cancel"
    kb = KeyBindings()
    for binding in keys.PROMPT_KEYMAP:
        kb.add(binding.key)(lambda e: None)
