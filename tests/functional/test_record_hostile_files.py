"""Recordings crafted to hurt the reader: a decompression bomb, JSON nested deeper than any parser's
stack, values of the wrong type in every place a file holds them (chunk rows, events, record fields,
keyframes, marks, settings, layouts). Every reader of a recording (export in each format, replay,
compare) says "damaged, here is what was intact" and never raises; the bomb is read within bounded
memory (a real process, its peak RSS measured)."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from lpxtop.cli.entry import main
from lpxtop.record import store
from lpxtop.record.replay import ReplaySource
from tests.support.paths import FIXTURES, REPO

pytestmark = pytest.mark.timeout(120)
V1 = FIXTURES / "recordings" / "v1-sim.lpxrec"
DEEP = 100_000


def _first_chunk(db: sqlite3.Connection) -> tuple[int, int, int, list]:
    chunk_id, first, last, codec, data = db.execute(
        "SELECT id, seq_first, seq_last, codec, data FROM chunks ORDER BY id LIMIT 1").fetchone()
    return chunk_id, first, last, store.unpack(codec, data)


def _set_events(db: sqlite3.Connection, change: Callable[[list], None]) -> None:
    chunk_id, _, _, events = _first_chunk(db)
    change(events)
    db.execute("UPDATE chunks SET codec = 'j', data = ? WHERE id = ?",
               (json.dumps(events).encode(), chunk_id))


def _sample_values(events: list) -> list:
    return next(e for e in events if e[1] == "SampleEvent")[2]


def _bomb(megabytes: int) -> bytes:
    packer = zlib.compressobj(1)
    block = b" " * (1 << 20)
    parts = [packer.compress(b"[")]
    parts += [packer.compress(block) for _ in range(megabytes)]
    parts += [packer.compress(b"]"), packer.flush()]
    return b"".join(parts)


def _deep_json() -> bytes:
    return b"[" * DEEP + b"]" * DEEP


def _field(db: sqlite3.Connection, type_name: str, field: str) -> int:
    fields = json.loads(db.execute("SELECT fields FROM layouts WHERE name = ?", (type_name,)).fetchone()[0])
    return fields.index(field)


MUTATIONS: dict[str, Callable[[sqlite3.Connection], None]] = {
    "chunk: deep JSON": lambda db: db.execute("UPDATE chunks SET codec = 'j', data = ?", (_deep_json(),)),
    "chunk: compressed deep JSON": lambda db: db.execute("UPDATE chunks SET codec = 'z', data = ?",
                                                         (zlib.compress(_deep_json()),)),
    "chunk: JSON nested 900 deep": lambda db: db.execute(
        "UPDATE chunks SET codec = 'j', data = ?", (b"[" * 900 + b"]" * 900,)),
    "chunk: an object, not a list": lambda db: db.execute("UPDATE chunks SET codec = 'j', data = ?", (b'{"a": 1}',)),
    "chunk: data as text": lambda db: db.execute("UPDATE chunks SET codec = 'z', data = 'not bytes'"),
    "chunk: seq as text": lambda db: db.execute("UPDATE chunks SET seq_first = 'one', seq_last = 'two'"),
    "chunk: times as text": lambda db: db.execute("UPDATE chunks SET t_first = 'then', t_last = 'now'"),
    "chunk: times past the year 9999": lambda db: db.execute("UPDATE chunks SET t_first = 1e308, t_last = 1e308"),
    "event: time as text": lambda db: _set_events(db, lambda ev: ev[0].__setitem__(0, "noon")),
    "event: time NaN": lambda db: _set_events(db, lambda ev: ev[0].__setitem__(0, float("nan"))),
    "event: time 1e308": lambda db: _set_events(db, lambda ev: [e.__setitem__(0, 1e308) for e in ev]),
    "event: type as a list": lambda db: _set_events(db, lambda ev: ev[0].__setitem__(1, ["SampleEvent"])),
    "event: a number, not a triple": lambda db: _set_events(db, lambda ev: ev.__setitem__(0, 7)),
    "sample: ttft as text": lambda db: _set_events(db, lambda ev: _sample_values(ev)[1].__setitem__(
        _field(db, "Sample", "ttft_ms"), "fast")),
    "sample: itl as a dict": lambda db: _set_events(db, lambda ev: _sample_values(ev)[1].__setitem__(
        _field(db, "Sample", "token_event_ms"), {"a": 1})),
    "sample: ok as text": lambda db: _set_events(db, lambda ev: _sample_values(ev)[1].__setitem__(
        _field(db, "Sample", "ok"), "yes")),
    "sample: wall_time as text": lambda db: _set_events(db, lambda ev: _sample_values(ev)[1].__setitem__(
        _field(db, "Sample", "wall_time"), "noon")),
    "sample: a 400-digit integer": lambda db: _set_events(db, lambda ev: _sample_values(ev)[1].__setitem__(
        _field(db, "Sample", "output_tokens"), int("9" * 400))),
    "keyframe: deep JSON": lambda db: db.execute("UPDATE keyframes SET codec = 'z', data = ?",
                                                 (zlib.compress(_deep_json()),)),
    "keyframe: wrong types": lambda db: db.execute("UPDATE keyframes SET codec = 'j', data = ?, after_seq = 'x', t = 'y'",
                                                   (b'["a", {"b": 2}]',)),
    "mark: deep JSON payload": lambda db: db.execute("UPDATE marks SET payload = ?", (_deep_json().decode(),)),
    "mark: a list payload": lambda db: db.execute("UPDATE marks SET payload = '[1, 2]'"),
    "mark: time as text, kind a number": lambda db: db.execute("UPDATE marks SET t = 'noon', kind = 7"),
    "meta: window as text": lambda db: db.execute("UPDATE meta SET value = '\"wide\"' WHERE key = 'window_s'"),
    "meta: max_samples 1e308": lambda db: db.execute("UPDATE meta SET value = '1e308' WHERE key = 'max_samples'"),
    "meta: deep JSON": lambda db: db.execute("UPDATE meta SET value = ? WHERE key = 'window_s'", (_deep_json().decode(),)),
    "layouts: a number": lambda db: db.execute("UPDATE layouts SET fields = '7'"),
    "layouts: deep JSON": lambda db: db.execute("UPDATE layouts SET fields = ?", (_deep_json().decode(),)),
    "layouts: names that are not text": lambda db: db.execute("UPDATE layouts SET fields = '[[1], {\"a\": 2}]'"),
}


def _crafted(tmp_path: Path, name: str, mutate: Callable[[sqlite3.Connection], None]) -> Path:
    path = tmp_path / "crafted.lpxrec"
    shutil.copy(V1, path)
    db = sqlite3.connect(path, isolation_level=None)
    mutate(db)
    db.close()
    return path


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_a_crafted_recording_reads_as_damaged_never_raises(name, tmp_path, capsys):
    path = _crafted(tmp_path, name, MUTATIONS[name])
    for fmt, what in (("jsonl", None), ("csv", "probes"), ("csv", "marks"), ("openmetrics", None)):
        argv = ["export", str(path), "--format", fmt, *(["--what", what] if what else [])]
        code = main(argv)
        captured = capsys.readouterr()
        assert code in (0, 2), (argv, code, captured.err)
        if code == 2:  # nothing readable at all: said so, as a usage error names the file
            assert str(path) in captured.err
    assert main(["replay", str(path), "--compare", str(V1), "--json"]) in (0, 2)
    capsys.readouterr()
    try:
        source = ReplaySource(path, playing=False)
    except store.RecordingError:
        return
    try:
        for at in (source.start, (source.start + source.end) / 2, source.end):
            source.timeline.seek(at)
            source.snapshot()
        source.recording.first_keyframe()
        source.recording.keyframe_before(source.end + 60)
        source.recording.marks()
        assert source.recording.damage_summary(), "the damage was not said"
    finally:
        source.close()


def _split_first_chunk(path: Path, second: bytes | None) -> None:
    """The fixture's one chunk as two, the second replaced by `second` (compressed), or left out (None)."""
    db = sqlite3.connect(path, isolation_level=None)
    chunk_id, first, last, events = _first_chunk(db)
    half = len(events) // 2
    db.execute("UPDATE chunks SET seq_last = ?, codec = 'j', data = ? WHERE id = ?",
               (first + half - 1, json.dumps(events[:half]).encode(), chunk_id))
    if second is not None:
        db.execute("INSERT INTO chunks (seq_first, seq_last, t_first, t_last, codec, data) VALUES (?, ?, ?, ?, 'z', ?)",
                   (first + half, last, events[half][0], events[-1][0], zlib.compress(second)))
    db.close()


def test_the_intact_chunks_of_a_file_with_one_crafted_chunk_are_exported(tmp_path, capsys):
    """What was intact is kept and said: the export of a file whose second chunk is a crafted one holds
    exactly what the same file without that chunk holds, and stderr says what was skipped."""
    damaged, cut = tmp_path / "damaged.lpxrec", tmp_path / "cut.lpxrec"
    for path, second in ((damaged, _deep_json()), (cut, None)):
        shutil.copy(V1, path)
        _split_first_chunk(path, second)
    assert main(["export", str(cut)]) == 0
    expected = capsys.readouterr().out
    assert main(["export", str(damaged)]) == 0
    captured = capsys.readouterr()
    assert "1 damaged chunk(s) skipped" in captured.err and "too deep" in captured.err
    assert captured.out == expected and len(expected.splitlines()) > 10


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the peak RSS from /proc (Linux)")
def test_a_decompression_bomb_is_refused_within_bounded_memory(tmp_path):
    path = tmp_path / "bomb.lpxrec"
    shutil.copy(V1, path)
    bomb = _bomb(192)  # 192 MiB of JSON in ~1 MB
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("UPDATE chunks SET codec = 'z', data = ?", (bomb,))
    db.execute("UPDATE keyframes SET codec = 'z', data = ?", (bomb,))
    db.close()
    # The child's own peak: VmHWM of its address space (getrusage's ru_maxrss would count the pytest
    # process it was forked from, whose pages it shared until exec).
    probe = ("import sys; from lpxtop.cli.entry import main; code = main(sys.argv[1:]); "
             "peak = [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')]; "
             "print(peak[0], code)")
    result = subprocess.run([sys.executable, "-c", probe, "export", str(path)], capture_output=True, text=True,
                            timeout=60, cwd=REPO)
    assert "Traceback" not in result.stderr, result.stderr
    peak_kib, code = result.stdout.split()[-2:]
    assert code == "0" and "damaged chunk" in result.stderr and "larger than" in result.stderr
    peak_mb = int(peak_kib) / 1024
    assert peak_mb < 170, f"peak RSS {peak_mb:.0f} MB: the bomb was decompressed"
