"""Whether the lab's real scrape holds every metric the dashboard and the alert rules read, as a filter.

A scenario fetches Prometheus's ``/api/v1/label/__name__/values`` on the Prometheus node
and passes its ``data`` with the dashboard's and the rules' texts (roles/monitoring/files/)
and the documented exceptions (molecule/shared/vars/monitoring.yml):

    {{ __names.json.data | monitoring_scrape_check(lookup('file', dashboard), lookup('file', rules),
                                                   monitoring_scrape_exceptions) }}

and asserts on ``ok``; ``missing`` names what no target exports, ``stale_exceptions`` an
exception the scrape now holds (plugins/module_utils/_monitoring.py).
"""

import json

import yaml
from ansible_collections.sparkops.vllm.plugins.module_utils import _monitoring


def monitoring_scrape_check(scraped, dashboard_text, rules_text, exceptions=None):
    """``{ok, missing, excepted, stale_exceptions, needed}`` of the dashboard's and rules' metric names."""
    needed = _monitoring.dashboard_metric_names(json.loads(dashboard_text)) | _monitoring.rules_metric_names(
        yaml.safe_load(rules_text)
    )
    result = _monitoring.missing_metrics(needed, scraped or [], exceptions or {})
    result["needed"] = sorted(needed)
    return result


class FilterModule:
    """The monitoring scrape comparison."""

    def filters(self):
        return {"monitoring_scrape_check": monitoring_scrape_check}
