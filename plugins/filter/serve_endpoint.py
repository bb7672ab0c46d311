# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Where vLLM's API answers, on the head and from the controller (plugins/module_utils/_serve_endpoint.py)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkops.vllm.plugins.module_utils import _serve_endpoint


def serve_url_on_head(serve_host, port=None):
    """The base URL a client on the head uses (127.0.0.1 unless serve is bound to one address)."""
    try:
        return _serve_endpoint.on_head(serve_host, port)
    except _serve_endpoint.EndpointError as exc:
        raise AnsibleFilterError(f"serve_url_on_head: {exc}") from exc


def serve_url_from_controller(serve_host, head, hostvars, port=None):
    """The base URL a client on the controller uses (the head's address unless serve is bound to one).

    ``head`` is the head's inventory name; its address is its ``ansible_host`` in
    ``hostvars``, else the name itself (how Ansible connects to a host without one).
    """
    values = hostvars.get(head) or {}
    head_address = values.get("ansible_host") or head
    try:
        return _serve_endpoint.from_controller(serve_host, head_address, port)
    except _serve_endpoint.EndpointError as exc:
        raise AnsibleFilterError(f"serve_url_from_controller: {exc}") from exc


class FilterModule:
    """sparkops.vllm serve endpoint filters."""

    def filters(self):
        return {
            "serve_url_on_head": serve_url_on_head,
            "serve_url_from_controller": serve_url_from_controller,
        }
