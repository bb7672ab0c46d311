# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""What diagnose.yml collects on a node, the redaction of secrets, and the support bundle on the controller.

On a node (``support_logs_info``): the journals of the serve and Ray units, the logs of the project's
containers, the files under the Ray session's log directory (each cut to its tail) and the kernel log's
lines about NVRM or OOM. A source that cannot be read (``dmesg`` refused in a container, a unit that never
ran) becomes a note, never a failure.

On the controller (``support_bundle``): every file is redacted before it touches the disk (the inventory's
secret values, and the patterns ``--api-key X``, ``*_TOKEN=...``, ``Authorization: Bearer ...``), staged
in a private directory (0700, files 0600) for ``sparkops.vllm.diagnose``, then packed with the report into
one ``.tar.gz`` (0600) in a 0700 directory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
import time

try:
    from ansible_collections.sparkops.vllm.plugins.module_utils import _redact, _safe_read
except ImportError:  # the watchdog's program imports it as a plain file (the layout's watchdog_bundle)
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _redact  # type: ignore[no-redef]
    import _safe_read  # type: ignore[no-redef]

# One redaction for the bundle and the CLI (module_utils/_redact.py).
REDACTED = _redact.REDACTED
MIN_SECRET_LENGTH = _redact.MIN_SECRET_LENGTH
redact = _redact.redact


# -- on the node ---------------------------------------------------------------


def _run(argv, timeout=120):
    """Run argv with LC_ALL=C; (rc, stdout, stderr), rc 127 when the command is missing."""
    env = dict(os.environ, LC_ALL="C")
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout, env=env, check=False)
    except FileNotFoundError as exc:
        return 127, "", str(exc)
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]} did not answer within {timeout} s"
    return (
        done.returncode,
        done.stdout.decode("utf-8", "replace"),
        done.stderr.decode("utf-8", "replace"),
    )


def _tail_bytes(data, max_bytes):
    """The last max_bytes of data, cut at a line start; (text, truncated)."""
    if len(data) <= max_bytes:
        return data.decode("utf-8", "replace"), False
    tail = data[-max_bytes:]
    newline = tail.find(b"\n")
    if 0 <= newline < len(tail) - 1:
        tail = tail[newline + 1 :]
    return tail.decode("utf-8", "replace"), True


def safe_name(text):
    """A file name part from a unit, container or path name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "unnamed"


def since_epoch(since, now=None):
    """The epoch seconds of a ``since`` value given as ``@EPOCH`` or ``-N[smhd]``; None for other forms."""
    if not since:
        return None
    match = re.fullmatch(r"@(\d+(?:\.\d+)?)", since.strip())
    if match:
        return float(match.group(1))
    match = re.fullmatch(r"-(\d+)\s*([smhd])", since.strip())
    if match:
        seconds = int(match.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]
        return (time.time() if now is None else now) - seconds
    return None


# ``since`` for "from each unit's last start": the default of cluster diagnose, so
# a report is not muddled by the failures of starts that are over (issue 17).
LAST_START = "last-start"


def parse_unit_start(text):
    """The epoch of ``systemctl show -p InactiveExitTimestamp --timestamp=unix --value``; None if never started.

    InactiveExitTimestamp is when the unit last left "inactive": a unit in an
    auto-restart loop stays out of inactive between its tries, so the time is the
    start of the loop and its first failure is kept.
    """
    match = re.fullmatch(r"@(\d+(?:\.\d+)?)", (text or "").strip())
    return float(match.group(1)) if match else None


def unit_started_epoch(unit):
    """When the unit last started (epoch seconds), or None when systemd has no such time."""
    rc, out, _ = _run(
        ["systemctl", "show", "-p", "InactiveExitTimestamp", "--timestamp=unix", "--value", unit], timeout=30
    )
    return parse_unit_start(out) if rc == 0 else None


def resolve_since(units, since):
    """Each unit's journalctl --since value and the earliest of them (for logs that are not per unit).

    ``since`` is a journalctl time, empty (the last lines), or LAST_START: then each unit
    reads from its own last start (``@EPOCH``), and a unit that never started reads its
    last lines.
    """
    if since != LAST_START:
        return dict.fromkeys(units, since or None), since or None
    starts = {unit: unit_started_epoch(unit) for unit in units}
    per_unit = {unit: (f"@{int(epoch)}" if epoch is not None else None) for unit, epoch in starts.items()}
    known = [epoch for epoch in starts.values() if epoch is not None]
    return per_unit, (f"@{int(min(known))}" if known else None)


def collect_journals(units, lines, since=None):
    """One file per unit: its journal (last ``lines`` lines); a unit with no journal becomes a note.

    ``since``: one journalctl time for every unit, or a dict of each unit's own.
    """
    files, notes = [], []
    per_unit = since if isinstance(since, dict) else dict.fromkeys(units, since)
    for unit in units:
        since = per_unit.get(unit)
        argv = ["journalctl", "--no-pager", "--output=short-iso", "-n", str(lines), "-u", unit]
        if since:
            argv.append(f"--since={since}")
        rc, out, err = _run(argv)
        if rc != 0:
            notes.append({"source": " ".join(argv), "note": f"journalctl failed (rc {rc}): {err.strip()}"})
            continue
        if not out.strip() or out.strip() == "-- No entries --":
            notes.append(
                {
                    "source": f"journalctl -u {unit}",
                    "note": f"no journal entries since {since}"
                    if since
                    else "no journal entries (the unit never ran here)",
                }
            )
            continue
        files.append(
            _entry(f"journal/{safe_name(unit)}.log", f"journalctl -u {unit}", out, out.count("\n") >= lines)
        )
    return files, notes


def unit_states(units):
    """``systemctl show`` of each unit: {unit, load_state, active_state, sub_state, result, restarts}."""
    states = []
    for unit in units:
        rc, out, err = _run(
            ["systemctl", "show", "-p", "LoadState,ActiveState,SubState,Result,NRestarts", unit]
        )
        values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line) if rc == 0 else {}
        states.append(
            {
                "unit": unit,
                "load_state": values.get("LoadState"),
                "active_state": values.get("ActiveState") or f"unknown ({err.strip()})",
                "sub_state": values.get("SubState"),
                "result": values.get("Result"),
                "restarts": int(values["NRestarts"]) if values.get("NRestarts", "").isdigit() else None,
            }
        )
    return states


def _entry(name, source, content, truncated):
    """One collected file: its name in the bundle, where it came from, its text, whether it was cut."""
    return {"name": name, "source": source, "content": content, "truncated": truncated}


def _read_tail(path, max_bytes):
    """(data, size): the file's bytes, or its last max_bytes when it is larger (a log's end holds the failure).

    Only a regular file is read: a FIFO or a device raises NotRegularFile (an OSError), never waits.
    """
    with _safe_read.open_regular(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > max_bytes:
            handle.seek(size - max_bytes)
        return handle.read(max_bytes), size


def collect_files(paths, max_bytes):
    """Each file whole (or its last max_bytes) as ``config/<path>``; a missing one becomes a note."""
    files, notes = [], []
    for path in paths:
        try:
            data, size = _read_tail(path, max_bytes)
        except OSError as exc:
            notes.append({"source": path, "note": f"cannot be read: {exc.strerror}"})
            continue
        text, truncated = _tail_bytes(data, max_bytes)
        files.append(_entry("config/" + path.lstrip("/"), path, text, truncated or size > max_bytes))
    return files, notes


def collect_containers(label, lines, docker="docker", since=None):
    """One file per container carrying label (running or not): ``docker logs --timestamps --tail lines``.

    since (epoch seconds) keeps only what the containers logged from then on.
    """
    files, notes = [], []
    rc, out, err = _run([docker, "ps", "--all", "--filter", f"label={label}", "--format", "{{.Names}}"])
    if rc != 0:
        return files, [
            {"source": f"docker ps --filter label={label}", "note": f"docker failed (rc {rc}): {err.strip()}"}
        ]
    names = [name for name in out.split() if name]
    if not names:
        notes.append(
            {"source": f"docker ps --filter label={label}", "note": "no container of this cluster exists"}
        )
    for name in names:
        argv = [docker, "logs", "--timestamps", "--tail", str(lines)]
        if since is not None:
            argv += ["--since", str(int(since))]
        rc, log_out, log_err = _run([*argv, name])
        if rc != 0:
            notes.append(
                {"source": f"docker logs {name}", "note": f"docker logs failed (rc {rc}): {log_err.strip()}"}
            )
            continue
        # docker logs gives the container's stdout and stderr on its own two streams.
        content = log_out + (
            ("\n" if log_out and not log_out.endswith("\n") else "") + log_err if log_err else ""
        )
        files.append(
            _entry(
                f"containers/{safe_name(name)}.log",
                f"docker logs {name}",
                content,
                content.count("\n") >= lines,
            )
        )
    return files, notes


def host_path(path, mounts=None):
    """path with links into a container's mount resolved on the host.

    Ray's ``session_latest`` is a link written inside the container (``/tmp/ray/session_...``); on the host
    the same directory is the mount's source. ``mounts`` maps a container path to its host path.
    """
    resolved = "/"
    for part in [p for p in os.path.normpath(path).split("/") if p]:
        candidate = os.path.join(resolved, part)
        if os.path.islink(candidate):
            target = os.readlink(candidate)
            if not os.path.isabs(target):
                target = os.path.normpath(os.path.join(resolved, target))
            for mount, outside in (mounts or {}).items():
                inside_path = mount.rstrip("/")
                if target == inside_path or target.startswith(inside_path + "/"):
                    target = outside.rstrip("/") + target[len(inside_path) :]
                    break
            candidate = host_path(target, mounts)
        resolved = candidate
    return resolved


def collect_dir(path, max_bytes, max_files, mounts=None, since=None):
    """Every regular file under path (sorted, at most max_files), each cut to its last max_bytes.

    since (epoch seconds) leaves out files last written before it.
    """
    files, notes = [], []
    real = os.path.realpath(host_path(path, mounts))
    if not os.path.isdir(real):
        return files, [
            {"source": path, "note": "no such directory (Ray has not run here, or runs elsewhere)"}
        ]
    found = []
    for root, _dirs, names in os.walk(real):
        for name in names:
            full = os.path.join(root, name)
            recent = since is None or os.path.getmtime(full) >= since
            if os.path.isfile(full) and not os.path.islink(full) and recent:
                found.append(full)
    found.sort()
    if len(found) > max_files:
        notes.append(
            {"source": path, "note": f"{len(found)} files; the first {max_files} by name were taken"}
        )
        found = found[:max_files]
    for full in found:
        try:
            data, size = _read_tail(full, max_bytes)
        except OSError as exc:
            notes.append({"source": full, "note": f"cannot be read: {exc}"})
            continue
        if b"\0" in data[:4096]:
            continue
        text, truncated = _tail_bytes(data, max_bytes)
        relative = os.path.relpath(full, real)
        files.append(
            _entry(f"ray/{relative}", os.path.join(path, relative), text, truncated or size > max_bytes)
        )
    return files, notes


def collect_kernel(pattern, lines):
    """The kernel log's lines matching pattern (dmesg, else the journal's kernel messages); refusals are notes."""
    regex = re.compile(pattern)
    attempts = (["dmesg", "--ctime"], ["journalctl", "--dmesg", "--no-pager", "--output=short-iso"])
    refusals = []
    for argv in attempts:
        rc, out, err = _run(argv)
        if rc == 0:
            matched = [line for line in out.splitlines() if regex.search(line)][-lines:]
            note = [] if matched else [{"source": " ".join(argv), "note": f"no line matches {pattern}"}]
            file = _entry(
                "kernel/dmesg-nvrm-oom.log",
                f"{' '.join(argv)} | grep -E '{pattern}'",
                "\n".join(matched) + ("\n" if matched else ""),
                False,
            )
            return [file], [{"source": " ".join(a), "note": r} for a, r in refusals] + note
        refusals.append((argv, f"refused (rc {rc}): {err.strip() or out.strip()}"))
    return [], [{"source": " ".join(argv), "note": why} for argv, why in refusals]


# -- on the controller -------------------------------------------------------


def stage(collected, staging, secrets=()):
    """Write every host's files, redacted, under staging/<host>/; (paths, path_hosts)."""
    private_dir(staging)
    paths, path_hosts = [], {}
    for host in sorted(collected):
        for item in (collected[host] or {}).get("files") or []:
            target = inside(os.path.join(staging, safe_name(host)), str(item["name"]))
            write_private(target, redact(str(item.get("content") or ""), secrets))
            paths.append(target)
            path_hosts[target] = host
    return paths, path_hosts


def inside(directory, name):
    """directory/name, refusing a name that would leave directory."""
    relative = os.path.normpath(name).lstrip("/")
    if relative == ".." or relative.startswith("../"):
        raise ValueError(f"file name {name!r} leaves {directory}")
    return os.path.join(directory, relative)


def private_dir(path):
    """Create path and its missing parents with mode 0700; an existing directory is left as it is."""
    if os.path.isdir(path):
        return
    private_dir(os.path.dirname(os.path.abspath(path)))
    os.mkdir(path, 0o700)
    os.chmod(path, 0o700)


def write_private(path, text):
    """Write text to path, mode 0600, creating its directories 0700."""
    private_dir(os.path.dirname(path))
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(path, 0o600)


def pack(staging, bundle, extra_files, secrets=()):
    """Add extra_files ({name: text}, redacted) to staging, tar.gz it to bundle (0600), remove staging."""
    for name, text in sorted((extra_files or {}).items()):
        write_private(inside(staging, name), redact(str(text), secrets))
    private_dir(os.path.dirname(bundle))
    descriptor = os.open(bundle + ".part", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    arcroot = os.path.basename(bundle).removesuffix(".tar.gz")
    with os.fdopen(descriptor, "wb") as handle, tarfile.open(fileobj=handle, mode="w:gz") as tar:
        for root, dirs, names in os.walk(staging):
            dirs.sort()
            for name in sorted(names):
                full = os.path.join(root, name)
                info = tar.gettarinfo(full, arcname=os.path.join(arcroot, os.path.relpath(full, staging)))
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.mode = 0o600
                with open(full, "rb") as source:
                    tar.addfile(info, source)
    os.replace(bundle + ".part", bundle)
    os.chmod(bundle, 0o600)
    shutil.rmtree(staging)
    return bundle


def secrets_found(root, secrets):
    """Files under root (a directory) whose text holds one of secrets; for tests and the scenario."""
    found = []
    for directory, _dirs, names in os.walk(root):
        for name in names:
            with open(os.path.join(directory, name), encoding="utf-8", errors="replace") as handle:
                text = handle.read()
            if any(secret and secret in text for secret in secrets):
                found.append(os.path.join(directory, name))
    return found


# -- the report --------------------------------------------------------------


def gathered(hosts, collected, unreachable_msgs):
    """What the nodes gave: hosts reached, unit states and notes (an unreachable host is a note)."""
    units, notes, reached = [], [], []
    for host in hosts:
        item = collected.get(host)
        if item is None:
            why = unreachable_msgs.get(host) or "it left the run before anything was collected"
            notes.append({"host": host, "source": "ssh", "note": f"unreachable, nothing collected: {why}"})
            continue
        reached.append(host)
        for unit in item.get("units") or []:
            state = f"{unit.get('active_state')}/{unit.get('sub_state')}"
            if unit.get("restarts"):
                state += f", {unit['restarts']} restart(s)"
            units.append({"host": host, "unit": unit.get("unit"), "state": state})
        notes.extend(dict(note, host=host) for note in item.get("notes") or [])
    return {"reached": reached, "units": units, "notes": notes}


def findings_for_json(diagnosis, staging):
    """diagnose's findings with ``host`` and ``source`` (bundle-relative paths of the evidence's files)."""
    out = []
    for finding in diagnosis.get("findings") or []:
        evidence = []
        for item in finding.get("evidence") or []:
            path = item.get("path")
            evidence.append(dict(item, path=os.path.relpath(path, staging) if path else None))
        hosts = [item["host"] for item in evidence if item.get("host")]
        sources = [item["path"] for item in evidence if item.get("path")]
        out.append(
            {
                "id": finding.get("id"),
                "severity": finding.get("severity"),
                "summary": finding.get("summary"),
                "fix": finding.get("fix"),
                "host": ", ".join(dict.fromkeys(hosts)) or None,
                "source": ", ".join(dict.fromkeys(sources)) or None,
                "evidence": evidence,
            }
        )
    return out


def report_lines(findings, units, notes, lines_read, bundle=None):
    """The one report diagnose.yml prints: findings root cause first, each with host, evidence and fix."""
    out = []
    errors = [f for f in findings if f.get("severity") == "error"]
    if findings:
        out.append(
            f"Root cause: {findings[0]['id']} on {findings[0].get('host') or 'the cluster'}"
            if errors and findings[0] is errors[0]
            else f"{len(findings)} finding(s), none of them an error"
        )
    else:
        out.append(f"No known cause in {lines_read} log lines.")
    for number, finding in enumerate(findings, 1):
        out.append(
            f"{number}. [{str(finding.get('severity')).upper()}] {finding.get('id')} on {finding.get('host') or '?'}"
        )
        out.append(f"   {finding.get('summary')}")
        out.append(f"   Fix: {finding.get('fix')}")
        for item in finding.get("evidence") or []:
            where = (
                f"{item.get('path')}:{item.get('line')}" if item.get("path") else f"line {item.get('line')}"
            )
            out.append(f"     {where}: {str(item.get('text'))[:240]}")
    if units:
        out.append("Units: " + "; ".join(f"{u['host']} {u['unit']} {u['state']}" for u in units))
    for note in notes:
        out.append(f"Note: {note['host']}: {note['source']}: {note['note']}")
    if bundle:
        out.append(f"Support bundle (secrets redacted): {bundle}")
    return out


def bundle_name(prefix, now=None):
    """``<prefix>-YYYYmmddTHHMMSSZ.tar.gz`` in UTC."""
    return f"{safe_name(prefix)}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now))}.tar.gz"


def dumps(data):
    """JSON for the bundle's files: sorted keys, two-space indent, a final newline."""
    return json.dumps(data, indent=2, sort_keys=True) + "\n"
