"""A one-line question (a bookmark's note, a time to jump to); dismisses with the text or None."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static


class PromptScreen(ModalScreen[str | None]):
    """Enter answers, Esc cancels."""

    DEFAULT_CSS = """
    PromptScreen {
        align: center middle;
        background: $background 60%;
    }
    #prompt-box {
        width: 70%;
        max-width: 90;
        height: auto;
        border: round $primary;
        border-title-color: $primary;
        background: $surface;
        padding: 0 1;
    }
    #prompt-hint {
        height: auto;
        color: $text-muted;
    }
    """

    BINDINGS = [Binding("escape", "cancel", "cancel", show=False)]

    def __init__(self, title: str, hint: str = "", value: str = "", placeholder: str = "") -> None:
        super().__init__()
        self.title_text = title
        self.hint = hint
        self.value = value
        self.placeholder = placeholder

    def compose(self) -> ComposeResult:
        with Vertical(id="prompt-box") as box:
            box.border_title = self.title_text
            box.border_subtitle = "Enter: ok · Esc: cancel"
            yield Input(value=self.value, placeholder=self.placeholder, id="prompt-input")
            if self.hint:
                yield Static(self.hint, id="prompt-hint", markup=False)

    def on_mount(self) -> None:
        field = self.query_one("#prompt-input", Input)
        field.cursor_blink = not self.app.ssh  # type: ignore[attr-defined]
        field.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)
