"""diagnose.yml's collection, redaction, support bundle and report, on what the lab really logged.

tests/fixtures/support_bundle/journal_vllm_startup_short.log is the serve unit's journal from the h3 lab
(2026-11-30) when vLLM's startup check refused 0.55 of 23.54 GiB with 5.46 GiB free;
dmesg_refused.err is what `dmesg` says in a lab node (an unprivileged container).
tests/fixtures/cluster_status/launch.sh is the deployed launch script of the same lab.
"""

import json
import os
import stat
import tarfile

import pytest
from ansible_collections.sparkops.vllm.plugins.filter.support_bundle import FilterModule
from ansible_collections.sparkops.vllm.plugins.module_utils import _diagnose as diagnose
from ansible_collections.sparkops.vllm.plugins.module_utils import _support_bundle as support
from conftest import FIXTURES

JOURNAL = (FIXTURES / "support_bundle" / "journal_vllm_startup_short.log").read_text()
LAUNCH = (FIXTURES / "cluster_status" / "launch.sh").read_text()
DMESG_REFUSED = (FIXTURES / "support_bundle" / "dmesg_refused.err").read_text()
FILTERS = FilterModule().filters()
API_KEY = "Zq4TgW8rN2vKx7LmP0aB3cD5eF6hJ9sY"
HF_TOKEN = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"


# -- redaction ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (f"  --api-key {API_KEY} \\", "  --api-key [REDACTED] \\"),
        (f"--api-key={API_KEY}", "--api-key=[REDACTED]"),
        (f"HF_TOKEN={HF_TOKEN}", "HF_TOKEN=[REDACTED]"),
        (
            f'"Env": ["VLLM_API_KEY={API_KEY}", "PATH=/usr/bin"]',
            '"Env": ["VLLM_API_KEY=[REDACTED]", "PATH=/usr/bin"]',
        ),
        (
            f"curl -H 'Authorization: Bearer {API_KEY}' http://x",
            "curl -H 'Authorization: Bearer [REDACTED]' http://x",
        ),
        (f'{{"authorization": "bearer {API_KEY}"}}', '{"authorization": "bearer [REDACTED]"}'),
        (f"token is {HF_TOKEN} here", "token is [REDACTED] here"),
        ("HUGGING_FACE_HUB_TOKEN: 'abc123def'", "HUGGING_FACE_HUB_TOKEN: '[REDACTED]'"),
    ],
)
def test_patterns_redact_the_value_and_keep_the_name(line, expected):
    assert support.redact(line) == expected


def test_the_inventory_secret_is_redacted_wherever_it_appears():
    text = f"INFO non-default args: {{'api_key': '{API_KEY}', 'x': 1}} and again{API_KEY}"
    assert (
        support.redact(text, [API_KEY])
        == "INFO non-default args: {'api_key': '[REDACTED]', 'x': 1} and again[REDACTED]"
    )


def test_real_logs_without_secrets_are_unchanged():
    # The launch script reads the key from the environment, and the stand-in logs api_key as '***'.
    assert support.redact(LAUNCH, [API_KEY]) == LAUNCH
    assert support.redact(JOURNAL, [API_KEY]) == JOURNAL
    assert '--api-key "${VLLM_API_KEY}"' in LAUNCH


def test_short_or_empty_secrets_are_ignored():
    assert support.redact("lab ray head", ["lab", "", None]) == "lab ray head"


# -- collection on a node ----------------------------------------------------


def test_host_path_follows_ray_session_latest_into_the_mount(tmp_path):
    state = tmp_path / "var/lib/sparkops/lab/ray"
    logs = state / "session_2026-11-30_09-44-48_087775_842" / "logs"
    logs.mkdir(parents=True)
    (state / "session_latest").symlink_to("/tmp/ray/session_2026-11-30_09-44-48_087775_842")
    (logs / "raylet.out").write_text("raylet started\n")
    path = str(state / "session_latest" / "logs")
    assert support.host_path(path, {"/tmp/ray": str(state)}) == str(logs)
    files, notes = support.collect_dir(path, 1024, 10, {"/tmp/ray": str(state)})
    assert notes == []
    assert [(f["name"], f["content"]) for f in files] == [("ray/raylet.out", "raylet started\n")]
    files, notes = support.collect_dir(path, 1024, 10)
    assert files == [] and notes[0]["note"].startswith("no such directory")


def test_collect_dir_takes_tails_skips_binary_and_caps_the_count(tmp_path):
    (tmp_path / "a.log").write_text("".join(f"line {i}\n" for i in range(100)))
    (tmp_path / "b.bin").write_bytes(b"\0\1\2" * 10)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.err").write_text("error\n")
    files, notes = support.collect_dir(str(tmp_path), 40, 10)
    by_name = {f["name"]: f for f in files}
    assert sorted(by_name) == ["ray/a.log", "ray/sub/c.err"]
    assert by_name["ray/a.log"]["truncated"] is True
    assert by_name["ray/a.log"]["content"].endswith("line 99\n")
    assert by_name["ray/a.log"]["content"].startswith("line ")
    files, notes = support.collect_dir(str(tmp_path), 1024, 1)
    assert len(files) == 1 and notes == [
        {"source": str(tmp_path), "note": "3 files; the first 1 by name were taken"}
    ]


def test_a_refused_dmesg_is_a_note_and_the_journal_is_tried(monkeypatch):
    calls = []

    def fake_run(argv, timeout=120):
        calls.append(argv[0])
        if argv[0] == "dmesg":
            return 1, "", DMESG_REFUSED
        return (
            0,
            "2026-11-30T09:00:00+0000 h kernel: NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus\n"
            "2026-11-30T09:00:01+0000 h kernel: usb 1-1: new device\n",
            "",
        )

    monkeypatch.setattr(support, "_run", fake_run)
    files, notes = support.collect_kernel("NVRM|Xid|oom-kill", 100)
    assert calls == ["dmesg", "journalctl"]
    assert notes == [
        {
            "source": "dmesg --ctime",
            "note": "refused (rc 1): dmesg: read kernel buffer failed: Operation not permitted",
        }
    ]
    assert files[0]["content"].count("\n") == 1 and "GPU has fallen off the bus" in files[0]["content"]


def test_both_kernel_sources_refused(monkeypatch):
    monkeypatch.setattr(support, "_run", lambda argv, timeout=120: (1, "", DMESG_REFUSED))
    files, notes = support.collect_kernel("NVRM", 100)
    assert files == [] and len(notes) == 2


def test_a_unit_without_journal_is_a_note(monkeypatch):
    outputs = {"sparkops-lab-vllm.service": "-- No entries --\n", "sparkops-lab-ray-head.service": JOURNAL}
    monkeypatch.setattr(support, "_run", lambda argv, timeout=120: (0, outputs[argv[-1]], ""))
    files, notes = support.collect_journals(
        ["sparkops-lab-ray-head.service", "sparkops-lab-vllm.service"], 5000
    )
    assert [f["name"] for f in files] == ["journal/sparkops-lab-ray-head.service.log"]
    assert notes == [
        {
            "source": "journalctl -u sparkops-lab-vllm.service",
            "note": "no journal entries (the unit never ran here)",
        }
    ]


def test_a_missing_command_is_rc_127():
    assert support._run(["sparkops-no-such-command"])[0] == 127


# -- staging, diagnosis and the bundle on the controller -----------------------


def _collected():
    planted = (
        f"curl -H 'Authorization: Bearer {API_KEY}'\nHF_TOKEN={HF_TOKEN}\nvllm serve --api-key {API_KEY}\n"
    )
    return {
        "spark-1": {
            "files": [
                {"name": "journal/sparkops-lab-vllm.service.log", "content": JOURNAL},
                {"name": "ray/planted-secret.log", "content": planted},
            ]
        },
        "spark-2": {
            "files": [{"name": "facts/driver.txt", "content": "NVIDIA driver 580.95.05, branch 580"}]
        },
    }


def test_stage_diagnose_and_pack_a_bundle_without_secrets(tmp_path):
    bundle_dir = tmp_path / "support"
    staging = bundle_dir / ".staging-lab"
    paths, path_hosts = support.stage(_collected(), str(staging), [API_KEY, HF_TOKEN])
    assert stat.S_IMODE(os.stat(bundle_dir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(staging).st_mode) == 0o700
    assert all(stat.S_IMODE(os.stat(p).st_mode) == 0o600 for p in paths)
    assert path_hosts[str(staging / "spark-1" / "journal" / "sparkops-lab-vllm.service.log")] == "spark-1"

    result = diagnose.diagnose_paths(paths, {"path_hosts": path_hosts})
    findings = FILTERS["support_findings"](result, str(staging))
    assert findings[0]["id"] == "startup_memory_short"
    assert findings[0]["host"] == "spark-1"  # the inventory name of the node the file came from
    assert findings[0]["source"] == "spark-1/journal/sparkops-lab-vllm.service.log"
    assert findings[0]["evidence"][0]["path"] == "spark-1/journal/sparkops-lab-vllm.service.log"
    assert set(findings[0]) == {"id", "severity", "summary", "fix", "host", "source", "evidence"}

    lines = FILTERS["support_report"](findings, [], [], result["lines_read"], str(bundle_dir / "b.tar.gz"))
    bundle = support.pack(
        str(staging),
        str(bundle_dir / "sparkops-lab-x.tar.gz"),
        {"report.txt": "\n".join(lines), "diagnose.json": json.dumps({"findings": findings})},
        [API_KEY, HF_TOKEN],
    )
    assert not staging.exists()
    assert stat.S_IMODE(os.stat(bundle).st_mode) == 0o600
    out = tmp_path / "out"
    with tarfile.open(bundle) as tar:
        names = tar.getnames()
        tar.extractall(out, filter="data")
    assert "sparkops-lab-x/report.txt" in names and "sparkops-lab-x/spark-1/ray/planted-secret.log" in names
    assert support.secrets_found(str(out), [API_KEY, HF_TOKEN]) == []
    planted = (out / "sparkops-lab-x" / "spark-1" / "ray" / "planted-secret.log").read_text()
    assert planted.count("[REDACTED]") == 3


def test_an_existing_bundle_dir_keeps_its_mode(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    support.stage({"h": {"files": [{"name": "x.log", "content": "x"}]}}, str(shared / ".staging"), [])
    assert stat.S_IMODE(os.stat(shared).st_mode) == 0o755
    assert stat.S_IMODE(os.stat(shared / ".staging").st_mode) == 0o700


@pytest.mark.parametrize("name", ["../escape.log", "logs/../../escape.log", ".."])
def test_a_file_name_cannot_leave_the_staging_dir(tmp_path, name):
    with pytest.raises(ValueError, match="leaves"):
        support.stage({"h": {"files": [{"name": name, "content": "x"}]}}, str(tmp_path / "s"), [])


def test_gathered_reports_unreachable_hosts_units_and_notes():
    collected = {
        "spark-1": {
            "units": [
                {
                    "unit": "sparkops-lab-vllm.service",
                    "active_state": "activating",
                    "sub_state": "auto-restart",
                    "restarts": 3,
                }
            ],
            "notes": [{"source": "dmesg --ctime", "note": "refused"}],
        }
    }
    result = FILTERS["support_gathered"](
        ["spark-1", "spark-2"],
        {
            "spark-1": {"cluster_diagnose_collected": collected["spark-1"]},
            "spark-2": {
                "cluster_status_raw": {"msg": "ssh: connect to host 172.29.10.12 port 22: No route to host"}
            },
        },
    )
    assert result == {
        "reached": ["spark-1"],
        "units": [
            {
                "host": "spark-1",
                "unit": "sparkops-lab-vllm.service",
                "state": "activating/auto-restart, 3 restart(s)",
            }
        ],
        "notes": [
            {"source": "dmesg --ctime", "note": "refused", "host": "spark-1"},
            {
                "host": "spark-2",
                "source": "ssh",
                "note": "unreachable, nothing collected: ssh: connect to host 172.29.10.12 port 22: No route to host",
            },
        ],
    }


def test_report_without_findings_says_how_much_was_read():
    lines = support.report_lines(
        [],
        [{"host": "spark-1", "unit": "u", "state": "active/running"}],
        [{"host": "spark-2", "source": "ssh", "note": "unreachable"}],
        219,
        "/b.tar.gz",
    )
    assert lines == [
        "No known cause in 219 log lines.",
        "Units: spark-1 u active/running",
        "Note: spark-2: ssh: unreachable",
        "Support bundle (secrets redacted): /b.tar.gz",
    ]


def test_bundle_name_is_utc():
    assert support.bundle_name("sparkops lab", 0) == "sparkops_lab-19700101T000000Z.tar.gz"


def test_since_as_epoch_or_relative():
    assert support.since_epoch("@1767225600") == 1767225600.0
    assert support.since_epoch("-2h", now=10000.0) == 10000.0 - 7200
    assert support.since_epoch("-15 m", now=1000.0) == 100.0
    # journalctl's other forms limit only the journals.
    assert support.since_epoch("2026-01-01 10:00") is None
    assert support.since_epoch("") is None


def test_since_leaves_out_older_files_and_asks_docker_for_newer_lines(tmp_path, monkeypatch):
    old, new = tmp_path / "old.log", tmp_path / "new.log"
    old.write_text("placement group waited\n")
    new.write_text("Free memory on device\n")
    os.utime(old, (1000, 1000))
    os.utime(new, (3000, 3000))
    files, _notes = support.collect_dir(str(tmp_path), 1024, 10, since=2000)
    assert [f["name"] for f in files] == ["ray/new.log"]
    calls = []

    def fake_run(argv, timeout=120):
        calls.append(argv)
        return (0, "sparkops-lab-vllm\n", "") if argv[1] == "ps" else (0, "line\n", "")

    monkeypatch.setattr(support, "_run", fake_run)
    support.collect_containers("io.sparkops.vllm.cluster=lab", 100, "docker", since=2000.5)
    assert calls[1] == [
        "docker",
        "logs",
        "--timestamps",
        "--tail",
        "100",
        "--since",
        "2000",
        "sparkops-lab-vllm",
    ]


# --- cluster diagnose reads each unit from its last start (issue 17) ------------------------


# `systemctl show -p InactiveExitTimestamp --timestamp=unix --value UNIT` as systemd 252
# (Debian 12, the lab's nodes) prints it: "@EPOCH", or an empty line for a unit that never ran.
@pytest.mark.parametrize(
    ("text", "epoch"),
    [
        ("@1764612000\n", 1764612000.0),
        ("@1764612000.5", 1764612000.5),
        ("\n", None),
        ("", None),
        ("n/a", None),
    ],
)
def test_the_unit_start_is_read_from_systemctl(text, epoch):
    assert support.parse_unit_start(text) == epoch


def test_last_start_reads_every_unit_from_its_own_start(monkeypatch):
    starts = {"sparkops-lab-ray-head.service": "@1764612000\n", "sparkops-lab-vllm.service": "\n"}
    calls = []

    def fake_run(argv, timeout=120):
        calls.append(argv)
        if argv[0] == "systemctl":
            return 0, starts[argv[-1]], ""
        return 0, JOURNAL, ""

    monkeypatch.setattr(support, "_run", fake_run)
    per_unit, earliest = support.resolve_since(list(starts), support.LAST_START)
    assert per_unit == {"sparkops-lab-ray-head.service": "@1764612000", "sparkops-lab-vllm.service": None}
    assert earliest == "@1764612000"
    support.collect_journals(list(starts), 5000, per_unit)
    journals = [argv for argv in calls if argv[0] == "journalctl"]
    assert "--since=@1764612000" in journals[0]
    # A unit that never started: its last lines, with no --since.
    assert not [arg for arg in journals[1] if arg.startswith("--since")]


def test_a_given_since_applies_to_every_unit_unchanged(monkeypatch):
    monkeypatch.setattr(support, "_run", lambda argv, timeout=120: pytest.fail(f"ran {argv}"))
    assert support.resolve_since(["a.service", "b.service"], "-2h") == (
        {"a.service": "-2h", "b.service": "-2h"},
        "-2h",
    )
    assert support.resolve_since(["a.service"], "") == ({"a.service": None}, None)
