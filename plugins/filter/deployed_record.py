# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Reading the record of what is deployed (plugins/module_utils/_deployed_record.py, docs/deployed-record.md)."""

from __future__ import annotations

import json
from collections.abc import Mapping

from ansible_collections.sparkops.vllm.plugins.module_utils import _deployed_record as record


def deployed_record(text, section=None):
    """The record in a file's text (an empty record when absent or unreadable), or one section of it.

    A record already read (a dict, what this filter returned) is read again the same way.
    """
    if isinstance(text, Mapping):
        text = json.dumps(dict(text), default=str)
    doc = record.load(text)
    return doc if section is None else record.section(doc, section)


def deployed_record_images(doc):
    """The image references a node's record names (Ray's and serve's), each once."""
    return record.images(doc)


def deployed_cluster_plan(texts):
    """The cluster's deployed memory plan from every node's record text ({host: text}), for diagnose."""
    return record.cluster_plan({host: record.load(text) for host, text in (texts or {}).items()})


def deployed_summary(texts):
    """One line per node of what its record says is deployed ({host: text})."""
    return record.summary_lines({host: record.load(text) for host, text in (texts or {}).items()})


class FilterModule:
    """sparkops.vllm deployed record filters."""

    def filters(self):
        return {
            "deployed_record": deployed_record,
            "deployed_record_images": deployed_record_images,
            "deployed_cluster_plan": deployed_cluster_plan,
            "deployed_summary": deployed_summary,
        }
