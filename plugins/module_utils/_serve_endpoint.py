# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Where vLLM's OpenAI API answers: one rule for every client of the endpoint.

serve listens on ``vllm_serve_host``:``vllm_serve_port`` on the head
(roles/vllm_serve; ``vllm serve --host --port``). Two kinds of client reach it:

- **on the head** (the readiness check, the correctness probe, the watchdog's
  canary): ``127.0.0.1`` when serve listens on every address (``0.0.0.0``, ``::``
  or empty) or on loopback, else the one address it listens on: a client of
  ``127.0.0.1`` gets "connection refused" from a server bound to ``10.0.0.1``;
- **from the controller** (status, the bench, the endpoint the deploy prints):
  the head's ``ansible_host`` when serve listens on every address, else the address
  it listens on. A loopback-bound API is not reachable from the controller at all;
  the head's address is returned, and docs/security.md says to reach it
  through an ssh tunnel and set the role's endpoint setting to the tunnel.

IPv6 addresses go in brackets (RFC 3986, section 3.2.2; _monitoring.hostport).
"""

from __future__ import annotations

import ipaddress
import re

from ansible_collections.sparkops.vllm.plugins.module_utils._monitoring import hostport

# vllm_serve_port's default (roles/vllm_serve/defaults/main.yml; vLLM's own `--port` default,
# vllm/entrypoints/openai/cli_args.py: port: int = 8000).
DEFAULT_PORT = 8000
LOOPBACK = "127.0.0.1"
# A DNS host name (RFC 1123, section 2.1): labels of letters, digits and inner hyphens, 1-63
# characters each, 253 in all. Nothing else reaches a URL, and so nothing else reaches the shell
# line of vllm_serve's readiness wait either.
_HOSTNAME = re.compile(
    r"(?=.{1,253}$)(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?"
)


class EndpointError(ValueError):
    """A port or address that cannot make a URL (the message names the value)."""


def _address(value: object) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(str(value).strip())
    except ValueError:
        return None


def _port(port: object) -> int:
    if port is None or port == "":
        return DEFAULT_PORT
    try:
        number = int(str(port).strip()) if isinstance(port, (int, str)) else -1
    except ValueError:
        number = -1
    if isinstance(port, bool) or not 1 <= number <= 65535:
        raise EndpointError(
            f"vllm_serve_port is {port!r}; it is a TCP port, 1-65535 (default {DEFAULT_PORT})"
        )
    return number


def valid_host(value: object) -> bool:
    """Whether ``value`` can be ``vllm_serve_host``: an IP address or a host name (empty: every address)."""
    if value is None or value == "":
        return True
    return isinstance(value, str) and (_address(value) is not None or bool(_HOSTNAME.fullmatch(value)))


def _url(address: str, port: object) -> str:
    """``http://address:port`` (the monitoring stage's host:port rule, IPv6 in brackets)."""
    address = str(address).strip()
    if not address or not valid_host(address):
        raise EndpointError(
            f"the address {address!r} is neither an IP address nor a host name (RFC 1123: letters, digits, "
            "hyphens, dots); set vllm_serve_host (or the head's ansible_host) to one"
        )
    return "http://" + hostport(address, _port(port))


def _listens_everywhere(serve_host: object) -> bool:
    text = "" if serve_host is None else str(serve_host).strip()
    parsed = _address(text)
    return not text or (parsed is not None and parsed.is_unspecified)


def _loopback(serve_host: object) -> bool:
    text = str(serve_host).strip()
    parsed = _address(text)
    return text == "localhost" or (parsed is not None and parsed.is_loopback)


def on_head(serve_host: object, port: object = None) -> str:
    """The base URL (no ``/v1``) a client on the head uses."""
    if _listens_everywhere(serve_host) or _loopback(serve_host):
        host = LOOPBACK if _listens_everywhere(serve_host) else str(serve_host).strip()
    else:
        host = str(serve_host).strip()
    return _url(host, port)


def from_controller(serve_host: object, head_address: object, port: object = None) -> str:
    """The base URL (no ``/v1``) a client on the controller uses."""
    if _listens_everywhere(serve_host) or _loopback(serve_host):
        host = str(head_address).strip()
    else:
        host = str(serve_host).strip()
    return _url(host, port)
