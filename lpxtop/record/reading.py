"""A recording opened for reading: its events decoded back into the engine's records, in stream order."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lpxtop.engine import DEFAULT_MAX_SAMPLES, DEFAULT_WINDOW_S
from lpxtop.model.snapshot import Snapshot
from lpxtop.record.codec import DecodeError, Decoder, record_types
from lpxtop.record.records import KEYFRAME_TYPE, STREAM_TYPES, Mark
from lpxtop.record.store import StoreReader, is_seq, is_time
from lpxtop.record.timeparse import format_moment

TYPES = record_types((*STREAM_TYPES, KEYFRAME_TYPE))
# The largest settings a recording may carry (a crafted 1e308 would make every window endless).
MAX_WINDOW_S = 86_400.0 * 366
MAX_SAMPLES = 10_000_000


@dataclass(frozen=True)
class Event:
    """One recorded input: its place in the stream, when it happened (Unix seconds), the record."""

    seq: int
    t: float
    record: Any


class Recording:
    """Read access to one file. Damage is noted, never raised: see `damage_summary()`."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.store = StoreReader(path)
        self.decoder = Decoder(self.store.layouts, TYPES)
        meta = self.store.meta
        self.window_s = float(self._setting("window_s", DEFAULT_WINDOW_S, 1.0, MAX_WINDOW_S))
        self.max_samples = int(self._setting("max_samples", DEFAULT_MAX_SAMPLES, 1, MAX_SAMPLES))
        pruned = meta.get("pruned_after_seq")
        self.pruned_after_seq = pruned if is_seq(pruned) else None
        self._skipped_types: set[str] = set()

    def _setting(self, key: str, default: float, low: float, high: float) -> float:
        """A number from the file's settings, within what lpxtop itself accepts, else the default (said)."""
        value = self.store.meta.get(key)
        if value is None:
            return default
        if isinstance(value, (int, float)) and not isinstance(value, bool) and low <= value <= high:
            return value
        self.store.damage.note(f"the recording's {key} ({str(value)[:40]}) is not one lpxtop writes; "
                               f"{default:g} is used")
        return default

    @property
    def meta(self) -> dict[str, Any]:
        return self.store.meta

    def refresh(self) -> None:
        """A file still being written: pick up layouts added since it was opened."""
        self.store.refresh()
        self.decoder.add_layouts(self.store.layouts)

    def time_range(self) -> tuple[float, float] | None:
        return self.store.time_range()

    def events(
        self,
        *,
        after_seq: int | None = None,
        t_from: float | None = None,
        t_to: float | None = None,
        types: tuple[type, ...] | None = None,
    ) -> Iterator[Event]:
        """Events after `after_seq` (and within [t_from, t_to] when given), oldest first; only `types`
        when given (the others are not decoded)."""
        names = {cls.__name__ for cls in types} if types is not None else None
        for chunk in self.store.chunks(after_seq=after_seq, t_from=t_from, t_to=t_to):
            for index, item in enumerate(chunk.events):
                seq = chunk.seq_first + index
                if after_seq is not None and seq <= after_seq:
                    continue
                try:
                    t, name, values = item
                    if not is_time(t) or not isinstance(name, str):
                        raise ValueError
                except (TypeError, ValueError):
                    self.store.damage.note(f"chunk {chunk.id}: a malformed event", chunk.id,
                                           (chunk.t_first, chunk.t_last))
                    continue
                if (t_from is not None and t < t_from) or (t_to is not None and t > t_to):
                    continue
                if names is not None and name not in names:
                    continue
                try:
                    record = self.decoder.decode(name, values)
                except (DecodeError, TypeError, ValueError, KeyError, AttributeError) as exc:
                    if name not in self._skipped_types:
                        self._skipped_types.add(name)
                        self.store.damage.note(f"some {name} records could not be read ({exc})")
                    continue
                yield Event(seq, t, record)

    def keyframe_before(self, t: float, strictly: bool = True) -> tuple[int, float, Snapshot] | None:
        """The newest keyframe before `t`, decoded: (after_seq, t, snapshot without sample windows)."""
        found = self.store.keyframe_before(t, strictly)
        return self._keyframe(found)

    def first_keyframe(self) -> tuple[int, float, Snapshot] | None:
        return self._keyframe(self.store.first_keyframe())

    def _keyframe(self, found: tuple[int, float, Any] | None) -> tuple[int, float, Snapshot] | None:
        if found is None:
            return None
        after_seq, t, values = found
        try:
            return after_seq, t, self.decoder.record(KEYFRAME_TYPE, values)
        except (DecodeError, TypeError, ValueError, KeyError) as exc:
            self.store.damage.note(f"a keyframe could not be read ({exc})")
            return None

    def marks(self) -> list[Mark]:
        return [Mark(t, kind, payload) for t, kind, payload in self.store.marks()]

    def damage_summary(self) -> str | None:
        """What was lost, for a status line; None when everything read so far was intact."""
        damage = self.store.damage
        if not damage.any:
            return None
        text = "; ".join(damage.problems[:2])
        if damage.lost_chunks:
            span = ""
            if damage.lost_from is not None and damage.lost_to is not None:
                span = f" ({format_moment(damage.lost_from)}–{format_moment(damage.lost_to)})"
            text = f"{damage.lost_chunks} damaged chunk(s) skipped{span}; {text}"
        if len(damage.problems) > 2:
            text += f" (+{len(damage.problems) - 2} more)"
        return text

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Recording:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
