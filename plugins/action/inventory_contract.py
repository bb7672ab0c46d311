# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Check the inventory contract on the controller (see plugins/modules/inventory_contract.py)."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.parsing.vault import VaultHelper, VaultLib
from ansible.plugins.action import ActionBase

from ansible_collections.sparkops.vllm.plugins.module_utils import _inventory_contract as contract

ARGUMENT_SPEC = {
    "ib_mtu_min": {"type": "int", "default": contract.DEFAULT_OPTIONS["ib_mtu_min"]},
    "ib_mtu_max": {"type": "int", "default": contract.DEFAULT_OPTIONS["ib_mtu_max"]},
    "ib_interface_pattern": {"type": "str", "default": contract.DEFAULT_OPTIONS["ib_interface_pattern"]},
    "ib_interface_rdma_pattern": {
        "type": "str",
        "default": contract.DEFAULT_OPTIONS["ib_interface_rdma_pattern"],
    },
    "cluster_name_max_length": {
        "type": "int",
        "default": contract.DEFAULT_OPTIONS["cluster_name_max_length"],
    },
}


def _vaulted(value):
    ciphertext = VaultHelper.get_ciphertext(value, with_tags=False)
    return bool(ciphertext) and VaultLib.is_encrypted(ciphertext)


def _plain(value):
    """Ansible's tagged and lazy containers as plain Python values."""
    if isinstance(value, bool) or value is None:
        return value
    for kind in (int, float, str):
        if isinstance(value, kind):
            return kind(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


class ActionModule(ActionBase):
    # Stage 0 contacts no host: the play runs on the controller and this reads
    # only the inventory (groups and hostvars).
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        validated = ArgumentSpecValidator(ARGUMENT_SPEC).validate(self._task.args)
        if validated.error_messages:
            raise AnsibleActionFail("inventory_contract: " + "; ".join(validated.error_messages))

        groups = task_vars.get("groups") or {}
        inv = contract.Inventory(
            head=list(groups.get("head") or []),
            workers=list(groups.get("workers") or []),
            cluster=list(groups.get("cluster") or []),
            options=dict(validated.validated_parameters),
        )
        hostvars = task_vars["hostvars"]
        names = [s.name for s in contract.SETTINGS] + list(contract.HOST_VARIABLES)
        unreadable = []
        for host in inv.hosts:
            raw = hostvars.raw_get(host)
            templated = hostvars[host]
            values = {}
            for name in names:
                if name not in raw:
                    continue
                if _vaulted(raw[name]):
                    # a vaulted value stays encrypted: validation needs no vault password
                    values[name] = contract.VAULTED
                    continue
                try:
                    values[name] = _plain(templated[name])
                except AnsibleError as exc:
                    unreadable.append(
                        f"{host}: {name} cannot be evaluated ({exc.message}). Fix: correct the expression or the "
                        "variables it uses"
                    )
            inv.hostvars[host] = values

        problems = sorted(set(unreadable + contract.check(inv)))
        result["changed"] = False
        result["problems"] = problems
        if problems:
            result["failed"] = True
            result["msg"] = contract.failure_message(problems)
        else:
            result["msg"] = contract.summary(inv)
        return result
