"""The scenarios' view of a nested ansible-playbook run: data, not its English.

A scenario runs the project's playbooks for real (molecule/shared/tasks/run_playbook.yml)
with ansible.posix's ``json`` stdout callback, and asserts on what this filter makes of
that document: each host's recap counts, the plays and tasks that ran where, every
failed task with its result, and each task's registered result per host. The messages
a failed task carries are still there (``failed[].msg``), but the proofs read the
modules' structured results first.

The document's shape is ansible.posix's plugins/callback/json.py (1.x/2.x): ``plays[]``
each with ``play.name`` and ``tasks[]``, each task with ``task.name`` (``role : name``
for a role's task, Task.get_name()) and ``hosts`` (host -> result, with ``failed`` or
``skipped`` set by the callback and ``action``), and ``stats`` (host -> ok, changed,
failures, unreachable, skipped, rescued, ignored).
"""

import json

# Keys of a task's result that are the callback's or Ansible's bookkeeping.
_BOOKKEEPING = ("_ansible_no_log", "_ansible_verbose_always", "invocation")


def _split_name(full):
    """``(role, task)`` from the callback's ``role : task`` (role None outside a role)."""
    role, sep, task = full.partition(" : ")
    if sep and " " not in role.strip():
        return role.strip(), task.strip()
    return None, full.strip()


def _document(stdout):
    """The callback's JSON document in ``stdout``, or None when the run did not finish.

    The callback writes one document when the run ends; a run killed before that
    leaves nothing or a partial document (the model_sync scenario kills one).
    """
    text = stdout or ""
    start = text.find("{")
    if start < 0:
        return None
    try:
        doc = json.loads(text[start:])
    except ValueError:
        return None
    if not isinstance(doc, dict) or "stats" not in doc or "plays" not in doc:
        return None
    return doc


def _message(result):
    """What a failed result says: its msg, or the first failed loop item's."""
    if result.get("msg"):
        return str(result["msg"])
    for item in result.get("results") or []:
        if isinstance(item, dict) and item.get("failed") and item.get("msg"):
            return str(item["msg"])
    return str(result.get("stderr") or "")


def playbook_run(stdout, rc=None):
    """A nested run's JSON document as ``{complete, rc, stats, plays, tasks, ran, results, failed, changed}``.

    - ``stats``: host -> the recap's counts (ints).
    - ``plays``: the play names in order, each with the hosts that ran (not skipped) any task.
    - ``tasks``: every task in order: ``{play, role, name, hosts: {host: result}}``.
    - ``ran``: task name (without the role) -> the hosts it ran on, not skipped, in any play.
    - ``results``: task name -> host -> the last result of that task that was not skipped.
    - ``failed``: ``{host, play, role, task, msg, result}`` for every failed result. The callback
      does not record ``ignore_errors``, so an ignored failure is listed too (``stats`` counts it
      under ``ignored``, not ``failures``).
    - ``changed``: ``{host, play, role, task}`` for every changed result.
    """
    doc = _document(stdout)
    out = {
        "complete": doc is not None,
        "rc": rc,
        "stats": {},
        "plays": [],
        "tasks": [],
        "ran": {},
        "results": {},
        "failed": [],
        "changed": [],
    }
    if doc is None:
        return out
    out["stats"] = {
        host: {key: int(value) for key, value in counts.items()} for host, counts in doc["stats"].items()
    }
    for play in doc["plays"]:
        play_name = play.get("play", {}).get("name", "")
        play_hosts = set()
        for task in play.get("tasks", []):
            role, name = _split_name(task.get("task", {}).get("name", ""))
            hosts = {}
            for host, raw in (task.get("hosts") or {}).items():
                result = {k: v for k, v in raw.items() if k not in _BOOKKEEPING}
                hosts[host] = result
                if result.get("skipped"):
                    continue
                play_hosts.add(host)
                ran = out["ran"].setdefault(name, [])
                if host not in ran:
                    ran.append(host)
                out["results"].setdefault(name, {})[host] = result
                where = {"host": host, "play": play_name, "role": role, "task": name}
                if result.get("failed"):
                    out["failed"].append(dict(where, msg=_message(result), result=result))
                if result.get("changed"):
                    out["changed"].append(where)
            out["tasks"].append({"play": play_name, "role": role, "name": name, "hosts": hosts})
        out["plays"].append({"name": play_name, "hosts": sorted(play_hosts)})
    for name in out["ran"]:
        out["ran"][name].sort()
    return out


def recap_unchanged(run):
    """The hosts of a run whose recap says changed=0 and failures=0, sorted."""
    return sorted(
        h for h, s in run.get("stats", {}).items() if s.get("changed") == 0 and s.get("failures") == 0
    )


def failed_hosts(run, task=None):
    """The hosts with a failed result (of ``task`` when given), sorted, each once."""
    return sorted({f["host"] for f in run.get("failed", []) if task is None or f["task"] == task})


class FilterModule:
    """playbook_run, recap_unchanged, failed_hosts (Molecule scenarios only)."""

    def filters(self):
        return {
            "playbook_run": playbook_run,
            "recap_unchanged": recap_unchanged,
            "failed_hosts": failed_hosts,
        }
