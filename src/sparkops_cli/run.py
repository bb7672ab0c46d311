# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""One playbook run through ansible-runner, with its artifacts directory.

Layout of a run's directory (printed at the end)::

    summary.json         the --json document (outcome, hosts, stages, problems)
    summary.txt          the summary table as printed
    status.json          status: the cluster status the playbook wrote
    diagnose.json        diagnose: the report the playbook wrote
    fabric.json          fabric: the fabric check's report (fabric.md: as Markdown)
    bench/               bench: bench.json, bench.md, bench.png and llama-benchy's own files
    probe.json           probe: the correctness probe's verdict and answers
    support/             diagnose: the support bundle
    runner/stdout        ansible-playbook's output
    runner/job_events/   every runner event, one JSON file each
    runner/command       the ansible-playbook command, cwd and environment
                         (values of secret-looking variables redacted)
    runner/rc, status    ansible-playbook's exit code, the runner's status
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import ansible_runner
from ansible.config.manager import ConfigManager

from sparkops_cli.events import RunEvents
from sparkops_cli.extravars import ExtraVar, redact_environment, write_extra_vars
from sparkops_cli.report import result_document, summary_text

RUNNER_IDENT = "runner"

# Extra variables the CLI gives the playbooks that write a report, so the report
# lands in the run's directory: name -> path under it.
REPORT_VARS: dict[str, dict[str, str]] = {
    "status": {"cluster_status_json_path": "status.json"},
    "diagnose": {
        "cluster_diagnose_json_path": "diagnose.json",
        "cluster_diagnose_bundle_dir": "support",
    },
    "fabric": {"fabric_check_json_path": "fabric.json", "fabric_check_markdown_path": "fabric.md"},
    "bench": {"bench_report_dir": "bench"},
    "probe": {"correctness_probe_json_path": "probe.json"},
}
REPORT_FILE = {
    "status": "status.json",
    "diagnose": "diagnose.json",
    "fabric": "fabric.json",
    "bench": "bench/bench.json",
    "probe": "probe.json",
}
# Commands whose playbook's own report (its debug output) is the answer.
SHOW_REPORTS = {"status", "diagnose", "reclaim", "fabric", "bench", "probe", "upgrade", "rollback"}


def default_run_dir(project: Path, command: str, now: datetime | None = None) -> Path:
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    root = project / ".cache" / "sparkops" / "runs"
    path = root / f"{stamp}-{command}"
    number = 1
    while path.exists():
        number += 1
        path = root / f"{stamp}-{command}-{number}"
    return path


def prepare_run_dir(path: Path) -> Path:
    """Create the run's directory (0700); refuse one that already holds a run."""
    path = path.resolve()
    if path.exists() and any(path.iterdir()):
        raise FileExistsError(f"{path} is not empty; give --artifacts a new directory")
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.chmod(0o700)
    return path


@dataclass
class PlaybookRun:
    """What to run; :meth:`execute` runs it and returns the result document."""

    command: str
    project: Path
    playbook: str
    run_dir: Path
    display_argv: list[str]
    inventory: list[Path] = field(default_factory=list)
    check: bool = False
    extra: list[ExtraVar] = field(default_factory=list)
    progress: TextIO = sys.stderr

    def report_vars(self) -> dict[str, str]:
        return {name: str(self.run_dir / rel) for name, rel in REPORT_VARS.get(self.command, {}).items()}

    def environment(self) -> dict[str, str]:
        bindir = str(Path(sys.executable).parent)
        env = {
            # ansible-playbook from the CLI's own environment, even when it is not on PATH.
            "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
            # Plain text in runner/stdout: runner gives ansible-playbook a terminal.
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_FORCE_COLOR": "0",
        }
        # The repository's ansible.cfg, as for `ansible-playbook deploy.yml` from
        # the root, unless the caller chose one.
        config = os.environ.get("ANSIBLE_CONFIG") or str(self.project / "ansible.cfg")
        env["ANSIBLE_CONFIG"] = config
        # ansible-runner turns host key checking off unless the environment
        # says otherwise; the configuration's setting stands instead.
        if "ANSIBLE_HOST_KEY_CHECKING" not in os.environ:
            checking = ConfigManager(conf_file=config).get_config_value("HOST_KEY_CHECKING")
            env["ANSIBLE_HOST_KEY_CHECKING"] = "True" if checking else "False"
        return env

    def _write_json(self, name: str, data: Any) -> None:
        path = self.run_dir / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2, default=str)
            handle.write("\n")

    def _redact_runner_command(self) -> None:
        """runner/command holds the whole environment; keep names, hide secret values."""
        path = self.run_dir / RUNNER_IDENT / "command"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        data["env"] = redact_environment(data.get("env") or {})
        self._write_json(f"{RUNNER_IDENT}/command", data)

    def _say(self, lines: list[str]) -> None:
        for line in lines:
            print(line, file=self.progress, flush=True)

    def execute(self, runner: Callable[..., Any] = ansible_runner.run) -> dict[str, Any]:
        events = RunEvents(reports=self.command in SHOW_REPORTS)
        cancelled = {"flag": False}

        def on_event(event: Mapping[str, Any]) -> bool:
            self._say(events.feed(event))
            return True

        def on_interrupt(_signum: int, _frame: Any) -> None:
            cancelled["flag"] = True
            self._say(["", "interrupted: stopping ansible-playbook"])

        started = datetime.now(UTC).isoformat(timespec="seconds")
        kind = " in check mode" if self.check else ""
        self._say([f"sparkops {self.command}: {self.playbook}{kind}", f"artifacts: {self.run_dir}"])
        previous = signal.signal(signal.SIGINT, on_interrupt)
        private = Path(tempfile.mkdtemp(prefix="sparkops-"))
        try:
            args: list[str] = []
            for path in self.inventory:
                args += ["-i", str(path)]
            if self.check:
                args.append("--check")
            args += write_extra_vars(self.extra, private)
            for name, value in self.report_vars().items():
                args += ["-e", json.dumps({name: value})]
            result = runner(
                private_data_dir=str(private),
                project_dir=str(self.project),
                playbook=str(self.project / self.playbook),
                artifact_dir=str(self.run_dir),
                ident=RUNNER_IDENT,
                cmdline=shlex.join(args),
                envvars=self.environment(),
                suppress_env_files=True,
                quiet=True,
                rotate_artifacts=0,
                # Facts stay in memory as ansible.cfg says (runner would cache them as files).
                fact_cache_type="memory",
                event_handler=on_event,
                cancel_callback=lambda: cancelled["flag"],
            )
            rc, status = result.rc, result.status
        finally:
            signal.signal(signal.SIGINT, previous)
            shutil.rmtree(private, ignore_errors=True)
        self._redact_runner_command()
        report, report_path = self._read_report()
        doc = result_document(
            command=self.command,
            playbook=self.playbook,
            argv=self.display_argv,
            inventory=[str(path) for path in self.inventory],
            check=self.check,
            rc=rc,
            runner_status="canceled" if cancelled["flag"] else status,
            events=events,
            artifacts=str(self.run_dir),
            report=report,
            report_path=report_path,
            started=started,
            finished=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        if cancelled["flag"]:
            doc["outcome"], doc["exit_code"] = "interrupted", 130
        self._write_json("summary.json", doc)
        text = summary_text(doc)
        fd = os.open(self.run_dir / "summary.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
        return doc

    def _read_report(self) -> tuple[Any, str | None]:
        name = REPORT_FILE.get(self.command)
        if name is None:
            return None, None
        path = self.run_dir / name
        if not path.is_file():
            return None, None
        try:
            return json.loads(path.read_text(encoding="utf-8")), str(path)
        except ValueError as exc:
            return {"error": f"{path} is not JSON: {exc}"}, str(path)
