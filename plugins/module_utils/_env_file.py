# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Environment files (``docker run --env-file``): one ``NAME=value`` per line, nothing that adds a line.

Docker reads an env file line by line and takes everything after the first ``=``
as the value, with no quoting (docker/cli opts/envfile.go, parseKeyValueFile), so
a newline, carriage return or NUL in a value would start a new variable
(``LD_PRELOAD=...``, or a second, empty ``VLLM_API_KEY``). Such a value is
refused; the message names the variable and the character, never the value,
because these values are secrets.
"""

from __future__ import annotations

import re

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LINE_BREAKERS = {"\n": "a newline", "\r": "a carriage return", "\x00": "a NUL character"}


class EnvFileError(ValueError):
    """A value cannot be written to an env file; the message never holds the value."""


def problems(values, settings=None):
    """What stops ``values`` (name -> value) from being one line each; names and settings only.

    ``settings`` maps a variable to the inventory setting it comes from, for the fix.
    """
    settings = settings or {}
    found = []
    for name, value in (values or {}).items():
        setting = settings.get(name, name)
        if not isinstance(name, str) or not _NAME.match(name):
            found.append(f"{name!r} is not an environment variable name (letters, digits and _)")
            continue
        if value is None:
            continue
        if not isinstance(value, str):
            found.append(f"{setting} is a {type(value).__name__}, not a string: quote it in the inventory")
            continue
        for char, what in _LINE_BREAKERS.items():
            if char in value:
                found.append(
                    f"{setting} holds {what}, which would add a line to the container's environment file "
                    f"({name}): set it to the single-line value (the value is not shown: it is a secret)"
                )
                break
    return found


def render(values, settings=None):
    """The env file's text: ``NAME=value`` per set value, in the given order; EnvFileError on a bad value."""
    found = problems(values, settings)
    if found:
        raise EnvFileError("; ".join(found))
    return "".join(f"{name}={value}\n" for name, value in values.items() if value not in (None, ""))
