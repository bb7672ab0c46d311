"""The serve_lifecycle scenario's comparisons of the lab's state, as filters.

The scenario reads every node's units (molecule/serve_lifecycle/files/unit_state.py:
host -> unit -> {ActiveState, MainPID, ActiveEnterTimestampMonotonic, NRestarts,
ContainerStartedAt}) and the workers' deployed records before and after a
deploy.yml run, and asserts on what moved. The names come from the layout
(molecule/shared/vars/layout.yml's ``_layout``), never built here.
"""

# What says that a Ray unit restarted: a new main process, a later activation,
# a new container.
RAY_KEYS = ("MainPID", "ActiveEnterTimestampMonotonic", "ContainerStartedAt")

# The deployed record's section that holds the memory plan (the utilization).
PLAN_SECTION = "plan"


def _ray_unit(host, head, units):
    """The Ray unit a host runs: the head's or a worker's."""
    return units["ray_head"] if host == head else units["ray_worker"]


def lifecycle_units(hosts, head, layout):
    """Host -> the units (and containers of the same name) it runs: Ray head and serve, or Ray worker."""
    units = layout["units"]
    return {
        host: [_ray_unit(host, head, units)] + ([units["serve"]] if host == head else []) for host in hosts
    }


def ray_moved(after, before, head, layout):
    """``'host unit key'`` for each Ray unit that restarted between ``before`` and ``after``.

    A unit restarted when its main process, activation time or container start differ;
    one not active after is listed as ``'host unit state'``. Every host of ``after``.
    """
    units = layout["units"]
    out = []
    for host in after:
        unit = _ray_unit(host, head, units)
        was, now = before[host][unit], after[host][unit]
        out.extend(f"{host} {unit} {key}" for key in RAY_KEYS if was.get(key) != now.get(key))
        if now.get("ActiveState") != "active":
            out.append(f"{host} {unit} {now.get('ActiveState')}")
    return out


def records_moved(after, before):
    """``'host section'`` for each section of a host's deployed record that moved, the plan aside.

    ``before`` and ``after`` map host -> the record (``{"sections": {...}}``); a host
    missing on one side moved in every section the other has.
    """
    out = []
    for host in sorted(set(before) | set(after)):
        was = (before.get(host) or {}).get("sections") or {}
        now = (after.get(host) or {}).get("sections") or {}
        out.extend(
            f"{host} {key}"
            for key in sorted(set(was) | set(now))
            if key != PLAN_SECTION and was.get(key) != now.get(key)
        )
    return out


class FilterModule:
    """lifecycle_units, ray_moved, records_moved (the serve_lifecycle scenario)."""

    def filters(self):
        return {
            "lifecycle_units": lifecycle_units,
            "ray_moved": ray_moved,
            "records_moved": records_moved,
        }
