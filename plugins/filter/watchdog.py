# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The watchdog's config (plugins/module_utils/_watchdog_config.py), as a filter."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkops.vllm.plugins.module_utils import _watchdog, _watchdog_config


def watchdog_config(cluster, *, head, nodes, layout, head_units, worker_units, settings):
    """The JSON config the watchdog's program reads on the head."""
    try:
        return _watchdog_config.build(
            cluster,
            head=head,
            nodes=list(nodes),
            layout=dict(layout),
            head_units=list(head_units),
            worker_units=list(worker_units),
            settings=settings,
        )
    except (_watchdog_config.WatchdogConfigError, KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"watchdog_config: {exc}") from exc


def watchdog_summary(status_text, *, timer, now):
    """The watchdog's state as status shows it: ``line`` and the summary's fields."""
    doc = _watchdog.summary(status_text or None, timer or None, float(now))
    return dict(doc, line=_watchdog.summary_line(doc))


class FilterModule:
    """sparkops.vllm watchdog filter."""

    def filters(self):
        return {"watchdog_config": watchdog_config, "watchdog_summary": watchdog_summary}
