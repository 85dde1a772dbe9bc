"""The recording file: versions, the committed format-1 fixture, compaction, damage and truncation."""

from __future__ import annotations

import json
import shutil
import sqlite3
import zlib
from pathlib import Path

import pytest

from lpxtop.model.events import SampleEvent
from lpxtop.model.probe import Sample
from lpxtop.record import store
from lpxtop.record.codec import Encoder
from lpxtop.record.reading import Recording
from lpxtop.record.replay import ReplaySource
from lpxtop.record.store import RecordingError, StoreReader, StoreWriter, is_recording
from tests.support.paths import FIXTURES

V1 = FIXTURES / "recordings" / "v1-sim.lpxrec"


def write_events(path: Path, seconds: int, per_second: int = 5, compact_every: int | None = None) -> int:
    """A synthetic recording: `per_second` samples a second, one commit a second, t from 1000."""
    writer = StoreWriter(path, {"window_s": 300.0})
    encoder = Encoder()
    seq = 0
    for second in range(seconds):
        events = []
        for k in range(per_second):
            seq += 1
            t = 1000.0 + second + k / per_second
            s = Sample(endpoint="e", wall_time=t, start_ns=seq, ok=True, ttft_ms=float(seq), e2e_ms=float(seq) + 1,
                       token_event_ms=(float(seq), float(seq) + 1), tokens_per_event=(1, 1), output_tokens=2)
            events.append((seq, t, encoder.type_name(SampleEvent), encoder.encode(SampleEvent("e", s))))
        layouts, encoder.new_layouts = encoder.new_layouts, []
        writer.write(layouts=layouts, events=events)
        if compact_every and (second + 1) % compact_every == 0:
            writer.compact()
    writer.close()
    return seq


def ttfts(path: Path) -> list[float]:
    with Recording(path) as rec:
        return [e.record.sample.ttft_ms for e in rec.events()]


def test_the_format_1_fixture_opens_and_replays():
    assert is_recording(V1)
    with Recording(V1) as rec:
        assert rec.store.version == 1
        kinds = {type(e.record).__name__ for e in rec.events()}
        assert {"SampleEvent", "ScrapeEvent", "GpuEvent", "SystemEvent", "AlertsEvent", "EndpointInfo",
                "ControlEvent"} <= kinds
        assert {m.kind for m in rec.marks()} >= {"alert", "bookmark", "load_step"}
        assert rec.damage_summary() is None
    source = ReplaySource(V1, at=None, playing=False)
    snap = source.snapshot_at(source.end)
    assert [v.name for v in snap.endpoints] == ["vllm-sim-a", "vllm-sim-b"]
    assert all(v.ttft_ms is not None for v in snap.endpoints)
    assert snap.interval_s == 0.75  # the interval change was replayed
    source.close()


def test_a_version_bump_still_reads_format_1(monkeypatch, tmp_path):
    # Simulate the next format: this lpxtop now writes 2 and still reads 1.
    monkeypatch.setattr(store, "FORMAT_VERSION", 2)
    newer = tmp_path / "v2.lpxrec"
    write_events(newer, 2)
    with Recording(newer) as rec:
        assert rec.store.version == 2
    copy = tmp_path / "v1.lpxrec"
    shutil.copy(V1, copy)
    with Recording(copy) as rec:
        assert rec.store.version == 1
        assert sum(1 for _ in rec.events()) > 20


def test_a_file_from_a_newer_lpxtop_says_to_upgrade(tmp_path):
    path = tmp_path / "future.lpxrec"
    write_events(path, 1)
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {store.FORMAT_VERSION + 1}")
    db.close()
    with pytest.raises(RecordingError, match="newer lpxtop.*upgrade"):
        StoreReader(path)


def test_other_files_are_refused_and_never_overwritten(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(RecordingError, match="not an lpxtop recording"):
        StoreReader(text)
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(RecordingError, match="not an lpxtop recording"):
        StoreReader(other)
    with pytest.raises(RecordingError, match="already exists"):
        StoreWriter(other, {})
    assert not is_recording(other)


def test_compaction_keeps_every_event_in_order_and_takes_less_room(tmp_path):
    compacted = tmp_path / "compacted.lpxrec"
    n = write_events(compacted, 30, compact_every=10)
    assert ttfts(compacted) == [float(i) for i in range(1, n + 1)]
    writer = StoreWriter(tmp_path / "w.lpxrec", {})
    encoder = Encoder()
    for second in range(10):
        s = Sample(endpoint="e", wall_time=second, start_ns=0, ok=True, ttft_ms=float(second))
        writer.write(events=[(second + 1, float(second), encoder.type_name(SampleEvent),
                              encoder.encode(SampleEvent("e", s)))], layouts=encoder.new_layouts)
        encoder.new_layouts = []
    before = writer.payload_bytes
    writer.compact()
    assert writer.payload_bytes < 0.5 * before
    writer.close()
    with Recording(compacted) as rec:
        assert rec.store.chunk_count() == 3
        # a read from the middle of a compacted chunk starts after the given event
        assert [e.seq for e in rec.events(after_seq=42)][:2] == [43, 44]
        assert [e.t for e in rec.events(t_from=1010.0, t_to=1010.5)] == [1010.0, 1010.2, 1010.4]


def test_compaction_writes_chunks_no_larger_than_a_reader_accepts(tmp_path, monkeypatch):
    """Readers refuse a chunk that inflates past store.MAX_UNPACKED_BYTES (a decompression bomb): the
    writer's compaction splits a minute into runs of at most COMPACT_MAX_RAW bytes, so lpxtop never writes
    one it would refuse."""
    path = tmp_path / "r.lpxrec"
    one_second = len(store.dump([[1000.0, "SampleEvent", [0] * 40]] * 5))
    monkeypatch.setattr(store, "COMPACT_MAX_RAW", 3 * one_second)
    n = write_events(path, 30, compact_every=10)
    assert ttfts(path) == [float(i) for i in range(1, n + 1)]
    with Recording(path) as rec:
        assert rec.store.chunk_count() > 3 and rec.damage_summary() is None
        db = sqlite3.connect(path)
        for codec, data in db.execute("SELECT codec, data FROM chunks"):
            assert len(zlib.decompress(data) if codec == "z" else data) <= 3 * one_second + 2
        db.close()


def test_a_corrupt_chunk_is_skipped_and_reported(tmp_path):
    path = tmp_path / "r.lpxrec"
    write_events(path, 10, compact_every=2)  # 5 chunks of 10 events
    db = sqlite3.connect(path)
    db.execute("UPDATE chunks SET data = x'deadbeef' WHERE seq_first = 11")
    db.commit()
    db.close()
    values = ttfts(path)
    assert len(values) == 40 and 11.0 not in values and 20.0 not in values and 10.0 in values and 21.0 in values
    with Recording(path) as rec:
        list(rec.events())
        summary = rec.damage_summary()
    assert summary is not None and "1 damaged chunk" in summary and "corrupt" in summary


def test_a_truncated_file_opens_with_what_is_intact(tmp_path):
    path = tmp_path / "r.lpxrec"
    write_events(path, 400, per_second=20, compact_every=10)  # 40 chunks over ~60 pages
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(size * 2 // 3)
    with Recording(path) as rec:
        values = [e.record.sample.ttft_ms for e in rec.events()]
        summary = rec.damage_summary()
    assert 100 < len(values) < 8000
    assert values == sorted(values) and values[0] == 1.0  # what is there is intact and in order
    assert summary is not None


@pytest.mark.parametrize("text, deep", [
    ("[" * store.MAX_JSON_DEPTH + "]" * store.MAX_JSON_DEPTH, False),
    ("[" * (store.MAX_JSON_DEPTH + 1) + "]" * (store.MAX_JSON_DEPTH + 1), True),
    ('[{"a": ' * 32 + "1" + "}]" * 32, False),  # 64, alternating
    ("[[],[" * 70 + "]]" * 70, True),  # one level more for each `[[],`: no long run of `[` until the `[]` go
    ("[[],[" * 31 + "]]" * 31, False),
    ('["' + "[" * 500 + '"]', False),  # brackets inside a string are text
    ("[" * 100_000 + "]" * 100_000, True),  # far past Python's recursion limit, refused in one scan
])
def test_loads_refuses_nesting_past_the_limit_however_it_is_built(text, deep):
    if deep:
        with pytest.raises(ValueError, match="too deep"):
            store.loads(text)
    else:
        assert store.loads(text) == json.loads(text)
