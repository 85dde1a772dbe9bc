"""lpxtop's one kind of argparse parser: whole option names only, and never a key on the command line.

Python's argparse takes any unambiguous prefix of an option: `--api-key s3cret` was read as
`--api-key-env s3cret`, and the key went into a warning on stderr. Every parser of lpxtop is an
`ArgumentParser` from here (`tests/unit/test_arguments.py` walks them all), which

- refuses abbreviations (`allow_abbrev=False`): a misspelt option is a usage error, never another option;
- refuses an option that would carry a key (`--api-key VALUE`, `--api-key=VALUE`, `--token`, `-k` …, and
  every shortening of `--api-key-env`) before anything reads its value, with exit status 2 and a message
  that says why (a command line is visible to every user of the machine) and what to use instead. The
  value itself is never printed, nor kept.

A parser whose program really takes such an option (the simulator's `--api-key`, as vLLM's) declares it,
and a declared option is never refused.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from lpxtop.config import is_env_name

# Option names that carry a secret as their value (the same words lpxtop masks in other processes'
# command lines, engine/system/shown.py): --api-key, --api-keys, --token, --hf-token, --bearer, --password,
# --secret, --credentials, -k. Names ending in -env name a variable, not a key (--api-key-env).
_SECRET_OPTION = re.compile(
    r"^(?:--?(?:[\w-]*[-_])?(?:keys?|tokens?(?<!_tokens)(?<!-tokens)|secrets?|password|passwd|bearer|credentials?)|-k)$",
    re.IGNORECASE,
)
KEY_ENV_OPTION = "--api-key-env"

WHY = "every user of this machine can read a command line (ps, /proc/PID/cmdline), and the shell's history keeps it"


def key_option(arg: str, known: Sequence[str] | set[str] | dict[str, Any]) -> str | None:
    """The option name when `arg` would give lpxtop a key on its command line, else None.

    `arg` is one word of argv; `known`: the parser's own option strings (never refused)."""
    if not arg.startswith("-") or arg in ("-", "--"):
        return None
    name = arg.split("=", 1)[0]
    if name in known:
        return None
    lowered = name.lower()
    if lowered.startswith("--api-k") or lowered.startswith("--api_k"):
        return name  # --api-key, --api-keys, and every shortening of --api-key-env
    if _SECRET_OPTION.match(name):
        return name
    return None


class ArgumentParser(argparse.ArgumentParser):
    """argparse.ArgumentParser with `allow_abbrev=False` and keys on the command line refused (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        for arg in argv:
            if arg == "--":
                break
            name = key_option(arg, self._option_string_actions)
            if name is not None:
                self.refuse_key(name)
        return super().parse_known_args(argv, namespace)

    def refuse_key(self, name: str) -> NoReturn:
        """Exit 2 with why `name` is refused and what to use instead; the value is never part of the message."""
        known = self._option_string_actions
        full = sorted(o for o in known if o.startswith(name) and _SECRET_OPTION.match(o))
        if full:  # a shortening of an option this program really takes (the simulator's --api-key)
            self.error(f"{name}: write the option in full ({full[0]}); lpxtop takes no abbreviated options")
        env_options = sorted(o for o in known if o.startswith("--") and o.endswith("-env"))
        lines = [f"{name}: lpxtop takes no key on its command line: {WHY}."]
        if KEY_ENV_OPTION in env_options:
            lines += ["  Put the key in an environment variable and give its name instead:",
                      "    export OPENAI_API_KEY=...",
                      f"    {self.prog} ... {KEY_ENV_OPTION} OPENAI_API_KEY"]
            if "--config" in known:
                lines.append('  or write api_key_env = "OPENAI_API_KEY" in the config file (--config FILE).')
        elif env_options:
            lines.append(f"  Put it in an environment variable and give its name instead: {env_options[0]} NAME")
        else:
            lines.append(f"  {self.prog} sends no key.")
        self.error("\n".join(lines))


def env_name(text: str) -> str:
    """An argparse type for `--api-key-env NAME`: the NAME of a variable. Anything else may be the key itself,
    so the message says what is wrong without repeating it."""
    if not is_env_name(text):
        raise argparse.ArgumentTypeError(
            "takes the NAME of an environment variable that holds the key (such as OPENAI_API_KEY), and what "
            "was given is not a variable name (not shown: it may be the key itself)")
    return text
