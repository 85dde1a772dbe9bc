"""The confirmation before a signal: PID, user, command line; a refusal is shown instead of a 'yes'."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class ConfirmSignalScreen(ModalScreen[bool]):
    """Asks before sending a signal. Dismisses with True only when the user confirms.

    `body` holds what will be signalled (PID, user, command line, start time); `refusal`, when set,
    says why lpxtop will not send it, and the dialog then offers only "Close".
    """

    BINDINGS = [
        Binding("escape,n", "cancel", "cancel", show=False),
        Binding("y", "confirm", "yes", show=False),
    ]

    def __init__(self, title: str, body: str, refusal: str | None = None) -> None:
        super().__init__()
        self.title_text = title
        self.body = body
        self.refusal = refusal

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box") as box:
            box.border_title = self.title_text
            yield Static(self.body, id="confirm-body", markup=False)
            if self.refusal:
                yield Static(f"Refused: {self.refusal}", id="confirm-refusal", markup=False)
            with Horizontal(id="confirm-buttons"):
                if self.refusal:
                    yield Button("Close", id="confirm-cancel", variant="primary")
                else:
                    yield Button("Cancel (n)", id="confirm-cancel", variant="primary")
                    yield Button("Send (y)", id="confirm-yes", variant="error")

    def on_mount(self) -> None:
        # Safe default: Enter on the focused button cancels.
        self.query_one("#confirm-cancel", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "confirm-yes" and self.refusal is None)

    def action_cancel(self) -> None:
        self.dismiss(False)

    def action_confirm(self) -> None:
        self.dismiss(self.refusal is None)
