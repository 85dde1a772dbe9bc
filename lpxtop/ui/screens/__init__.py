"""The app's screens: main (tables and panels), endpoint detail, help, and the signal confirmation."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lpxtop.model.snapshot import Snapshot


def already_shown(shown: Snapshot | None, snap: Snapshot) -> bool:
    """Whether `snap` is what a screen last drew: the same object, or the same publication of a source
    that numbers them (`seq` 0: one that does not, so an equal number says nothing)."""
    return shown is not None and (snap is shown or (snap.seq == shown.seq and snap.seq != 0))
