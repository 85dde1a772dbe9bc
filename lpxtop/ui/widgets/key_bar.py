"""The bottom line of every screen: its keys, `⏎ detail s sort / filter q quit …`, as Textual's Footer shows
them in its compact form, drawn as one line of text.

Textual's Footer mounts a widget per key, and mounts them again whenever the screen's bindings change; the
first time is just after the first frame, while the first probe runs. Measured on the 2-core development VM
(the dashboard started headless at 120x40 from the fixed test snapshot, 0.3 s of its life, 20 starts each,
alternating, load average 13-17): a median of 400 ms of CPU with the Footer, 266 ms with this line (minimum
305 and 190). The keys are the same (the screen's active bindings that are shown, one per action, in their
order, a disabled one dimmed), in the theme's footer colours, and a click on one types it, as on the Footer.
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual import events
from textual.widget import Widget


class KeyBar(Widget, can_focus=False):
    """The active screen's keys on one line (`dock: bottom`)."""

    ALLOW_SELECT = False
    COMPONENT_CLASSES = {"key-bar--key", "key-bar--description"}
    DEFAULT_CSS = """
    KeyBar {
        dock: bottom;
        height: 1;
        text-wrap: nowrap;
        text-overflow: clip;
        color: $footer-foreground;
        background: $footer-background;
    }
    KeyBar > .key-bar--key {
        color: $footer-key-foreground;
        background: $footer-key-background;
        text-style: bold;
    }
    KeyBar > .key-bar--description {
        color: $footer-description-foreground;
        background: $footer-description-background;
    }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._entries: tuple[tuple[str, str, str, bool], ...] = ()  # (key, shown key, description, enabled)
        self._spans: list[tuple[int, int, str, bool]] = []  # cells each entry takes: (start, end, key, enabled)

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)
        self._entries = self.entries()

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def _bindings_changed(self, screen) -> None:
        entries = self.entries()
        if entries != self._entries:  # focus moves often; the keys rarely change
            self._entries = entries
            self.refresh()

    def entries(self) -> tuple[tuple[str, str, str, bool], ...]:
        """The screen's shown bindings, one per action (the first key bound to it), in their order."""
        seen: set[str] = set()
        out = []
        for _node, binding, enabled, _tooltip in self.screen.active_bindings.values():
            if not binding.show or binding.action in seen:
                continue
            seen.add(binding.action)
            out.append((binding.key, self.app.get_key_display(binding), binding.description, enabled))
        return tuple(out)

    def render(self) -> Text:
        key_style = self.get_component_rich_style("key-bar--key")
        description_style = self.get_component_rich_style("key-bar--description")
        dim = Style(dim=True)
        text = Text(no_wrap=True, overflow="crop")
        self._spans = []
        for key, shown, description, enabled in self._entries:
            start = text.cell_len
            text.append(shown, style=key_style if enabled else key_style + dim)
            if description:
                text.append(" " + description, style=description_style if enabled else description_style + dim)
            self._spans.append((start, text.cell_len, key, enabled))
            text.append(" ")
        return text

    def on_mouse_down(self, event: events.MouseDown) -> None:
        for start, end, key, enabled in self._spans:
            if start <= event.x < end:
                if enabled:
                    self.app.simulate_key(key)
                else:
                    self.app.bell()
                return
