# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The captured cgroup trees (tests/fixtures/cgroup/README.md) and Docker's answers for them."""

import json

from conftest import FIXTURES

CGROUP = FIXTURES / "cgroup"
LAB = CGROUP / "lab_spark1_v1"
H200 = CGROUP / "h200_v2"
LAB_LABEL = "io.sparkops.vllm.cluster=lab"


class FakeLookup:
    """Docker's inspect, answered from the lab's captured names and labels."""

    def __init__(self, table):
        self.table = table
        self.asked = []
        self.warnings = []

    def inspect(self, container_id):
        self.asked.append(container_id)
        return self.table.get(container_id, {"id": container_id, "name": None, "image": None, "labels": {}})


def lab_lookup():
    table = {}
    for line in (LAB / "docker_inspect_labels.txt").read_text().splitlines():
        container_id, name, labels = line.split(" ", 2)
        table[container_id] = {"id": container_id, "name": name.lstrip("/"), "labels": json.loads(labels)}
    return FakeLookup(table)
