# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Render the vLLM launch script from the memory plan (see plugins/modules/launch_script.py)."""

from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase

from ansible_collections.sparkops.vllm.plugins.module_utils import _launch_script as launch

TEMPLATE = os.path.join(os.path.dirname(__file__), "..", "..", "templates", "vllm-launch.sh.j2")

ARGUMENT_SPEC = {
    "dest": {"type": "path", "required": True},
    "plan": {"type": "dict", "required": True},
    "model": {"type": "str", "required": True},
    "served_model_name": {"type": "str", "required": True},
    "tensor_parallel_size": {"type": "int", "required": True},
    "pipeline_parallel_size": {"type": "int", "default": 1},
    "host": {"type": "str", "default": "0.0.0.0"},
    "port": {"type": "int", "default": 8000},
    "max_model_len": {"type": "int"},
    "cuda_graphs": {"type": "bool", "default": True},
    "kv_cache_dtype": {"type": "str"},
    "max_num_seqs": {"type": "int"},
    "extra_args": {"type": "list", "elements": "str", "default": []},
    "cluster": {"type": "str", "required": True},
    "unit": {"type": "str", "required": True},
    "force": {"type": "bool", "default": False},
    "mode": {"type": "raw", "default": "0750"},
    "owner": {"type": "str"},
    "group": {"type": "str"},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = True
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        validated = ArgumentSpecValidator(ARGUMENT_SPEC).validate(self._task.args)
        if validated.error_messages:
            raise AnsibleActionFail("launch_script: " + "; ".join(validated.error_messages))
        args = validated.validated_parameters
        plan = args["plan"]

        warnings = []
        if not plan.get("fits", False):
            reasons = (
                "; ".join(plan.get("reasons") or []) or "see the memory plan summary of the preflight stage"
            )
            if not args["force"]:
                raise AnsibleActionFail(
                    "launch_script: the memory plan does not fit, so vLLM would be killed or refuse to start "
                    f"({reasons}). Fix: change the settings the plan names (docs/runbooks/memory-plan.md), or "
                    "set vllm_serve_force: true to start anyway."
                )
            warnings.append(f"the memory plan does not fit ({reasons}); starting anyway because force is set")

        try:
            argv = launch.serve_argv(
                model=args["model"],
                served_model_name=args["served_model_name"],
                tensor_parallel_size=args["tensor_parallel_size"],
                pipeline_parallel_size=args["pipeline_parallel_size"],
                host=args["host"],
                port=args["port"],
                plan_args=plan.get("vllm_args"),
                max_model_len=args["max_model_len"],
                cuda_graphs=args["cuda_graphs"],
                kv_cache_dtype=args["kv_cache_dtype"],
                max_num_seqs=args["max_num_seqs"],
                extra_args=args["extra_args"],
            )
        except launch.LaunchScriptError as exc:
            raise AnsibleActionFail(f"launch_script: {exc}") from exc

        # Only what decides the command goes in the file: the plan's predictions
        # move between runs (measured figures, MemAvailable) and would rewrite
        # the script, and restart vLLM, on every run.
        notes = ["the memory plan does NOT fit; started because vllm_serve_force is set"] if warnings else []
        for key, value in sorted((plan.get("env") or {}).items()):
            notes.append(f"environment from the plan (in the Ray containers): {key}={value}")

        template_vars = dict(task_vars)
        template_vars.update(
            launch.template_vars(cluster=args["cluster"], unit=args["unit"], notes=notes, argv=argv)
        )
        template_args = {
            "src": os.path.realpath(TEMPLATE),
            "dest": args["dest"],
            "mode": args["mode"],
        }
        for key in ("owner", "group"):
            if args[key]:
                template_args[key] = args[key]

        new_task = self._task.copy()
        new_task.args = template_args
        template_action = self._shared_loader_obj.action_loader.get(
            "ansible.legacy.template",
            task=new_task,
            connection=self._connection,
            play_context=self._play_context,
            loader=self._loader,
            templar=self._templar,
            shared_loader_obj=self._shared_loader_obj,
        )
        result.update(template_action.run(task_vars=template_vars))
        result["argv"] = ["vllm", *argv]
        if warnings:
            result.setdefault("warnings", []).extend(warnings)
        return result
