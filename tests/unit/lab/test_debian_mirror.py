"""lab/debian-mirror: the Debian mirror of the machine's own apt configuration, for debootstrap.

The tables are the two formats of sources.list(5), with the hosts replaced by
example.invalid ones (the project names no mirror).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
_LOADER = importlib.machinery.SourceFileLoader("debian_mirror", str(ROOT / "lab" / "debian-mirror"))
_SPEC = importlib.util.spec_from_loader("debian_mirror", _LOADER)
mirror = importlib.util.module_from_spec(_SPEC)
_LOADER.exec_module(mirror)

# Debian 12's installer writes this one-line file.
ONE_LINE = """\
#deb cdrom:[Debian GNU/Linux 12.5.0 _Bookworm_ - Official amd64 DVD Binary-1]/ bookworm contrib main

deb http://mirror-a.example.invalid/debian/ bookworm main non-free-firmware
deb-src http://mirror-a.example.invalid/debian/ bookworm main non-free-firmware

deb http://security.example.invalid/debian-security bookworm-security main non-free-firmware
deb http://mirror-a.example.invalid/debian/ bookworm-updates main non-free-firmware
"""

# The debian:bookworm container image's /etc/apt/sources.list.d/debian.sources.
DEB822 = """\
Types: deb
# http://snapshot.example.invalid/archive/debian/20250520T000000Z
URIs: http://mirror-b.example.invalid/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror-b.example.invalid/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""

CASES = [
    ("one-line, the installer's file", ONE_LINE, "http://mirror-a.example.invalid/debian"),
    (
        "one-line with options, an updates line first",
        "deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] https://m.example.invalid/debian bookworm-updates main\n"
        "deb [ arch=amd64 ] https://m.example.invalid/debian bookworm contrib main\n",
        "https://m.example.invalid/debian",
    ),
    ("one-line without main", "deb http://m.example.invalid/debian bookworm contrib\n", None),
    ("one-line deb-src only", "deb-src http://m.example.invalid/debian bookworm main\n", None),
    ("one-line for another suite", "deb http://m.example.invalid/debian trixie main\n", None),
    ("deb822, the container image's file", DEB822, "http://mirror-b.example.invalid/debian"),
    (
        "deb822, a disabled stanza and a continuation line",
        "Types: deb\nURIs: http://off.example.invalid/debian\nSuites: bookworm\nComponents: main\nEnabled: no\n\n"
        "Types: deb deb-src\nURIs: mirror+file:/etc/apt/mirrors.txt\n http://on.example.invalid/debian/\n"
        "Suites: bookworm\nComponents: main contrib\n",
        "http://on.example.invalid/debian",
    ),
    ("deb822 for another suite", DEB822.replace("bookworm", "trixie"), None),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_first_debian_main_uri_for_bookworm(text, expected):
    parse = mirror.deb822_sources if text.startswith("Types:") else mirror.one_line_sources
    assert mirror.debian_mirror(parse(text), "bookworm") == expected


def _etc(tmp_path, files):
    for name, text in files.items():
        path = tmp_path / "etc" / "apt" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_sources_list_comes_first_then_the_parts_by_name(tmp_path, capsys):
    root = _etc(
        tmp_path,
        {
            "sources.list": "# deb http://commented.example.invalid/debian bookworm main\n",
            "sources.list.d/b.sources": DEB822,
            "sources.list.d/a.list": "deb http://first.example.invalid/debian bookworm main\n",
            "sources.list.d/c.list.disabled": "deb http://ignored.example.invalid/debian bookworm main\n",
        },
    )
    assert mirror.main(["--root", str(root)]) == 0
    assert capsys.readouterr().out == "http://first.example.invalid/debian\n"


def test_no_debian_source_fails_with_the_fix(tmp_path, capsys):
    root = _etc(tmp_path, {"sources.list.d/other.list": "deb https://repo.example.invalid/apt stable main\n"})
    assert mirror.main(["--root", str(root)]) == 1
    err = capsys.readouterr().err
    assert "no `deb` source for bookworm with `main`" in err and "SPARKOPS_DEBIAN_MIRROR" in err
