# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Filters over gpu_consumers_info results: the preflight policy on stale consumers."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkops.vllm.plugins.module_utils import _consumer_policy as policy


def own_labels(cluster_name):
    """The labels the project puts on every container it starts, for this cluster."""
    return {policy.LABEL_KEY: str(cluster_name)}


def gpu_consumer_verdicts(consumers, cluster_name, allowlist=None, headless=False):
    """Add ``verdict`` (own, allowed, graphics, stale) and ``why`` to each consumer."""
    problems = policy.validate_allowlist(allowlist)
    if problems:
        raise AnsibleFilterError(
            "preflight_gpu_consumer_allowlist: "
            + "; ".join(problems)
            + ". Example entry: {container: '^vllm-embeddings$', reason: 'kept on purpose'}"
        )
    return policy.classify(
        consumers,
        label_key=policy.LABEL_KEY,
        cluster_name=cluster_name,
        allowlist=allowlist,
        headless=headless,
    )


def gpu_consumer_report(classified, host):
    """One line per stale consumer: container, image, PID, process, memory and the command to stop it."""
    return policy.report(host, classified)


class FilterModule:
    """sparkops.vllm GPU consumer filters."""

    def filters(self):
        return {
            "own_labels": own_labels,
            "gpu_consumer_verdicts": gpu_consumer_verdicts,
            "gpu_consumer_report": gpu_consumer_report,
        }
