# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Parallel rsync streams from the head to one worker, split by file, with progress.

Each stream is one rsync process with its own ``--files-from`` list; the
lists hold nearly equal bytes (largest file first, to the lightest stream).
Links are dereferenced on the sender (``-L``: the Hugging Face cache holds
links into ``blobs/``) and interrupted files are kept in ``--partial-dir`` on
the worker, so a rerun resumes them instead of starting over. No ``-W``: with
no basis file rsync sends the file as literal data anyway (the same bytes and
the same whole-file checksum as ``-W``), and with a partial file as the basis
``-W`` would throw the partial away.
"""

import json
import os
import re
import shlex
import subprocess
import tempfile
import threading
import time

from ansible_collections.sparkops.vllm.plugins.module_utils._model_manifest import split_streams

# `--info=progress2` prints, separated by carriage returns, lines such as
# "    268,435,456  50%  210.53MB/s    0:00:01 (xfr#1, to-chk=3/8)".
_PROGRESS = re.compile(r"^\s*([\d,]+)\s+\d+%")


class CopyError(Exception):
    """A failed copy, with what to do about it."""


def progress_bytes(line):
    """Bytes transferred so far in an rsync --info=progress2 line, or None."""
    match = _PROGRESS.match(line)
    return int(match.group(1).replace(",", "")) if match else None


def ssh_command(key, known_hosts, cipher, port):
    """The `-e` argument: the cluster key, host keys checked, a fast cipher, no compression."""
    argv = [
        "ssh",
        "-i",
        key,
        "-o",
        f"UserKnownHostsFile={known_hosts}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "Compression=no",
        "-c",
        cipher,
        "-p",
        str(port),
        "-T",
        "-x",
    ]
    return " ".join(shlex.quote(a) for a in argv)


def rsync_argv(rsync, src, dest_url, files_from, *, partial_dir, io_timeout, bwlimit_kib=0, ssh=None):
    """argv of one stream."""
    argv = [
        rsync,
        "-aL",
        f"--partial-dir={partial_dir}",
        # The listed files are known to differ from the head's manifest; one
        # damaged with its size and mtime kept would pass rsync's quick check.
        "--ignore-times",
        f"--files-from={files_from}",
        f"--timeout={io_timeout}",
        "--info=progress2",
        "--no-inc-recursive",
    ]
    if bwlimit_kib:
        argv.append(f"--bwlimit={bwlimit_kib}")
    if ssh:
        argv += ["-e", ssh]
    return [*argv, src.rstrip("/") + "/", dest_url]


def dest_url(transport, host, dest, *, user=None, port=None, module=None):
    if transport == "rsyncd":
        return f"rsync://{user}@{host}:{port}/{module}/"
    return f"root@{host}:{dest.rstrip('/')}/"


class _Stream:
    def __init__(self, argv, env, files, total):
        self.argv = argv
        self.files = files
        self.total = total
        self.done = 0
        self.tail = []
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.readers = [
            threading.Thread(target=self._read_progress, daemon=True),
            threading.Thread(target=self._read_errors, daemon=True),
        ]
        for reader in self.readers:
            reader.start()

    def _read_progress(self):
        pending = b""
        while True:
            chunk = self.proc.stdout.read1(65536)
            if not chunk:
                break
            pending += chunk
            parts = re.split(rb"[\r\n]", pending)
            pending = parts.pop()
            for part in parts:
                value = progress_bytes(part.decode("utf-8", "replace"))
                if value is not None:
                    self.done = max(self.done, value)

    def _read_errors(self):
        for raw in self.proc.stderr:
            self.tail = [*self.tail, raw.decode("utf-8", "replace").rstrip()][-20:]

    def wait(self):
        rc = self.proc.wait()
        for reader in self.readers:
            reader.join()
        return rc


def _human(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
    return f"{n} B"


def copy(
    src,
    dest,
    host,
    files,
    sizes,
    *,
    transport,
    streams,
    partial_dir=".sparkops-partial",
    io_timeout=120,
    bwlimit_kib=0,
    rsync="rsync",
    ssh=None,
    rsyncd=None,
    progress_path=None,
    label=None,
    interval=2.0,
):
    """Copy files (relative to src) to host:dest in parallel streams; the result as a dict.

    ``ssh`` is ``{key, known_hosts, cipher, port}``; ``rsyncd`` is
    ``{user, password, port, module}``. Progress lines go to progress_path.
    """
    label = label or host
    env = dict(os.environ, LC_ALL="C")
    if transport == "rsyncd":
        url = dest_url(
            transport, host, dest, user=rsyncd["user"], port=rsyncd["port"], module=rsyncd["module"]
        )
        # The password travels in the environment, never on disk or in argv.
        env["RSYNC_PASSWORD"] = rsyncd["password"]
        ssh_e = None
    else:
        url = dest_url(transport, host, dest)
        ssh_e = ssh_command(ssh["key"], ssh["known_hosts"], ssh["cipher"], ssh["port"])
    total = sum(sizes[rel] for rel in files)
    groups = split_streams(files, sizes, streams)
    tmpdir = tempfile.mkdtemp(prefix="sparkops-model-sync.")
    running = []
    log = open(progress_path, "a", encoding="utf-8") if progress_path else None  # noqa: SIM115
    started = time.monotonic()
    try:
        for index, group in enumerate(groups):
            files_from = os.path.join(tmpdir, f"stream-{index}.list")
            with open(files_from, "w", encoding="utf-8") as handle:
                handle.write("".join(rel + "\n" for rel in group))
            argv = rsync_argv(
                rsync,
                src,
                url,
                files_from,
                partial_dir=partial_dir,
                io_timeout=io_timeout,
                bwlimit_kib=bwlimit_kib,
                ssh=ssh_e,
            )
            running.append(_Stream(argv, env, group, sum(sizes[rel] for rel in group)))

        def report(final=False):
            done = sum(min(s.done, s.total) for s in running)
            elapsed = max(time.monotonic() - started, 1e-6)
            live = sum(1 for s in running if s.proc.poll() is None)
            line = {
                "host": label,
                "bytes_done": done,
                "bytes_total": total,
                "percent": round(100.0 * done / total, 1) if total else 100.0,
                "elapsed_s": round(elapsed, 1),
                "rate_bytes_per_s": int(done / elapsed),
                "streams_running": live,
                "final": final,
            }
            if log:
                log.write(
                    f"{time.strftime('%H:%M:%S')} {label}: {_human(done)} of {_human(total)} "
                    f"({line['percent']}%), {line['rate_bytes_per_s'] / 1e6:.0f} MB/s, "
                    f"{live} of {len(running)} streams running " + json.dumps(line) + "\n"
                )
                log.flush()

        while any(s.proc.poll() is None for s in running):
            report()
            deadline = time.monotonic() + interval
            while time.monotonic() < deadline and any(s.proc.poll() is None for s in running):
                time.sleep(0.1)
        codes = [s.wait() for s in running]
        elapsed = time.monotonic() - started
        report(final=True)
    finally:
        for stream in running:
            if stream.proc.poll() is None:
                stream.proc.kill()
                stream.wait()
        for name in os.listdir(tmpdir):
            os.unlink(os.path.join(tmpdir, name))
        os.rmdir(tmpdir)
        if log:
            log.close()
    result = {
        "host": label,
        "transport": transport,
        "files": sorted(files),
        "bytes": total,
        "seconds": round(elapsed, 3),
        "rate_bytes_per_s": int(total / elapsed) if elapsed > 0 else 0,
        "streams": [
            {
                "files": s.files,
                "bytes": s.total,
                "rc": rc,
                "argv": s.argv,
                "stderr": s.tail,
            }
            for s, rc in zip(running, codes, strict=True)
        ],
    }
    failed = [s for s in result["streams"] if s["rc"] != 0]
    if failed:
        first = failed[0]
        errors = " | ".join(first["stderr"][-3:]) or "no error output"
        how = f"killed by signal {-first['rc']}" if first["rc"] < 0 else f"exit code {first['rc']}"
        raise CopyError(
            f"{len(failed)} of {len(groups)} rsync stream(s) to {label} ({host}) failed; "
            f"the first ({how}) was copying {', '.join(first['files'])}: {errors}. "
            f"Partial files stay in {partial_dir}/ on the worker, so a rerun resumes them. "
            "See docs/runbooks/slow-or-broken-model-copy.md.",
            result,
        )
    return result
