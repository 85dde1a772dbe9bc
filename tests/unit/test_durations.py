"""Durations: one parser and one formatter (lpxtop/durations.py), taken by every flag and config key with a time."""

from __future__ import annotations

import argparse
import math
import random

import pytest

from lpxtop.cli.entry import SUBCOMMANDS, build_parser
from lpxtop.config import load_config_file
from lpxtop.durations import DurationError, format_duration, parse_duration
from lpxtop.engine.alerts import AlertThresholds
from lpxtop.export.settings import settings_from_table
from lpxtop.record.settings import retain_value


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("500ms", 0.5), ("30s", 30), ("2m", 120), ("1h", 3600), ("1h30m", 5400), ("1.5s", 1.5), (".5s", 0.5),
     ("90", 90), ("0.25", 0.25), ("2d", 172800), ("1w", 604800), ("15 m", 900), ("1h 30m", 5400), ("5MIN", 300),
     ("10sec", 10), (" 7s ", 7), (3, 3), (0.5, 0.5)],
)
def test_parse(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["", "soon", "1x", "-1s", "s", "1h 30", "nan", "inf", "Infinity", "1e999s", True,
                                 None, [1], float("nan"), float("inf")])
def test_not_durations_say_what_to_write(bad):
    with pytest.raises(DurationError) as err:
        parse_duration(bad)  # type: ignore[arg-type]
    assert "duration" in str(err.value)


def test_bounds_are_printed_with_units():
    with pytest.raises(DurationError, match=r"'2h' must be between 10ms and 1h"):
        parse_duration("2h", low=0.01, high=3600)
    with pytest.raises(DurationError, match="between 10ms and 1h"):
        parse_duration("5ms", low=0.01, high=3600)
    assert parse_duration("1h", low=0.01, high=3600) == 3600


def test_a_bare_number_counts_in_the_settings_own_unit():
    assert parse_duration("50", bare_unit=0.001) == pytest.approx(0.05)
    assert parse_duration("50ms", bare_unit=0.001) == pytest.approx(0.05)
    assert parse_duration("1s", bare_unit=0.001) == 1.0


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (0.5, "500ms"), (0.0125, "12.5ms"), (1.5, "1.5s"), (30, "30s"), (60, "1m"), (90, "1m30s"),
     (120, "2m"), (3600, "1h"), (5400, "1h30m"), (86400, "1d"), (172800 + 60, "2d1m"), (3661.5, "1h1m1.5s")],
)
def test_format(seconds, text):
    assert format_duration(seconds) == text


def test_what_is_printed_reads_back():
    rng = random.Random(7)
    for _ in range(2000):
        seconds = round(10 ** rng.uniform(-3, 6), 3)
        assert parse_duration(format_duration(seconds)) == pytest.approx(seconds, abs=1e-3), seconds
    assert format_duration(math.inf) == "inf"


def _duration_flags():
    """(command, flag) for every option whose metavar says DURATION, in every parser."""
    found = []
    for command in (None, *SUBCOMMANDS):
        parser = build_parser(command)
        for action in parser._actions:
            if action.metavar == "DURATION" and action.option_strings:
                found.append((command, action.option_strings[-1]))
    return found


def test_every_time_flag_takes_units():
    flags = _duration_flags()
    names = {flag for _, flag in flags}
    # the ones that refused units before
    assert {"--interval", "--timeout", "--window", "--refresh", "--deadline", "--duration", "--warmup",
            "--probe-timeout", "--connect-timeout", "--first-token-timeout", "--projection-horizon"} <= names
    for command, flag in flags:
        parser = build_parser(command)
        action = next(a for a in parser._actions if flag in a.option_strings)
        if action.type is None:
            # read later by their own rules: --retain also takes "forever"; fleet's windows go to PromQL as written
            assert flag == "--retain" or (command == "fleet" and flag in ("--window", "--chart-rate")), (command, flag)
            continue
        value = action.type("30s")
        assert value in (30.0, 30_000.0), (command, flag, value)  # seconds, or ms for an ms setting
        with pytest.raises(argparse.ArgumentTypeError):
            action.type("soon")


def test_no_time_flag_is_left_without_units():
    """A flag that reads seconds says DURATION; none is left as SECONDS (it would refuse 1m)."""
    for command in (None, *SUBCOMMANDS):
        for action in build_parser(command)._actions:
            assert action.metavar not in ("SECONDS", "MS"), (command, action.option_strings)


def test_load_duration_takes_minutes():
    args = build_parser("load").parse_args(["127.0.0.1:8000", "--duration", "1m", "--warmup", "500ms",
                                            "--client-lag-limit", "50"])
    assert (args.duration, args.warmup, args.client_lag_limit) == (60.0, 0.5, 50.0)


def test_config_keys_take_units(tmp_path):
    path = tmp_path / "lpxtop.toml"
    path.write_text(
        '[defaults]\ninterval = "500ms"\n\n[[endpoint]]\nurl = "127.0.0.1:8000"\ntimeout = "30s"\n'
        'first_token_timeout = "15s"\nconnect_timeout = 2\nmetrics_interval = "1m"\ntool_latency = "250ms"\n'
        'probe = "chat"\n\n[ui]\nrefresh = "1s"\n\n[engine]\nwindow = "10m"\n\n'
        '[alerts]\nprojection_horizon_s = "2m"\n\n[record]\nretain = "2d"\n'
    )
    config = load_config_file(path)
    (e,) = config.endpoints
    assert (e.interval_s, e.timeout_s, e.first_token_timeout_s, e.connect_timeout_s, e.metrics_interval_s,
            e.tool_latency_s) == (0.5, 30.0, 15.0, 2.0, 60.0, 0.25)
    assert config.ui["refresh"] == 1.0 and config.engine["window"] == 600.0
    assert AlertThresholds.from_mapping(config.alerts).projection_horizon_s == 120.0
    assert settings_from_table({"probe_timeout": "750ms"}).probe_timeout_s == 0.75
    assert retain_value("30s") == 30.0 and retain_value("forever") is None


def test_config_durations_out_of_range_name_the_line(tmp_path):
    path = tmp_path / "lpxtop.toml"
    path.write_text('[[endpoint]]\nurl = "127.0.0.1:8000"\ntimeout = "2h"\n')
    with pytest.raises(Exception, match=r"lpxtop.toml:3: key 'timeout' must be a duration between 10ms and 1h"):
        load_config_file(path)
