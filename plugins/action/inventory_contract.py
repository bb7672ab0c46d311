# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Check the inventory contract on the controller (see plugins/modules/inventory_contract.py)."""

from __future__ import annotations

import os

import yaml
from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.parsing.vault import VaultHelper, VaultLib
from ansible.plugins.action import ActionBase
from ansible.template import trust_as_template

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
    "ib_subnet_min_prefix": {"type": "int", "default": contract.DEFAULT_OPTIONS["ib_subnet_min_prefix"]},
}
ROLES = os.path.join(os.path.dirname(__file__), "..", "..", "roles")


def _role_defaults(role, cache={}):  # noqa: B006 - a per-process cache of the collection's own files
    """The role's defaults/main.yml: the one source of the defaults of the settings stage 0 checks."""
    if role not in cache:
        with open(os.path.join(ROLES, role, "defaults", "main.yml"), encoding="utf-8") as handle:
            cache[role] = yaml.safe_load(handle) or {}
    return cache[role]


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


_NONE = object()
SECRETS = {s.name for s in contract.SETTINGS if s.secret}


class ActionModule(ActionBase):
    # Stage 0 contacts no host: the play runs on the controller and this reads
    # only the inventory (groups and hostvars).
    _requires_connection = False

    def _role_default(self, setting, host_vars):
        """A role setting's default for one host, rendered with the host's variables; _NONE when it cannot be."""
        defaults = _role_defaults(setting.role)
        if setting.name not in defaults:
            return _NONE
        value = defaults[setting.name]
        if not (isinstance(value, str) and "{{" in value):
            return value
        try:
            templar = self._templar.copy_with_new_env(available_variables=host_vars)
            return _plain(templar.template(trust_as_template(value)))
        except AnsibleError:
            # a default that needs a later stage's facts: that stage checks it
            return _NONE

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
            for name in names + [s.name for s in contract.ROLE_SETTINGS]:
                if name not in raw:
                    continue
                if _vaulted(raw[name]):
                    # a vaulted value stays encrypted: validation needs no vault password
                    values[name] = contract.VAULTED
                    continue
                try:
                    values[name] = _plain(templated[name])
                except AnsibleError as exc:
                    # the error of a secret's expression may quote what it was given: never show it
                    why = "the error is not shown for a secret" if name in SECRETS else exc.message
                    unreadable.append(
                        f"{host}: {name} cannot be evaluated ({why}). Fix: correct the expression or the "
                        "variables it uses"
                    )
                    # reported once, here: the checks skip it as they skip a vaulted value
                    values[name] = contract.VAULTED
            for setting in contract.ROLE_SETTINGS:
                if setting.name not in values and setting.name not in raw:
                    default = self._role_default(setting, templated)
                    if default is not _NONE:
                        values[setting.name] = default
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
