# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""``sparkops``: the sparkops.vllm runbooks through ansible-runner (docs/cli.md)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import NoReturn

from sparkops_cli.events import (
    EXIT_CHANGED,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
)
from sparkops_cli.extravars import ExtraVarsError, parse_extra_vars
from sparkops_cli.project import PLAYBOOKS, ProjectNotFound, diagnose_module, find_project, upgrade_module

COMMANDS = {
    "deploy": "deploy the cluster: every stage of deploy.yml (validate, preflight, network, image, model, Ray, serve)",
    "preflight": "validate the inventory and run the read-only preflight checks on every node; changes nothing",
    "status": "one table of the cluster's health; fails when anything is unhealthy",
    "diagnose": "collect logs from every node and name the root cause with its fix; "
    "with FILE arguments, diagnose those log files locally (no inventory, no Ansible)",
    "reclaim": "list the stale GPU consumers; stop the ones confirmed with -e",
    "restart": "restart serve, workers and head in order and wait for readiness",
    "teardown": "stop and remove the cluster's units and containers (model and image kept unless asked)",
    "fabric": "qualify the RoCE fabric: ib_write_bw per HCA between every pair of nodes and an all-reduce "
    "in the deployed image, against thresholds; fails when a test fails",
    "watchdog": "the watchdog on the head: status (enabled, paused or gave up, with the reason and the "
    "support bundle), pause, or resume (which also clears a 'gave up'); docs/runbooks/watchdog.md",
    "bench": "load the endpoint with llama-benchy from this machine: throughput, time to first token and "
    "inter-token latency per concurrency level (bench/bench.json, bench.md, bench.png); changes no node",
    "probe": "the correctness probe: identical greedy requests sent at once must give identical answers, "
    "equal to the deployment's recorded reference (probe.json)",
    "upgrade": "upgrade the cluster to another image (--image REF [--archive PATH], or --vllm-version V "
    "through the inventory's upgrade_image_ref_template) and/or model revision (--model-revision REV), "
    "gated on health, the correctness probe and the benchmark, rolled back when the gate fails; the "
    "previous deployment stays on every node until --confirm removes it; docs/upgrades.md",
    "rollback": "return to the deployment before the last upgrade (its image is still on every node, so "
    "nothing is downloaded), gated as an upgrade; docs/upgrades.md",
}
WATCHDOG_ACTIONS = ("status", "pause", "resume")

EXIT_CODES = f"""exit codes:
  {EXIT_OK}    ok: every task ok, nothing changed (in check mode: nothing would change)
  {EXIT_CHANGED}    changed: the run changed something (in check mode: would change)
  {EXIT_FAILED}    failed: a task failed, or ansible-playbook could not run; for
       `diagnose` and `diagnose FILE...`: an error-severity finding
  {EXIT_UNREACHABLE}    unreachable: a host could not be reached; this wins over failed,
       because what was not reached was not checked at all
  {EXIT_USAGE}    usage error: bad arguments, bad -e, no checkout to run
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C)
"""


class Parser(argparse.ArgumentParser):
    """argparse with the CLI's usage exit code instead of argparse's 2 (which is "changed")."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> Parser:
    parser = Parser(
        prog="sparkops",
        description="Run the sparkops.vllm runbooks through ansible-runner, with live progress per "
        "stage and host on stderr, a summary table, and the run's artifacts in a directory it prints. "
        "The inventory is the repository's ansible.cfg default (the local lab) unless -i is given.",
        epilog=EXIT_CODES + "\nDetails: docs/cli.md",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-i",
        "--inventory",
        action="append",
        default=[],
        metavar="INVENTORY",
        help="inventory file or directory (repeatable); default: ansible.cfg's (inventory/lab/hosts.yml)",
    )
    common.add_argument(
        "--check", action="store_true", help="check mode: report what would change, change nothing"
    )
    common.add_argument(
        "-e",
        "--extra-vars",
        action="append",
        default=[],
        metavar="VARS",
        help="extra variables as with ansible-playbook: key=value, JSON/YAML, or @FILE (repeatable); "
        "secret-looking values are never shown or written in the clear",
    )
    common.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document on stdout instead of the summary table (progress stays on stderr)",
    )
    common.add_argument(
        "--artifacts",
        metavar="DIR",
        type=Path,
        help="write this run's artifacts into DIR (new or empty); default: "
        ".cache/sparkops/runs/<UTC time>-<command> in the checkout",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=Parser)
    for name, text in COMMANDS.items():
        child = sub.add_parser(
            name,
            parents=[common],
            help=text,
            description=text,
            epilog=EXIT_CODES,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        if name == "diagnose":
            child.add_argument(
                "files",
                nargs="*",
                metavar="FILE",
                help="log files to diagnose locally ('-' reads standard input)",
            )
            child.add_argument(
                "--context",
                metavar="FILE",
                help="with FILE arguments: JSON context for the diagnosis (hosts, memory_plan)",
            )
        if name == "watchdog":
            child.add_argument(
                "action",
                choices=WATCHDOG_ACTIONS,
                help="what to do (default: status)",
                nargs="?",
                default="status",
            )
            child.add_argument("--reason", metavar="TEXT", help="with pause: the reason status shows")
        if name == "upgrade":
            add_upgrade_options(child)
    add_logs_parser(sub)
    return parser


def add_upgrade_options(child: argparse.ArgumentParser) -> None:
    what = child.add_mutually_exclusive_group()
    what.add_argument(
        "--image",
        metavar="REF",
        help="the image to upgrade to ([REGISTRY/]REPOSITORY[:TAG][@DIGEST]); pulled on the head unless "
        "--archive gives it",
    )
    what.add_argument(
        "--vllm-version",
        metavar="V",
        help="the vLLM release to upgrade to (e.g. 0.17.1, 0.11.0rc1); the image is the inventory's "
        "upgrade_image_ref_template with V in it",
    )
    what.add_argument(
        "--confirm",
        action="store_true",
        help="keep the current deployment and remove the image kept for a rollback; takes no other "
        "upgrade option",
    )
    child.add_argument(
        "--archive",
        metavar="PATH",
        help="with --image: a `docker save` archive on this machine that holds REF, sent to the nodes "
        "instead of a pull",
    )
    child.add_argument(
        "--model-revision",
        metavar="REV",
        help="the model's Hugging Face revision to serve (a branch, a tag or a 40-hex commit); with "
        "--image or --vllm-version, or alone",
    )


LOGS_HELP = (
    "stream the deployment's journald logs (serve, Ray, watchdog) from the nodes over ssh, "
    "each line prefixed with its node, secrets redacted"
)
LOGS_EXIT_CODES = f"""exit codes:
  {EXIT_OK}    ok: every node's journal was read (--follow: until a signal ended it)
  {EXIT_FAILED}    failed: journalctl failed on a node, or none of the units exists there
  {EXIT_UNREACHABLE}    unreachable: ssh could not reach a node; this wins over failed
  {EXIT_USAGE}    usage error: bad arguments, a node not in the inventory, no checkout
  {EXIT_INTERRUPTED}  interrupted (a signal) without --follow
"""


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return value


def add_logs_parser(sub: argparse._SubParsersAction) -> None:
    from sparkops_cli.logs import UNIT_CHOICES  # noqa: PLC0415

    logs = sub.add_parser(
        "logs",
        help=LOGS_HELP,
        description=LOGS_HELP + ". The connection is the inventory's, as Ansible would use it.",
        epilog=LOGS_EXIT_CODES + "\nDetails: docs/cli.md",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    logs.add_argument(
        "-i",
        "--inventory",
        action="append",
        default=[],
        metavar="INVENTORY",
        help="inventory file or directory (repeatable); default: ansible.cfg's (inventory/lab/hosts.yml)",
    )
    logs.add_argument(
        "-f", "--follow", action="store_true", help="keep streaming new lines until Ctrl-C or SIGTERM"
    )
    logs.add_argument(
        "--node",
        action="append",
        default=[],
        metavar="NAME",
        help="only this inventory host (repeatable); default: every host of the cluster group",
    )
    logs.add_argument(
        "--unit",
        action="append",
        default=[],
        choices=UNIT_CHOICES,
        help="only this unit (repeatable): serve (the head's vLLM), ray (head or worker), watchdog; "
        "default: all three",
    )
    logs.add_argument(
        "--since",
        metavar="TIME",
        help="as journalctl --since: '1h ago', '-30min', 'today', '2026-12-01 18:00:00'",
    )
    logs.add_argument(
        "-n",
        "--lines",
        type=positive_int,
        metavar="N",
        help="the last N lines per node (default: 100 without --since; with --since, all since then)",
    )


DEFAULT_LOG_LINES = 100


def logs_command(args: argparse.Namespace, parser: Parser) -> int:
    from sparkops_cli import logs  # noqa: PLC0415

    cwd = Path.cwd()
    try:
        project = find_project(cwd)
        logs.check_since(args.since)
        inventory = [(cwd / path).resolve() for path in args.inventory]
        for path in inventory:
            if not path.exists():
                raise logs.LogsUsageError(f"-i {path}: no such inventory")
        nodes = logs.resolve_nodes(
            project, inventory, list(dict.fromkeys(args.node)), list(dict.fromkeys(args.unit))
        )
        redact = logs.load_redact(project)
    except (ProjectNotFound, logs.LogsUsageError) as exc:
        parser.error(str(exc))
    lines = args.lines if args.lines is not None or args.since else DEFAULT_LOG_LINES
    return logs.stream_logs(nodes, redact, since=args.since, lines=lines, follow=args.follow)


def watchdog_extra_vars(args: argparse.Namespace, parser: Parser) -> list[str]:
    """The -e values of ``sparkops watchdog ACTION [--reason TEXT]`` for playbooks/watchdog_control.yml."""
    if args.reason is not None and args.action != "pause":
        parser.error("--reason applies to `sparkops watchdog pause` only")
    values = {"watchdog_command": args.action}
    if args.reason is not None:
        values["watchdog_pause_reason"] = args.reason
    return [json.dumps(values)]


def upgrade_extra_vars(
    args: argparse.Namespace, parser: Parser, rules: ModuleType, cwd: Path | None = None
) -> list[str]:
    """The -e values of ``sparkops upgrade`` for playbooks/upgrade.yml.

    ``rules``: the collection's plugins/module_utils/_upgrade.py (``upgrade_module``),
    whose image-reference, version and revision rules the options must meet.
    ``--archive`` is made absolute against ``cwd`` (the playbooks run from the root).
    """
    if args.confirm:
        others = [
            option
            for option, value in (("--archive", args.archive), ("--model-revision", args.model_revision))
            if value is not None
        ]
        if others:
            parser.error(
                f"--confirm takes no other upgrade option (given: {', '.join(others)}): it keeps the "
                "current deployment and removes the one kept for a rollback"
            )
        return [json.dumps({"upgrade_command": "confirm"})]
    if args.image is None and args.vllm_version is None and args.model_revision is None:
        parser.error(
            "sparkops upgrade needs --image REF or --vllm-version V (and/or --model-revision REV), "
            "or --confirm to keep a passed upgrade"
        )
    values = {"upgrade_command": "upgrade"}
    if args.image is not None:
        if not rules.valid_image_reference(args.image):
            parser.error(
                f"--image {args.image!r} is not a Docker image reference ({rules.IMAGE_REFERENCE_FORM}); "
                "e.g. --image example/vllm-spark:0.17.1"
            )
        values["upgrade_image_ref"] = args.image
    if args.archive is not None:
        if args.image is None:
            parser.error("--archive goes with --image REF, the reference the archive's image is tagged with")
        values["upgrade_image_archive"] = str(_archive_path(args.archive, parser, cwd or Path.cwd()))
    if args.vllm_version is not None:
        if not rules.valid_vllm_version(args.vllm_version):
            parser.error(
                f"--vllm-version {args.vllm_version!r} is not a vLLM release version "
                f"({rules.VLLM_VERSION_FORM}); e.g. --vllm-version 0.17.1"
            )
        values["upgrade_vllm_version"] = args.vllm_version
    if args.model_revision is not None:
        if not rules.valid_model_revision(args.model_revision):
            parser.error(
                f"--model-revision {args.model_revision!r} is not a Hugging Face revision "
                f"({rules.MODEL_REVISION_FORM}; no whitespace, control characters, leading '-' or '..')"
            )
        values["upgrade_model_revision"] = args.model_revision
    return [json.dumps(values)]


def _archive_path(given: str, parser: Parser, cwd: Path) -> Path:
    path = (cwd / given).resolve()
    try:
        if path.is_file():
            return path
        problem = "is not a regular file" if path.exists() else "does not exist"
    except OSError as exc:
        problem = f"cannot be read ({exc.strerror})"
    parser.error(f"--archive {given}: {path} {problem}; give the `docker save` archive of the --image")


def upgrade_argv(args: argparse.Namespace) -> list[str]:
    """``sparkops upgrade``'s own options as given, for the displayed command."""
    argv = []
    for option, value in (
        ("--image", args.image),
        ("--vllm-version", args.vllm_version),
        ("--archive", args.archive),
        ("--model-revision", args.model_revision),
    ):
        if value is not None:
            argv += [option, value]
    if args.confirm:
        argv.append("--confirm")
    return argv


def redacted_argv(args: argparse.Namespace, extra_display: list[str]) -> list[str]:
    argv = ["sparkops", args.command]
    if args.command == "watchdog":
        argv.append(args.action)
    if args.command == "upgrade":
        argv += upgrade_argv(args)
    for path in args.inventory:
        argv += ["-i", path]
    if args.check:
        argv.append("--check")
    for shown in extra_display:
        argv += ["-e", shown]
    if args.json:
        argv.append("--json")
    if args.artifacts:
        argv += ["--artifacts", str(args.artifacts)]
    return argv


def diagnose_files(args: argparse.Namespace, parser: Parser) -> int:
    from sparkops_cli.report import diagnose_document  # noqa: PLC0415

    if args.inventory or args.check or args.extra_vars or args.artifacts:
        parser.error("diagnose FILE... runs locally: -i, --check, -e and --artifacts do not apply")
    try:
        project = find_project()
    except ProjectNotFound as exc:
        parser.error(str(exc))
    diagnose = diagnose_module(project)
    context = None
    if args.context:
        try:
            context = json.loads(Path(args.context).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            parser.error(f"--context {args.context}: {exc}")
    missing = [name for name in args.files if name != "-" and not Path(name).exists()]
    if missing:
        parser.error(f"no such log file: {', '.join(missing)}")
    if args.files == ["-"]:
        result = diagnose.diagnose_stream(sys.stdin.buffer, context)
    else:
        try:
            result = diagnose.diagnose_paths(args.files, context)
        except OSError as exc:
            # A FIFO, a device or a directory: refused before anything is read.
            parser.error(f"cannot read {exc.filename}: {exc.strerror}")
    doc = diagnose_document(result, list(args.files))
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(diagnose.format_report(result))
        root = result.get("root_cause")
        print(f"\nroot cause: {root}" if root else "\nroot cause: none named")
    return int(doc["exit_code"])


# Options whose value may itself start with "-" (journalctl's relative times: --since -1d).
# argparse takes "-1d" for an option and refuses `--since -1d`; the pair becomes --since=-1d.
_DASH_VALUE_OPTIONS = ("--since",)


def _join_dash_values(argv: Sequence[str]) -> list[str]:
    out: list[str] = []
    items = list(argv)
    index = 0
    while index < len(items):
        item = items[index]
        if item in _DASH_VALUE_OPTIONS and index + 1 < len(items) and items[index + 1].startswith("-"):
            out.append(f"{item}={items[index + 1]}")
            index += 2
            continue
        out.append(item)
        index += 1
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(_join_dash_values(sys.argv[1:] if argv is None else argv))
    if args.command == "logs":
        return logs_command(args, parser)
    if args.command == "diagnose" and args.files:
        return diagnose_files(args, parser)
    if getattr(args, "context", None):
        parser.error("--context applies to diagnose FILE... only")
    if args.command == "watchdog":
        # After the user's -e: the action given as a word wins.
        args.extra_vars = [*args.extra_vars, *watchdog_extra_vars(args, parser)]

    from sparkops_cli.run import PlaybookRun, default_run_dir, prepare_run_dir  # noqa: PLC0415

    cwd = Path.cwd()
    own: list[str] = []
    try:
        project = find_project(cwd)
        if args.command == "upgrade":
            # After the user's -e: the options win. They are shown as options, not as their -e.
            own = upgrade_extra_vars(args, parser, upgrade_module(project), cwd)
        extra = parse_extra_vars([*args.extra_vars, *own], cwd)
    except (ProjectNotFound, ExtraVarsError) as exc:
        parser.error(str(exc))
    playbook = PLAYBOOKS[args.command]
    if not (project / playbook).is_file():
        parser.error(f"{project / playbook} does not exist in this checkout")
    inventory = [(cwd / path).resolve() for path in args.inventory]
    for path in inventory:
        if not path.exists():
            parser.error(f"-i {path}: no such inventory")
    try:
        run_dir = prepare_run_dir(
            args.artifacts.resolve() if args.artifacts else default_run_dir(project, args.command)
        )
    except (FileExistsError, OSError) as exc:
        parser.error(f"--artifacts: {exc}")
    run = PlaybookRun(
        command=args.command,
        project=project,
        playbook=playbook,
        run_dir=run_dir,
        display_argv=redacted_argv(args, [item.display for item in extra[: len(args.extra_vars)]]),
        inventory=inventory,
        check=args.check,
        extra=extra,
    )
    doc = run.execute()
    if args.json:
        print(json.dumps(doc, indent=2, default=str))
    else:
        print((run_dir / "summary.txt").read_text(encoding="utf-8"), end="")
    return int(doc["exit_code"])
