"""No role, template, playbook or scenario builds a deployment's name or path itself.

Every unit, container, config and state path comes from the layout module
(plugins/module_utils/_layout.py) through the ``sparkops.vllm.layout`` filter.
This scans the YAML and Jinja text of the roles' defaults, vars, tasks,
handlers and templates, of the playbooks and of the Molecule scenarios for
the ways these names were built before (and had drifted: vllm_serve
hard-coded the state directory that ray_cluster lets the operator move;
model_sync's defaults spelled /etc/sparkops/model-sync), joined names
included (``'sparkops-' ~ x ~ '-vllm'``, ``sparkops-{{ ... }}-ray-head``,
``/var/lib/sparkops/{{ ... }}``), and for a task reading the launch script
back (the deployed record says what was deployed: docs/deployed-record.md).

The rule for Molecule scenarios (molecule/*/ and molecule/shared/): a scenario
takes the names it acts on from molecule/shared/vars/layout.yml, never
building one from the cluster name or a path setting, so a line of a scenario
drifts when it matches a pattern below and templates (``{{``) or joins (``~``)
on the same line. A scenario may state a name as a plain literal where it is a
test's expectation (``'spark-1: would restart sparkops-lab-vllm (active)' in
__out``: the lab's cluster is ``lab``), because an expectation computed by the
code under test proves nothing. /etc/sparkops-lab is the lab simulator's own
state (lab/nvidia-smi), not a deployment's.

The lab's own role and playbooks build the lab's names, not a deployment's,
and are left out; so is validate's inventory contract, which names no path.
"""

import re

import pytest
import yaml
from conftest import ROOT

SCANNED = sorted(
    {
        path
        for pattern in (
            "roles/*/defaults/*.yml",
            "roles/*/vars/*.yml",
            "roles/*/tasks/*.yml",
            "roles/*/handlers/*.yml",
            "roles/*/templates/*",
            "playbooks/*.yml",
            "*.yml",
            "molecule/*/*.yml",
            "molecule/*/*/*.yml",
            "molecule/*/*/*.j2",
        )
        for path in ROOT.glob(pattern)
        if path.relative_to(ROOT).parts[:2] != ("roles", "lab")
        and not path.name.startswith("lab_")
        and path.relative_to(ROOT).as_posix() not in ("galaxy.yml", "requirements.yml")
    }
)

# Files known to build names still, each a strict xfail: the test fails (and
# the entry must go) as soon as the file takes its names from the layout.
KNOWN_DRIFT = set()


def _scenario(path):
    return path.relative_to(ROOT).parts[0] == "molecule"


def _param(path):
    name = path.relative_to(ROOT).as_posix()
    marks = (
        [pytest.mark.xfail(reason="serve_lifecycle reworked elsewhere", strict=True)]
        if name in KNOWN_DRIFT
        else []
    )
    return pytest.param(path, id=name, marks=marks)


# What building a name looks like, each with the reason it is refused.
FORBIDDEN = [
    (re.compile(r"sparkops[-_]\{\{"), "a name built from the cluster name (sparkops-{{ ... }})"),
    (re.compile(r"""['"]sparkops[-_][a-z-]*['"]\s*~"""), "a name built with ~ ('sparkops-' ~ ...)"),
    (re.compile(r"/var/lib/sparkops"), "the state directory's default"),
    (re.compile(r"/etc/sparkops(?!-lab)"), "the config directory"),
    (re.compile(r"/var/log/sparkops"), "model_sync's progress directory"),
    (re.compile(r"/opt/sparkops"), "the launch script's path in the container"),
    (re.compile(r"-ray-(head|worker|firewall)\b"), "a Ray unit or container name"),
    (re.compile(r"-monitoring-firewall\b"), "the monitoring firewall's unit or script"),
    (re.compile(r"SPARKOPS-(RAY|MON)-"), "a firewall chain's name"),
    (re.compile(r"\}\}-vllm\b"), "the serve unit or container name"),
    (re.compile(r"""~\s*['"]-(vllm|ray-|watchdog)"""), "a name joined with ~ (... ~ '-vllm')"),
    (re.compile(r"model-sync-rsyncd(?!\.service\.j2)"), "model_sync's rsync daemon unit"),
    (re.compile(r"launch\.sh"), "the launch script's name"),
    (re.compile(r"(measured|deployed)\.json"), "a record's name"),
    (re.compile(r"sparkops-manifest"), "the model manifest's name"),
    (re.compile(r"/etc/systemd/system/\{\{"), "a unit file path"),
    (re.compile(r"\}\}\.(service|timer)\b"), "a unit name with its suffix appended"),
    (re.compile(r"""~\s*['"]\.(service|timer)['"]"""), "a unit name with its suffix appended"),
    (re.compile(r"(ray|\}\})/session_latest"), "Ray's session link in the state directory"),
]

# A task that reads the deployed launch script or a unit file back to parse it.
READBACK = re.compile(
    r"(slurp|systemctl, cat)[^\n]*\n(?:[^\n]*\n){0,3}?[^\n]*(launch_script|\.service|unit_name|unit_file)",
    re.MULTILINE,
)


def _code(path):
    """The file's lines without comment lines (YAML `#`, Jinja `{# #}` on one line)."""
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("#") or (stripped.startswith("{#") and stripped.endswith("#}")):
            continue
        yield number, line


def test_the_scan_covers_the_stage_roles_and_playbooks():
    names = {path.relative_to(ROOT).as_posix() for path in SCANNED}
    assert {
        "roles/vllm_serve/templates/vllm.service.j2",
        "roles/ray_cluster/vars/main.yml",
        "roles/teardown/tasks/main.yml",
        "playbooks/reclaim.yml",
        "deploy.yml",
        "roles/model_sync/defaults/main.yml",
        "roles/ray_cluster/handlers/main.yml",
        "molecule/memory_plan/converge.yml",
        "molecule/runbooks_lifecycle/tasks/completion.yml",
        "molecule/shared/vars/layout.yml",
    } <= names
    assert names >= KNOWN_DRIFT


def _builds(path, line):
    """A scenario's line drifts only where it builds the name; a role's or playbook's always."""
    return not _scenario(path) or "{{" in line or "~" in line


@pytest.mark.parametrize("path", [_param(path) for path in SCANNED])
def test_no_name_or_path_is_built_outside_the_layout(path):
    found = [
        f"{path.relative_to(ROOT)}:{number}: {why}: {line.strip()}"
        for number, line in _code(path)
        for pattern, why in FORBIDDEN
        if pattern.search(line) and _builds(path, line)
    ]
    assert not found, "take these from the layout (sparkops.vllm.layout):\n" + "\n".join(found)


@pytest.mark.parametrize("path", SCANNED, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_nothing_reads_the_launch_script_or_a_unit_back(path):
    text = "\n".join(line for _, line in _code(path))
    found = [match.group(0) for match in READBACK.finditer(text)]
    assert not found, f"{path.relative_to(ROOT)}: read the deployed record instead: {found}"


@pytest.mark.parametrize(
    "text",
    [
        "_x: sparkops-{{ sparkops_cluster_name }}-vllm",
        "_x: \"{{ 'sparkops-' ~ sparkops_cluster_name }}\"",
        "_x: /var/lib/sparkops/{{ sparkops_cluster_name }}",
        "    dest: /etc/systemd/system/{{ _unit }}.service",
        "  -v {{ script }}:/opt/sparkops/launch.sh:ro",
        '_x: "{{ _state }}/measured.json"',
        "model_sync_rsyncd_config_dir: /etc/sparkops/model-sync",
        "model_sync_progress_dir: /var/log/sparkops",
        "argv: [systemctl, is-active, \"{{ 'sparkops-' ~ _cluster ~ '-ray-firewall' }}\"]",
        "_x: \"{{ _base ~ '-vllm' }}\"",
        "_x: \"{{ _base ~ '-ray-head' }}\"",
        '_x: "sparkops-{{ sparkops_cluster_name }}-ray-head"',
        '  argv: [readlink, "{{ _ray }}/session_latest"]',
    ],
)
def test_the_patterns_catch_the_old_ways(text):
    assert any(pattern.search(text) for pattern, _ in FORBIDDEN)


@pytest.mark.parametrize(
    ("line", "drifts"),
    [
        ("        name: sparkops-{{ sparkops_cluster_name }}-ray-worker", True),
        ("      - /var/lib/sparkops/{{ sparkops_cluster_name }}/measured.json", True),
        ("    unit=\"{{ 'sparkops-' ~ _cluster ~ '-ray-firewall' }}\"", True),
        # an expectation stated as a literal is the test's own fact
        ("          - \"'spark-2: would restart sparkops-lab-ray-worker (active)' in __out\"", False),
        # the lab simulator's state, not a deployment's
        ("        dest: /etc/sparkops-lab/gpu-state.json", False),
    ],
)
def test_a_scenario_may_state_an_expected_name_but_not_build_one(line, drifts):
    scenario = ROOT / "molecule" / "x" / "converge.yml"
    assert any(pattern.search(line) and _builds(scenario, line) for pattern, _ in FORBIDDEN) is drifts


def test_the_readback_pattern_catches_the_old_read():
    old = """- name: Plan | Read the deployed launch script's utilization, on the head
  ansible.builtin.slurp:
    src: "{{ _layout.launch_script }}"
"""
    assert READBACK.search(old)


LAYOUT_CALL = re.compile(r"sparkops\.vllm\.layout\((.*?)\)\s*\}\}", re.DOTALL)


def _role_layouts():
    calls = {}
    for path in sorted(ROOT.glob("roles/*/vars/main.yml")):
        values = yaml.safe_load(path.read_text()) or {}
        role = path.parent.parent.name
        if f"_{role}_layout" in values:
            calls[role] = values[f"_{role}_layout"]
    return calls


def test_every_stage_role_takes_its_names_from_the_layout():
    assert set(_role_layouts()) >= {
        "cluster_diagnose",
        "cluster_restart",
        "cluster_status",
        "model_sync",
        "preflight",
        "ray_cluster",
        "teardown",
        "vllm_serve",
    }


def test_every_role_passes_the_layout_the_same_settings():
    # One layout for the whole deployment: a role that left a path setting
    # out would compute a different path than the role that wrote it.
    settings = {}
    for role, call in _role_layouts().items():
        args = LAYOUT_CALL.search(call).group(1)
        settings[role] = sorted(
            re.sub(r"\s+", " ", arg).strip()
            for arg in re.split(r",\s*(?=\w+=)", args)
            if not arg.strip().startswith("role=")
        )
    assert len({tuple(value) for value in settings.values()}) == 1, settings
