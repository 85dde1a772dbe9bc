"""`[traces]` in the config file and --traces-listen / --traces-forward: checked with file:line errors."""

from __future__ import annotations

import argparse

import pytest

from lpxtop.checks import ConfigError
from lpxtop.config import load_config_file
from lpxtop.engine.traces.settings import add_traces_arguments, join_wait_s, receiver_settings


def write(tmp_path, text: str):
    path = tmp_path / "lpxtop.toml"
    path.write_text(text)
    return path


def test_file_table_is_read_and_flags_override_it(tmp_path):
    config = load_config_file(write(tmp_path, '[traces]\nlisten = "127.0.0.1:4318"\n'
                                              'forward = "http://127.0.0.1:14318/v1/traces"\nwait = 10\n'))
    settings = receiver_settings(config.traces)
    assert (settings.host, settings.port, settings.forward_url) == ("127.0.0.1", 4318, "http://127.0.0.1:14318/v1/traces")
    assert join_wait_s(config.traces) == 10.0
    over = receiver_settings(config.traces, listen="26999", forward="http://127.0.0.1:1/v1/traces")
    assert (over.host, over.port, over.forward_url) == ("127.0.0.1", 26999, "http://127.0.0.1:1/v1/traces")


def test_no_listen_means_no_receiver():
    assert receiver_settings({}) is None
    assert receiver_settings(None) is None
    with pytest.raises(ConfigError, match="--traces-listen"):
        receiver_settings({}, forward="http://127.0.0.1:1/v1/traces")


@pytest.mark.parametrize("line, words", [
    ('listen = 4318', "must be a string"),
    ('listen = "nowhere"', "HOST:PORT"),
    ('forward = "ftp://x"', "http://"),
    ('spans_per_s = 0', "between 1"),
    ('spans_per_s = nan', "between 1"),
    ('max_body_bytes = 10', "between 1024"),
    ('wait = -1', "between 100ms"),
    ('lisen = "x"', "unknown key 'lisen'"),
])
def test_mistakes_name_the_line_and_the_key(tmp_path, line, words):
    with pytest.raises(ConfigError, match=words) as info:
        load_config_file(write(tmp_path, f"[traces]\n{line}\n"))
    assert "lpxtop.toml:2" in str(info.value)


def test_traces_must_be_a_table(tmp_path):
    with pytest.raises(ConfigError, match="must be a table"):
        load_config_file(write(tmp_path, 'traces = "yes"\n'))


def test_flags():
    parser = argparse.ArgumentParser()
    add_traces_arguments(parser)
    args = parser.parse_args(["--traces-listen", "[::1]:4318", "--traces-forward", "http://127.0.0.1:9/v1/traces"])
    settings = receiver_settings(None, listen=args.traces_listen, forward=args.traces_forward)
    assert (settings.host, settings.port) == ("::1", 4318)
