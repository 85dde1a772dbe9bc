"""Retention by age and by size, in the file being written and in its directory; the record settings."""

from __future__ import annotations

import os
import time
from dataclasses import replace

import pytest

from lpxtop.checks import ConfigError
from lpxtop.config import load_config_file
from lpxtop.model.events import SampleEvent, SnapshotEvent
from lpxtop.model.probe import Sample
from lpxtop.record.reading import Recording
from lpxtop.record.recorder import Recorder
from lpxtop.record.replay import ReplaySource
from lpxtop.record.retention import (
    Retention,
    clean_directory,
    default_directory,
    new_recording_path,
    parse_duration,
    parse_size,
)
from lpxtop.record.store import StoreWriter
from tests.support.snapshot_data import empty_snapshot


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("90s", 90), ("15m", 900), ("48h", 172800),
                                               ("2d", 172800), ("1h30m", 5400), ("1.5h", 5400)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(("text", "size"), [("1GB", 10**9), ("500MB", 5 * 10**8), ("2GiB", 2 * 2**30),
                                            ("800k", 800_000), ("1.5G", 1_500_000_000)])
def test_sizes(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("bad", ["", "soon", "-5m", "0s"])
def test_bad_durations_say_what_is_expected(bad):
    with pytest.raises(ValueError, match="duration"):
        parse_duration(bad)


def test_default_place_follows_xdg_state_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert default_directory() == tmp_path / "lpxtop"
    monkeypatch.delenv("XDG_STATE_HOME")
    assert default_directory() == os.path.expanduser("~/.local/state/lpxtop") or \
        str(default_directory()).endswith(".local/state/lpxtop")
    first = new_recording_path(tmp_path, now=1_700_000_000)
    first.write_text("x")
    assert new_recording_path(tmp_path, now=1_700_000_000) != first


def fake_recording(path, age_s: float, size: int = 0, now: float | None = None) -> None:
    StoreWriter(path, {}).close()
    if size:
        with open(path, "ab") as f:
            f.write(b"\0" * size)
    stamp = (now or time.time()) - age_s
    os.utime(path, (stamp, stamp))


def test_directory_cleanup_by_age_then_size_oldest_first_and_only_lpxtops_files(tmp_path):
    now = time.time()
    fake_recording(tmp_path / "a.lpxrec", age_s=3 * 86400, now=now)  # too old
    fake_recording(tmp_path / "b.lpxrec", age_s=20 * 3600, size=600_000, now=now)
    fake_recording(tmp_path / "c.lpxrec", age_s=10 * 3600, size=600_000, now=now)
    fake_recording(tmp_path / "live.lpxrec", age_s=30, size=600_000, now=now)  # another recorder writing now
    (tmp_path / "notes.lpxrec").write_text("not a recording")
    os.utime(tmp_path / "notes.lpxrec", (now - 9 * 86400, now - 9 * 86400))
    current = tmp_path / "current.lpxrec"
    fake_recording(current, age_s=5 * 86400, now=now)  # the one being written: never deleted
    deleted = clean_directory(tmp_path, Retention(retain_s=48 * 3600, max_bytes=1_500_000), keep=current, now=now)
    assert sorted(p.name for p in deleted) == ["a.lpxrec", "b.lpxrec"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.lpxrec", "current.lpxrec", "live.lpxrec", "notes.lpxrec"]


def sample_event(t: float) -> SampleEvent:
    return SampleEvent("e", Sample(endpoint="e", wall_time=t, start_ns=0, ok=True, ttft_ms=float(t % 1000),
                                   e2e_ms=5.0, token_event_ms=(1.0, 5.0), tokens_per_event=(1, 1), output_tokens=2))


def write_hours(recorder: Recorder, start: float, hours: float, step_s: float = 60.0) -> float:
    """Synthetic minutes: a keyframe and 30 samples a minute, committed minute by minute."""
    snap = empty_snapshot()
    t = start
    while t < start + hours * 3600:
        recorder._pending.append((t, SnapshotEvent(replace(snap, wall_time=t))))
        for k in range(30):
            recorder._pending.append((t + k, sample_event(t + k)))
        recorder._flush()
        recorder._writer.compact()
        t += step_s
    return t


def test_the_file_being_written_keeps_its_last_hours(tmp_path, monkeypatch):
    monkeypatch.setattr("lpxtop.record.recorder.KEYFRAME_EVERY_S", 0.0)
    path = tmp_path / "r.lpxrec"
    recorder = Recorder(path, retention=Retention(retain_s=3600, max_bytes=None))
    start = 1_700_000_000.0
    end = write_hours(recorder, start, hours=3)
    recorder.apply_retention(now=end)
    recorder.close()
    with Recording(path) as rec:
        first, last = rec.time_range()
        assert end - 3600 - 60 <= first <= end - 3600 + 60 and last >= end - 60
        assert rec.pruned_after_seq
    source = ReplaySource(path, playing=False)
    assert source.start >= end - 3600 - 60  # replay starts at the oldest keyframe kept
    assert source.snapshot_at(source.start + 120).endpoints == ()  # no endpoint info in this synthetic run
    source.close()


def test_the_file_being_written_stays_under_its_size_limit(tmp_path, monkeypatch):
    monkeypatch.setattr("lpxtop.record.recorder.KEYFRAME_EVERY_S", 0.0)
    path = tmp_path / "r.lpxrec"
    recorder = Recorder(path, retention=Retention(retain_s=None, max_bytes=400_000))
    start = 1_700_000_000.0
    write_hours(recorder, start, hours=4)
    assert recorder._writer.size_bytes() > 400_000
    recorder.apply_retention()
    assert recorder._writer.size_bytes() <= 400_000
    recorder.close()
    with Recording(path) as rec:
        first, _ = rec.time_range()
    assert first > start  # the oldest minutes went first


def test_record_settings_in_the_config_file(tmp_path):
    top = tmp_path / "a.toml"
    top.write_text('record = true\n[[endpoint]]\nurl = "127.0.0.1:8000"\n')
    assert load_config_file(top).record == {"enabled": True}
    table = tmp_path / "b.toml"
    table.write_text('[record]\nenabled = true\ndir = "~/recs"\nretain = "7d"\nmax_size = "5GB"\n')
    assert load_config_file(table).record["retain"] == "7d"
    bad = tmp_path / "c.toml"
    bad.write_text('[record]\nenabled = true\nretain = "a while"\n')
    with pytest.raises(ConfigError, match=r"c.toml:3: \[record\]: key 'retain'.*duration"):
        load_config_file(bad)
    unknown = tmp_path / "d.toml"
    unknown.write_text('[record]\nplace = "here"\n')
    with pytest.raises(ConfigError, match=r"d.toml:2: .*unknown key 'place'"):
        load_config_file(unknown)


def test_record_true_in_the_config_starts_a_recorder_in_the_state_directory(monkeypatch, tmp_path):
    import argparse

    from lpxtop.cli.assemble import build_engine
    from lpxtop.cli.dashboard import start_recording, stop_recording
    from lpxtop.model.endpoint import EndpointConfig

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    endpoints = [EndpointConfig(name="e", url="http://127.0.0.1:9/v1")]
    engine = build_engine(endpoints, scrape_metrics=False)
    args = argparse.Namespace(record=False, record_file=None, retain="7d", max_size=None)
    assert start_recording(engine, args, {}, endpoints) is None
    recorder = start_recording(engine, args, {"enabled": True, "max_size": "2GB"}, endpoints)
    assert recorder.recording
    assert recorder.path.parent == tmp_path / "lpxtop"
    assert recorder.retention == Retention(retain_s=7 * 86400, max_bytes=2_000_000_000)
    stop_recording(recorder)
    with Recording(recorder.path) as rec:
        assert [type(e.record).__name__ for e in rec.events()] == ["EndpointInfo"]
