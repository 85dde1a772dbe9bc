"""`lpxtop --help` opens with the commands (as git's does), then the dashboard's flags by group; every
command's own --help works, and every example the help shows parses."""

from __future__ import annotations

import shlex

import pytest

from lpxtop.cli.entry import EPILOG, SUBCOMMAND_SUMMARIES, SUBCOMMANDS, build_parser, main


@pytest.fixture
def help_text(monkeypatch, capsys) -> str:
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["--help"]) == 0
    return capsys.readouterr().out


def test_the_commands_come_first_one_line_each(help_text):
    lines = help_text.splitlines()
    first_flag = next(i for i, line in enumerate(lines) if line.lstrip().startswith("-h, --help"))
    table = lines.index("commands:")
    assert table < first_flag and table < 8  # after the usage and the one-sentence description
    assert set(SUBCOMMAND_SUMMARIES) == set(SUBCOMMANDS)
    listed = [line.split()[0] for line in lines[table + 1:] if line.startswith("  ") and line.split()][:len(SUBCOMMANDS)]
    assert sorted(listed) == sorted(SUBCOMMANDS)
    assert lines[0].startswith("usage: lpxtop [URL ...] [options]") and "COMMAND" in lines[1]


def test_the_flags_are_grouped_and_fit_80_columns(help_text):
    for group in ("probing:", "agent steps:", "statistics:", "display:"):
        assert f"\n{group}" in help_text, group
    assert max(len(line) for line in help_text.splitlines()) <= 80
    assert len(help_text.splitlines()) < 150


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_every_command_has_its_own_help(command, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: ") and f"lpxtop {command}" in out.splitlines()[0]


def test_every_example_in_the_help_parses():
    examples = [line.split("   ")[0].strip() for line in EPILOG.splitlines() if line.startswith("  lpxtop")]
    assert len(examples) >= 6
    for example in examples:
        words = shlex.split(example)[1:]
        command = words[0] if words and words[0] in SUBCOMMANDS else None
        build_parser(command).parse_args(words[1:] if command else words)
