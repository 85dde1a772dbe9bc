"""The recording file: SQLite (standard library), WAL, append-only, one transaction about once a second.

Tables (format 1):

- `meta(key, value)`: format version, lpxtop version, host, when it began, the engine's window settings;
- `layouts(name, fields)`: each record type's field names, in the order its values are stored
  (see codec.py): how a newer lpxtop reads an older file, and the reverse for fields it does not know;
- `chunks`: the event stream, its events as zlib-compressed JSON arrays of `[t, type, values]`, numbered
  in the order the engine's loop produced them (`seq_first`..`seq_last`), which is the order replay
  applies them in. Each commit (about a second) adds a chunk; once a minute the writer replaces that
  minute's chunks with one (`compact`), in one transaction: compressing a minute at once takes ~40 %
  less room than a second at a time (the same field names, endpoint names, models and ports recur),
  and a row a minute instead of one a second wastes less of SQLite's pages;
- `keyframes`: every minute, the published snapshot without its sample windows, placed after the event
  `after_seq`. Replay starts from one instead of from the beginning, and retention can drop what is
  older;
- `marks`: alerts that began, restarts, load-test steps and bookmarks, uncompressed, by time.

The format version is SQLite's `user_version` (readable however damaged `meta` is) and the file is
marked with an `application_id`, so retention never deletes a file lpxtop did not write.

Damage: a killed writer loses at most the last uncommitted second (WAL); a truncated or corrupt file is
read chunk by chunk, the unreadable ones counted and reported (`StoreReader.damage`). A crafted file is
damage too, never an exception: a chunk or keyframe inflates to at most MAX_UNPACKED_BYTES (a
decompression bomb is refused at that size), JSON nests at most MAX_JSON_DEPTH deep, and every value a
row, an event or a mark holds is checked for the type the writer puts there (codec.py checks the
records' fields) before anything reads it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import sqlite3
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lpxtop.record.fileformat import APPLICATION_ID, FORMAT_VERSION, OLDEST_READABLE, is_recording  # noqa: F401

# Consecutive missing or unreadable rows after which the row-by-row salvage stops looking.
SALVAGE_GAP = 20_000
ZLIB_LEVEL = 6
WAL_CHECKPOINT_PAGES = 256
WAL_SIZE_LIMIT = 2_000_000
COMPACT_LEVEL = 9
# Bounds on what a reader accepts (a crafted file must not exhaust memory or the stack): a chunk or
# keyframe inflates to at most MAX_UNPACKED_BYTES (the writer's compaction stays under COMPACT_MAX_RAW),
# and JSON nests at most MAX_JSON_DEPTH deep (lpxtop's records: about ten).
MAX_UNPACKED_BYTES = 32 * 2**20
COMPACT_MAX_RAW = 16 * 2**20
MAX_JSON_DEPTH = 64
MAX_TIME = 253_402_300_799.0  # 9999-12-31T23:59:59Z: the last moment Python's time functions show

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS layouts (name TEXT PRIMARY KEY, fields TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY,
    seq_first INTEGER NOT NULL,
    seq_last INTEGER NOT NULL,
    t_first REAL NOT NULL,
    t_last REAL NOT NULL,
    codec TEXT NOT NULL,
    data BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_t_last ON chunks (t_last);
CREATE UNIQUE INDEX IF NOT EXISTS chunks_seq_last ON chunks (seq_last);
CREATE TABLE IF NOT EXISTS keyframes (
    id INTEGER PRIMARY KEY,
    after_seq INTEGER NOT NULL,
    t REAL NOT NULL,
    codec TEXT NOT NULL,
    data BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS keyframes_t ON keyframes (t);
CREATE TABLE IF NOT EXISTS marks (id INTEGER PRIMARY KEY, t REAL NOT NULL, kind TEXT NOT NULL, payload TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS marks_t ON marks (t);
"""


class RecordingError(Exception):
    """A recording cannot be created, opened or read; the message says why and what to do."""


class RecordingExists(RecordingError):
    """The file to record to exists already (a usage error: lpxtop never appends to or shares a recording)."""


def dump(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def pack(value: Any, level: int = ZLIB_LEVEL) -> tuple[str, bytes]:
    """JSON, zlib-compressed when that makes it smaller ("z"), else as is ("j")."""
    return pack_raw(dump(value), level)


def pack_raw(raw: bytes, level: int = ZLIB_LEVEL) -> tuple[str, bytes]:
    packed = zlib.compress(raw, level)
    return ("z", packed) if len(packed) < len(raw) else ("j", raw)


def unpack(codec: str, data: bytes, max_bytes: int = MAX_UNPACKED_BYTES) -> Any:
    """A chunk's or keyframe's value. ValueError when it is not one lpxtop could have written: an unknown
    codec, more than `max_bytes` once decompressed (a decompression bomb is never inflated past that),
    JSON that does not parse or is nested deeper than MAX_JSON_DEPTH."""
    if not isinstance(data, bytes) or not isinstance(codec, str):
        raise ValueError(f"a {type(data).__name__} where compressed bytes belong")
    if codec == "z":
        inflater = zlib.decompressobj()
        raw = inflater.decompress(data, max_bytes + 1)
        if len(raw) > max_bytes or inflater.unconsumed_tail:
            raise ValueError(f"larger than {max_bytes // 2**20} MiB once decompressed (lpxtop writes at most "
                             f"{COMPACT_MAX_RAW // 2**20} MiB a chunk): a decompression bomb?")
        data = raw
    elif codec != "j":
        raise ValueError(f"unknown chunk codec {codec[:20]!r}")
    elif len(data) > max_bytes:
        raise ValueError(f"larger than {max_bytes // 2**20} MiB")
    return loads(data)


_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
# More levels open in a row than MAX_JSON_DEPTH passes could close (a pass closes at most two, `[{}]`): too deep,
# said in one scan (a crafted 100,000-deep chunk took 64 passes, 47 ms, for each of its reads).
_TOO_MANY_OPEN = re.compile(rb"[\[{]{%d}" % (2 * MAX_JSON_DEPTH + 1))


def loads(raw: bytes | str) -> Any:
    """`json.loads` of text from a recording, refusing (ValueError) nesting deeper than MAX_JSON_DEPTH:
    lpxtop's own records nest about ten deep, and a crafted file must not reach Python's recursion limit
    here or in any reader after (export, replay)."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    brackets = _JSON_STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    for _ in range(MAX_JSON_DEPTH):  # each pass removes the innermost level (or two, [{}])
        if _TOO_MANY_OPEN.search(brackets):
            raise ValueError(f"JSON nested too deep (more than {MAX_JSON_DEPTH} levels)")
        reduced = brackets.replace(b"[]", b"").replace(b"{}", b"")
        if len(reduced) == len(brackets):
            break  # empty, or unbalanced (json.loads says so)
        brackets = reduced
    else:
        if brackets:
            raise ValueError(f"JSON nested too deep (more than {MAX_JSON_DEPTH} levels)")
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("JSON nested too deep") from None


def is_time(value: Any) -> bool:
    """A Unix time lpxtop can show and write: a finite number from 1970 to the year 9999."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= MAX_TIME


def is_seq(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63


def _clock(t: float) -> str:
    import time

    return time.strftime("%H:%M:%S", time.localtime(t))


def _sqlite_problem(exc: BaseException) -> str:
    text = str(exc)
    if "full" in text or getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return f"the disk is full ({text})"
    if "readonly" in text or "read-only" in text or "unable to open" in text or isinstance(exc, PermissionError):
        return f"cannot write there ({text})"
    return text


class StoreWriter:
    """Creates a new recording and appends to it. Used from one thread (the recorder's writer)."""

    def __init__(self, path: str | Path, meta: Mapping[str, Any]) -> None:
        self.path = Path(path)
        # Set before anything can fail, so that close() after a failed open has what it reads.
        self._db: sqlite3.Connection = None  # type: ignore[assignment]
        # The chunks committed since the last compaction: (id, seq_first, seq_last, t_first, t_last, raw)
        self._recent: list[tuple[int, int, int, float, float, bytes]] = []
        self._recent_bytes = 0
        self.payload_bytes = 0  # compressed bytes of the chunks and keyframes now in the file
        self._identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the file this writer created
        self._create()
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._set_up(meta)
        except (OSError, sqlite3.Error, RecordingError) as exc:
            vanished = not self.still_there()
            self._abandon()
            if vanished:
                raise RecordingError(f"{self.path} was deleted or replaced while being created") from None
            if isinstance(exc, RecordingError):
                raise
            raise RecordingError(f"cannot write {self.path}: {_sqlite_problem(exc)}") from None

    def _create(self) -> None:
        """Create the file, exclusively: of two lpxtops started on one path at once, one creates it and the
        other is told it exists (a check before SQLite's own open would let both through)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RecordingError(f"cannot create {self.path}: {_sqlite_problem(exc)}") from None
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            raise RecordingExists(f"{self.path} already exists: lpxtop does not append to a recording (nor "
                                  "share one with another lpxtop writing it); choose another file name (or leave "
                                  "--out out for a new one)") from None
        except OSError as exc:
            raise RecordingError(f"cannot create {self.path}: {_sqlite_problem(exc)}") from None
        try:
            st = os.fstat(fd)
            self._identity = (st.st_dev, st.st_ino)
        finally:
            os.close(fd)

    def _set_up(self, meta: Mapping[str, Any]) -> None:
        db = self._db
        db.execute("PRAGMA auto_vacuum = INCREMENTAL")  # before any table: lets retention give space back
        db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        db.execute(f"PRAGMA user_version = {FORMAT_VERSION}")
        mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise RecordingError(f"{self.path}: SQLite refused WAL mode ({mode}); record to a local disk")
        # WAL + NORMAL: a commit survives the process being killed (not a power cut: then the last
        # second or so may go), and commits do not wait for the disk.
        db.execute("PRAGMA synchronous = NORMAL")
        # Each commit appends its pages (~4 a second) to the log: fold them into the file about once a
        # minute and keep the log file itself small.
        db.execute(f"PRAGMA wal_autocheckpoint = {WAL_CHECKPOINT_PAGES}")
        db.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")
        db.executescript(SCHEMA)
        with self.transaction():
            self._put_meta({"format_version": FORMAT_VERSION, **meta})

    def _abandon(self) -> None:
        """After a failed creation: close, and remove what this writer created (it holds nothing of use,
        and left behind it would make the next try say "already exists")."""
        db, self._db = self._db, None  # type: ignore[assignment]
        if db is not None:
            with contextlib.suppress(sqlite3.Error):
                db.close()
        if self._identity is None or not self.still_there():
            return
        for suffix in ("-wal", "-shm", ""):
            with contextlib.suppress(OSError):
                os.unlink(f"{self.path}{suffix}")

    def still_there(self) -> bool:
        """Whether the path still names the file this writer created (not deleted, its directory not
        removed, not replaced by another file): SQLite writes on into a deleted file without a word."""
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self._identity

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        db = self._db
        db.execute("BEGIN")
        try:
            yield db
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def _put_meta(self, meta: Mapping[str, Any]) -> None:
        self._db.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                             [(k, json.dumps(v)) for k, v in meta.items()])

    def write(
        self,
        *,
        layouts: Iterable[tuple[str, Iterable[str]]] = (),
        events: list[tuple[int, float, str, Any]] = (),  # type: ignore[assignment]
        keyframes: Iterable[tuple[int, float, Any]] = (),
        marks: Iterable[tuple[float, str, Mapping[str, Any]]] = (),
        meta: Mapping[str, Any] | None = None,
    ) -> int:
        """One transaction: new layouts, one chunk of events (seq, t, type, values), keyframes
        (after_seq, t, values), marks (t, kind, payload). Returns the bytes written for the chunk.
        Raises sqlite3.Error / OSError (the recorder stops on those)."""
        written = 0
        with self.transaction() as db:
            for name, fields in layouts:
                db.execute("INSERT OR REPLACE INTO layouts (name, fields) VALUES (?, ?)", (name, json.dumps(list(fields))))
            if events:
                raw = dump([[t, name, values] for _, t, name, values in events])
                codec, data = pack_raw(raw)
                row = (events[0][0], events[-1][0], min(e[1] for e in events), max(e[1] for e in events))
                cursor = db.execute(
                    "INSERT INTO chunks (seq_first, seq_last, t_first, t_last, codec, data) VALUES (?, ?, ?, ?, ?, ?)",
                    (*row, codec, data),
                )
                self._recent.append((int(cursor.lastrowid or 0), *row, raw))
                self._recent_bytes += len(data)
                written += len(data)
            for after_seq, t, values in keyframes:
                codec, data = pack(values)
                db.execute("INSERT INTO keyframes (after_seq, t, codec, data) VALUES (?, ?, ?, ?)",
                           (after_seq, t, codec, data))
                written += len(data)
            for t, kind, payload in marks:
                db.execute("INSERT INTO marks (t, kind, payload) VALUES (?, ?, ?)",
                           (t, kind, json.dumps(dict(payload), ensure_ascii=False)))
            if meta:
                self._put_meta(meta)
        self.payload_bytes += written
        return written

    def compact(self) -> int:
        """Replace the chunks committed since the last call by one, compressed together (one transaction,
        so a crash leaves either form). Returns the bytes of the new chunk (0 when there was nothing)."""
        recent, self._recent = self._recent, []
        old_bytes, self._recent_bytes = self._recent_bytes, 0
        if len(recent) < 2:
            return 0
        # consecutive runs of at most COMPACT_MAX_RAW bytes each (what a reader accepts is bounded)
        groups: list[list] = [[]]
        size = 0
        for r in recent:
            if groups[-1] and size + len(r[5]) > COMPACT_MAX_RAW:
                groups.append([])
                size = 0
            groups[-1].append(r)
            size += len(r[5])
        written = 0
        with self.transaction() as db:
            db.executemany("DELETE FROM chunks WHERE id = ?", [(r[0],) for r in recent])
            for group in groups:
                raw = b"[" + b",".join(r[5][1:-1] for r in group if len(r[5]) > 2) + b"]"
                codec, data = pack_raw(raw, COMPACT_LEVEL)
                db.execute(
                    "INSERT INTO chunks (seq_first, seq_last, t_first, t_last, codec, data) VALUES (?, ?, ?, ?, ?, ?)",
                    (group[0][1], group[-1][2], min(r[3] for r in group), max(r[4] for r in group), codec, data),
                )
                written += len(data)
        self.payload_bytes += written - old_bytes
        return written

    def size_bytes(self) -> int:
        total = 0
        for suffix in ("", "-wal"):
            with contextlib.suppress(OSError):
                total += os.path.getsize(f"{self.path}{suffix}")
        return total

    def prune_before(self, t_cut: float) -> int:
        """Drop what only moments before `t_cut` need: replay then starts at the newest keyframe at or
        before `t_cut` (the keyframe carries the state). Returns the chunks dropped."""
        db = self._db
        row = db.execute("SELECT id, after_seq FROM keyframes WHERE t <= ? ORDER BY t DESC LIMIT 1", (t_cut,)).fetchone()
        if row is None:
            return 0
        keep_id, after_seq = row
        if any(r[2] <= after_seq for r in self._recent):
            self.compact()  # keeps the bookkeeping simple: what is pruned next is all compacted
        with self.transaction():
            dropped = db.execute("DELETE FROM chunks WHERE seq_last <= ?", (after_seq,)).rowcount
            db.execute("DELETE FROM keyframes WHERE id < ?", (keep_id,))
            db.execute("DELETE FROM marks WHERE t < (SELECT t FROM keyframes WHERE id = ?)", (keep_id,))
            self._put_meta({"pruned_after_seq": after_seq})
        with contextlib.suppress(sqlite3.Error):
            db.execute("PRAGMA incremental_vacuum")
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return dropped

    def oldest_times(self, fraction: float) -> float | None:
        """The time by which `fraction` of the stream's chunks were written (for size-based pruning)."""
        db = self._db
        count = db.execute("SELECT count(*) FROM chunks").fetchone()[0]
        if not count:
            return None
        row = db.execute("SELECT t_last FROM chunks ORDER BY id LIMIT 1 OFFSET ?",
                         (max(0, int(count * fraction) - 1),)).fetchone()
        return row[0] if row else None

    def close(self) -> None:
        db = getattr(self, "_db", None)
        if db is None:
            return
        with contextlib.suppress(sqlite3.Error):
            self.compact()
        self._db = None  # type: ignore[assignment]
        with contextlib.suppress(sqlite3.Error):
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        with contextlib.suppress(sqlite3.Error):
            db.close()


def _row_ok(row: tuple) -> bool:
    """A chunk row's columns hold what the writer puts there (SQLite stores any value in any column)."""
    _, seq_first, seq_last, t_first, t_last, _, _ = row
    return (is_seq(seq_first) and is_seq(seq_last) and seq_first <= seq_last and is_time(t_first)
            and is_time(t_last))


def _layout(fields: Any) -> list[str] | None:
    try:
        layout = loads(fields) if isinstance(fields, (str, bytes)) else None
    except ValueError:
        return None
    if isinstance(layout, list) and all(isinstance(f, str) for f in layout):
        return layout
    return None


@dataclass
class ChunkRow:
    id: int
    seq_first: int
    seq_last: int
    t_first: float
    t_last: float
    events: list  # [t, type, values] each


@dataclass
class Damage:
    """What could not be read, in a form a person can act on."""

    lost_chunks: int = 0
    lost_from: float | None = None
    lost_to: float | None = None
    problems: list[str] = field(default_factory=list)
    lost_ids: set[int] = field(default_factory=set)

    def note(self, problem: str, chunk_id: int | None = None, t: tuple[float, float] | None = None) -> None:
        if chunk_id is not None:
            if chunk_id in self.lost_ids:
                return
            self.lost_ids.add(chunk_id)
            self.lost_chunks += 1
        if t is not None:
            self.lost_from = t[0] if self.lost_from is None else min(self.lost_from, t[0])
            self.lost_to = t[1] if self.lost_to is None else max(self.lost_to, t[1])
        if len(self.problems) < 20 and problem not in self.problems:
            self.problems.append(problem)

    @property
    def any(self) -> bool:
        return bool(self.problems)


class StoreReader:
    """Reads a recording, also one being written by another process, and also a damaged one."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise RecordingError(f"{self.path}: no such file")
        if not is_recording(self.path):
            raise RecordingError(f"{self.path} is not an lpxtop recording (no SQLite header with lpxtop's id)")
        self.damage = Damage()
        self._db, self.version = self._open()
        if self.version > FORMAT_VERSION:
            raise RecordingError(
                f"{self.path} was written by a newer lpxtop (recording format {self.version}; this lpxtop reads "
                f"formats {OLDEST_READABLE} to {FORMAT_VERSION}): upgrade lpxtop to read it"
            )
        if self.version < OLDEST_READABLE:
            raise RecordingError(f"{self.path}: recording format {self.version} is too old for this lpxtop")
        self.meta = self._read_meta()
        self.layouts = self._read_layouts()

    def _open(self) -> tuple[sqlite3.Connection, int]:
        problem: BaseException | None = None
        # Read-write when allowed (SQLite then replays the WAL a killed writer left behind), else read-only.
        for target, uri in ((str(self.path), False), (f"file:{self.path}?mode=ro", True)):
            try:
                db = sqlite3.connect(target, uri=uri, isolation_level=None, check_same_thread=False)
            except sqlite3.Error as exc:
                problem = exc
                continue
            try:
                db.execute("PRAGMA query_only = ON")
                return db, int(db.execute("PRAGMA user_version").fetchone()[0])
            except sqlite3.DatabaseError as exc:
                problem = exc
            try:
                # A file cut short (copied while written, a full disk): SQLite refuses it as a whole unless
                # told to trust the pages that are there. Safe here: this connection never writes.
                db.execute("PRAGMA writable_schema = ON")
                version = int(db.execute("PRAGMA user_version").fetchone()[0])
                self.damage.note("the file is shorter than SQLite's header says (truncated): what is missing "
                                 "is skipped")
                return db, version
            except sqlite3.DatabaseError as exc:
                problem = exc
                db.close()
        raise RecordingError(f"{self.path}: cannot open the recording: {problem}")

    def _read_meta(self) -> dict[str, Any]:
        meta: dict[str, Any] = {}
        try:
            for key, value in self._db.execute("SELECT key, value FROM meta"):
                try:
                    meta[str(key)] = loads(value if isinstance(value, (str, bytes)) else str(value))
                except ValueError as exc:
                    self.damage.note(f"the recording's setting {str(key)[:40]!r} could not be read ({exc})")
        except sqlite3.Error as exc:
            self.damage.note(f"the recording's settings could not be read ({exc}); defaults used")
        return meta

    def _read_layouts(self) -> dict[str, list[str]]:
        layouts: dict[str, list[str]] = {}
        try:
            for name, fields in self._db.execute("SELECT name, fields FROM layouts"):
                layout = _layout(fields)
                if isinstance(name, str) and layout is not None:
                    layouts[name] = layout
                else:
                    self.damage.note(f"the layout of {str(name)[:40]!r} records could not be read: they are "
                                     "skipped")
        except sqlite3.Error as exc:
            self.damage.note(f"the record layouts could not be read ({exc}): nothing can be decoded")
        return layouts

    def refresh(self) -> None:
        """Pick up layouts a live writer added since opening."""
        with contextlib.suppress(sqlite3.Error):
            for name, fields in self._db.execute("SELECT name, fields FROM layouts"):
                layout = _layout(fields)
                if isinstance(name, str) and layout is not None:
                    self.layouts[name] = layout

    def time_range(self) -> tuple[float, float] | None:
        """First and last event times (from the intact chunks), or None for an empty recording."""
        for sql in ("SELECT min(t_first), max(t_last) FROM chunks", None):
            if sql is None:
                break
            try:
                row = self._db.execute(sql).fetchone()
                if row and is_time(row[0]) and is_time(row[1]):
                    return float(row[0]), float(row[1])
                if row is None or (row[0] is None and row[1] is None):
                    return None
            except sqlite3.Error:
                pass  # (a crafted time: the chunks below are read one by one, each checked)
        first = last = None
        for chunk in self.chunks():
            first = chunk.t_first if first is None else min(first, chunk.t_first)
            last = chunk.t_last if last is None else max(last, chunk.t_last)
        return (first, last) if first is not None and last is not None else None

    def chunks(
        self, *, after_seq: int | None = None, t_from: float | None = None, t_to: float | None = None
    ) -> Iterator[ChunkRow]:
        """Chunks in stream order holding events after `after_seq` and overlapping [t_from, t_to];
        unreadable ones are skipped and noted in `damage`."""
        where, args = ["1"], []
        if after_seq is not None:
            where.append("seq_last > ?")
            args.append(after_seq)
        if t_from is not None:
            where.append("t_last >= ?")
            args.append(t_from)
        if t_to is not None:
            where.append("t_first <= ?")
            args.append(t_to)
        sql = ("SELECT id, seq_first, seq_last, t_first, t_last, codec, data FROM chunks WHERE "
               + " AND ".join(where) + " ORDER BY seq_last")
        last_id = 0
        try:
            for row in self._db.execute(sql, args):
                last_id = row[0]
                chunk = self._decode_chunk(row)
                if chunk is not None:
                    yield chunk
            return
        except sqlite3.DatabaseError as exc:
            self.damage.note(f"the chunk table is damaged after chunk {last_id} ({exc}); reading the rest row by row")
        yield from self._salvage(last_id + 1, after_seq, t_from, t_to)

    def _salvage(self, start_id: int, after_seq: int | None, t_from: float | None, t_to: float | None) -> Iterator[ChunkRow]:
        """Row by row, after the table itself failed: unreadable rows are counted, the readable ones kept."""
        misses = 0
        chunk_id = start_id
        failed: list[int] = []
        last_ok: tuple[int, float] | None = None  # id and end time of the last readable row
        while misses < SALVAGE_GAP:
            try:
                row = self._db.execute(
                    "SELECT id, seq_first, seq_last, t_first, t_last, codec, data FROM chunks WHERE id = ?", (chunk_id,)
                ).fetchone()
            except sqlite3.DatabaseError:
                row = None
                failed.append(chunk_id)
            chunk_id += 1
            if row is None:
                misses += 1
                continue
            misses = 0
            if not _row_ok(row):
                self._decode_chunk(row)  # notes the damage
                continue
            last_ok = (row[0], row[4])
            if after_seq is not None and row[2] <= after_seq:
                continue
            if (t_from is not None and row[4] < t_from) or (t_to is not None and row[3] > t_to):
                continue
            chunk = self._decode_chunk(row)
            if chunk is not None:
                yield chunk
        for lost in failed:
            if last_ok is not None and lost < last_ok[0]:
                self.damage.note("some chunks are unreadable (the file is damaged)", lost)
        if failed and (last_ok is None or failed[-1] > last_ok[0]):
            after = f" after {_clock(last_ok[1])}" if last_ok is not None else ""
            self.damage.note(f"nothing{after} could be read: the rest of the file is damaged or missing")

    def _decode_chunk(self, row: tuple) -> ChunkRow | None:
        chunk_id, seq_first, seq_last, t_first, t_last, codec, data = row
        span = (t_first, t_last) if is_time(t_first) and is_time(t_last) else None
        try:
            if not _row_ok(row):
                raise ValueError("its sequence numbers or times are not numbers lpxtop writes")
            events = unpack(codec, data)
            if not isinstance(events, list) or len(events) != seq_last - seq_first + 1:
                raise ValueError("wrong number of events")
        except (zlib.error, ValueError, TypeError) as exc:
            self.damage.note(f"chunk {chunk_id} is corrupt ({exc})", chunk_id if is_seq(chunk_id) else None, span)
            return None
        return ChunkRow(chunk_id, seq_first, seq_last, t_first, t_last, events)

    def keyframe_before(self, t: float, strictly: bool = True) -> tuple[int, float, Any] | None:
        """The newest readable keyframe before `t`: (after_seq, t, values)."""
        op = "<" if strictly else "<="
        try:
            rows = self._db.execute(
                f"SELECT id, after_seq, t, codec, data FROM keyframes WHERE t {op} ? ORDER BY t DESC LIMIT 5", (t,)
            ).fetchall()
        except sqlite3.DatabaseError as exc:
            self.damage.note(f"the keyframes are damaged ({exc}); replaying from the beginning")
            return None
        for kid, after_seq, kt, codec, data in rows:
            try:
                if not (is_seq(after_seq) and is_time(kt)):
                    raise ValueError("its place or time is not a number lpxtop writes")
                return after_seq, kt, unpack(codec, data)
            except (zlib.error, ValueError) as exc:
                self.damage.note(f"keyframe {kid} is corrupt ({exc})")
        return None

    def first_keyframe(self) -> tuple[int, float, Any] | None:
        try:
            row = self._db.execute("SELECT after_seq, t, codec, data FROM keyframes ORDER BY t LIMIT 1").fetchone()
            if row is None:
                return None
            if not (is_seq(row[0]) and is_time(row[1])):
                raise ValueError("its place or time is not a number lpxtop writes")
            return row[0], row[1], unpack(row[2], row[3])
        except (zlib.error, ValueError) as exc:
            self.damage.note(f"the first keyframe is corrupt ({exc})")
            return None
        except sqlite3.DatabaseError:
            return None

    def marks(self) -> list[tuple[float, str, dict]]:
        try:
            rows = self._db.execute("SELECT t, kind, payload FROM marks ORDER BY t, id").fetchall()
        except sqlite3.DatabaseError as exc:
            self.damage.note(f"the marks (alerts, bookmarks, load steps) are damaged ({exc})")
            return []
        marks = []
        for t, kind, payload in rows:
            if not is_time(t) or not isinstance(kind, str):
                self.damage.note("a mark with no readable time or kind is skipped")
                continue
            try:
                value = loads(payload) if isinstance(payload, (str, bytes)) else None
            except ValueError as exc:
                self.damage.note(f"a {kind[:40]} mark's details could not be read ({exc})")
                value = {}
            if not isinstance(value, dict):
                self.damage.note(f"a {kind[:40]} mark's details are not an object: left out")
                value = {}
            marks.append((float(t), kind, value))
        return marks

    def chunk_count(self) -> int | None:
        with contextlib.suppress(sqlite3.Error):
            return int(self._db.execute("SELECT count(*) FROM chunks").fetchone()[0])
        return None

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._db.close()

    def __enter__(self) -> StoreReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
