"""Every parser takes whole option names only, and refuses a key on the command line (lpxtop/cli/arguments.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import lpxtop
from lpxtop.cli.arguments import ArgumentParser, key_option
from lpxtop.cli.entry import SUBCOMMANDS, build_parser, main

COMMANDS = (None, *SUBCOMMANDS)
SECRET = "s3cret-do-not-echo-4242"


def _parsers():
    from lpxtop.cli.sim import add_sim_arguments

    for command in COMMANDS:
        yield command or "lpxtop", build_parser(command)
    sim_module = ArgumentParser(prog="python -m lpxtop.sim")
    add_sim_arguments(sim_module)
    yield "python -m lpxtop.sim", sim_module


@pytest.mark.parametrize(("name", "parser"), list(_parsers()), ids=lambda v: v if isinstance(v, str) else "")
def test_every_parser_refuses_abbreviations(name, parser):
    assert isinstance(parser, ArgumentParser) and parser.allow_abbrev is False
    # the positionals a parse needs (load's URL, replay's FILE), so only the option decides
    needed = ["x" for a in parser._actions if not a.option_strings and a.nargs is None]
    longs = [o for o in parser._option_string_actions if o.startswith("--")]
    assert longs
    tried = 0
    for option in longs:
        short = option[:-1]
        if short in parser._option_string_actions or len(short) < 4:
            continue
        tried += 1
        try:
            _, extras = parser.parse_known_args([*needed, short])
        except SystemExit as exit_:  # refused outright (a key-like name)
            assert exit_.code == 2, (name, option)
            continue
        assert short in extras, (name, option)  # never taken for `option`
    assert tried


def test_every_parser_in_the_sources_is_lpxtops_own():
    """A new parser made with argparse.ArgumentParser would take abbreviations again."""
    root = Path(lpxtop.__file__).parent
    offenders = [str(p.relative_to(root)) for p in root.rglob("*.py")
                 if p.name != "arguments.py" and re.search(r"argparse\.ArgumentParser\(", p.read_text())]
    assert offenders == []


@pytest.mark.parametrize("argv", [["--api-key", SECRET], [f"--api-key={SECRET}"], ["--api-ke", SECRET],
                                  ["--api-k", SECRET], [f"--api-key-en={SECRET}"], ["--api-keys", SECRET],
                                  ["--token", SECRET], ["-k", SECRET], ["--openai-api-key", SECRET]])
@pytest.mark.parametrize("command", ["once", None, "load", "exporter", "record"])
def test_a_key_on_the_command_line_is_a_usage_error_that_never_repeats_it(command, argv, capsys):
    args = ([command] if command else []) + ["127.0.0.1:1", *argv]
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert SECRET not in out + err
    assert "every user of this machine can read a command line" in err
    assert "--api-key-env OPENAI_API_KEY" in err


def test_the_key_variable_must_be_a_name_and_a_bad_one_is_not_repeated(capsys):
    assert main(["once", "127.0.0.1:1", "--api-key-env", SECRET]) == 2
    err = capsys.readouterr().err
    assert SECRET not in err and "NAME of an environment variable" in err


def test_options_that_name_a_variable_or_count_tokens_are_not_keys():
    known = {"--api-key-env", "--max-tokens"}
    for arg in ("--api-key-env", "--api-key-env=X", "--max-tokens", "--output-tokens", "--input-tokens=5",
                "--prometheus-token-env", "-m", "--model", "URL", "-", "--"):
        assert key_option(arg, known | {"--prometheus-token-env"}) is None, arg
    for arg in ("--api-key", "--api-key=x", "--api_key", "--hf-token", "--bearer", "--password=x", "-k", "--API-KEY"):
        assert key_option(arg, known) is not None, arg


def test_the_simulators_own_key_option_still_works():
    """`lpxtop sim --api-key KEY` is the server's key (as vLLM's flag); its shortening asks for the full name."""
    parser = build_parser("sim")
    assert parser.parse_args(["--api-key", "k"]).api_key == "k"
    with pytest.raises(SystemExit):
        parser.parse_args(["--api-k", "k"])
