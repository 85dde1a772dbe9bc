"""What lpxtop shows of a process: its command line with secrets masked and paths shortened, its name made
safe, and the ages and sizes in one-line messages about it.

A process picks its own name and command line: every path that shows them goes through `redact_argv`
(secret-bearing options masked, registered secrets and terminal escapes taken out by `textsafe.scrub`)
and, in a one-line message, `escaped` (control characters escaped).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from lpxtop.engine.system.patterns import program_start
from lpxtop.textsafe import scrub

# Paths that say where a program was installed, not what it does: a virtual environment's or a system's
# bin directory, site-packages. Shown by their base name.
_INSTALL_PATH = re.compile(r"^/\S*/(?:bin|sbin|site-packages|dist-packages)/[^/]+$")


def display_command(cmdline: str) -> str:
    """What a process runs, for a narrow column: ``vllm serve MODEL …``, ``python -m sglang.launch_server
    …``, ``lpxtop sim --port 18000``; never ``/home/u/.venv/bin/python3 /home/u/.venv/bin/vllm …``.

    `cmdline` is a shown command line (already redacted: `ProcInfo.cmdline`), split at spaces: the
    interpreter's and the program's paths become base names (a script run by Python is named by itself,
    a ``-m`` module as ``python -m MODULE``), and so does an argument that is an installed program's path;
    a path under the home directory starts with ``~``. Other arguments (a model's path) stay as they are."""
    argv = escaped(cmdline).split()
    if not argv:
        return ""
    start, how = program_start(argv)
    if how == "module":
        words = ["python", "-m", *argv[start:]]  # type: ignore[misc]
    elif start is None:  # python -c CODE, or a bare interpreter
        words = ["python", *argv[1:]]
    else:
        words = [os.path.basename(argv[start]), *argv[start + 1 :]]
    home = os.path.expanduser("~").rstrip("/")
    out = []
    for word in words:
        if _INSTALL_PATH.match(word):
            word = os.path.basename(word)
        elif home and home != "/" and (word == home or word.startswith(home + "/")):
            word = "~" + word[len(home):]
        out.append(word)
    return " ".join(out)


# Options whose value is a secret: vLLM/SGLang/llama-server `--api-key`, vLLM's `--api-keys`, TGI's
# `--api-key`, `--hf-token`, `--token`, `--admin-api-key`, `--bearer`/`--bearer-token`, `--password`,
# `--credentials` …, in the separate (`--api-key X`) and `=`-joined (`--api-key=X`) forms; the short `-k`
# (the value that follows); and NAME=value words such as `env OPENAI_API_KEY=sk-…`. A
# `--max-num-batched-tokens` keeps its value: only names ending in the secret word count.
_SECRET_WORDS = r"(?:keys?|tokens?(?<!_tokens)(?<!-tokens)|secrets?|password|passwd|auth|bearer|credentials?)"
_SECRET_OPTION = re.compile(rf"^(?:--?(?:[\w-]*[-_])?{_SECRET_WORDS}|-k)$", re.IGNORECASE)
_SECRET_ASSIGN = re.compile(rf"^(--?(?:[\w-]*[-_])?{_SECRET_WORDS}=)", re.IGNORECASE)
_SECRET_ENV = re.compile(r"^([A-Za-z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|BEARER|CREDENTIALS?)[A-Za-z0-9_]*=)",
                         re.IGNORECASE)
REDACTED = "***"


def redact_argv(argv: Sequence[str]) -> list[str]:
    """`argv` made safe to show: the values of secret-bearing options replaced by ``***`` (API keys never
    leave lpxtop), and each word through `textsafe.scrub` (registered secrets, terminal escapes: a
    process picks its own command line). Every path that shows a command line goes through here."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        m = _SECRET_ASSIGN.match(arg) or _SECRET_ENV.match(arg)
        # newlines are kept (a one-line message shows them escaped: `escaped`); escapes go
        if m:
            out.append((scrub(m.group(1), newlines=True) or "") + REDACTED)
        else:
            out.append(scrub(arg, newlines=True) or "")
            hide_next = bool(_SECRET_OPTION.match(arg))
    return out


def safe_name(name: str | None) -> str | None:
    """A process name (the kernel's `comm`, which the process sets itself) made safe to show."""
    return scrub(name)


def escaped(text: str) -> str:
    """`text` with control characters escaped (``\\n``, ``\\x1b``): a process picks its own command
    line, and a newline or a terminal escape in it must not break a one-line message or the screen."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def short_command(cmdline: str, limit: int = 40) -> str:
    """The start of what a process runs (`display_command`: interpreter and install paths shortened) for
    one-line messages, cut at `limit` characters."""
    text = display_command(cmdline) or escaped(cmdline)
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


