#!/usr/bin/env python3
"""Where the fixed cost of one `hipobj cp` goes (the guest half of benches/cp-setup, one lane boot).

One hipobj-server on the lane's second device; on the first, `hipobj cp` of a 1 MiB object (one
part), timed whole (each build of HIPOBJ_CP_SETUP_BINS in turn, alternating); then, with the first
build, `--version` and `info` timed, and one copy's library events (HIPOBJ_LOG=debug) against the
time since its start; with HIPOBJ_CP_SETUP_STRACE=1 also the longest gaps between system calls
under `strace -f -tt`.

  python benches/cp_setup.py   (env: HIPOBJ_CP_SETUP_RUNS, default 3; HIPOBJ_CP_SETUP_BINS,
                                "LABEL=PATH,..."; default: this tree's release build)
"""

from __future__ import annotations

import datetime
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python" / "tests"))
from hipobj_server import IDENTITIES, Server, device_address, device_pair  # noqa: E402

CLI = os.environ.get("HIPOBJ_CLI_BIN", str(REPO / "target" / "release" / "hipobj"))
BINS = [b.split("=", 1) for b in (os.environ.get("HIPOBJ_CP_SETUP_BINS") or f"this tree={CLI}").split(",")]
RUNS = int(os.environ.get("HIPOBJ_CP_SETUP_RUNS", "3"))
BUCKET = "setup-bench"


def timed(cmd, env) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    return time.perf_counter() - t


def gaps(trace: Path, top: int = 15) -> None:
    """The longest stretches between one system call's end and the next one's start, any thread."""
    calls = []
    for line in trace.read_text().splitlines():
        m = re.match(r"(\d+)\s+(\d+):(\d+):(\d+\.\d+) (.*)", line)
        if m:
            pid, h, mi, s, rest = m.groups()
            calls.append((int(h) * 3600 + int(mi) * 60 + float(s), pid, rest[:150]))
    calls.sort()
    first, last = calls[0][0], calls[-1][0]
    print(f"strace: {len(calls)} events over {last - first:.3f} s")
    spans = sorted(((b[0] - a[0], a, b) for a, b in zip(calls, calls[1:])), reverse=True)[:top]
    for d, a, b in sorted(spans, key=lambda x: x[1][0]):
        print(f"  +{a[0] - first:7.3f} s  gap {d * 1000:8.1f} ms  after [{a[1]}] {a[2]}")
        print(f"  {'':9}  {'':14} before [{b[1]}] {b[2]}")


def timeline(cmd, env) -> None:
    """The command's library events (HIPOBJ_LOG=debug) against the time since it was started."""
    start = time.time()
    p = subprocess.run(cmd, env=dict(env, HIPOBJ_LOG="debug"), capture_output=True, text=True)
    end = time.time()
    print(f"timeline of {' '.join(cmd[1:2])} (exit {p.returncode}), seconds since the start:")
    for line in p.stderr.splitlines():
        line = re.sub(r"\x1b\[[0-9;]*m", "", line)
        m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z\s+(.*)", line)
        if m:
            t = datetime.datetime.fromisoformat(m.group(1)).replace(tzinfo=datetime.timezone.utc)
            print(f"  {t.timestamp() - start:7.3f}  {m.group(2)[:160]}")
    print(f"  {end - start:7.3f}  (exited)", flush=True)


def main() -> None:
    client_dev, server_dev = device_pair()
    server = Server(server_dev, device_address(server_dev))
    access, secret = IDENTITIES[0]
    env = dict(os.environ, AWS_ENDPOINT_URL=server.endpoint, AWS_ACCESS_KEY_ID=access,
               AWS_SECRET_ACCESS_KEY=secret, AWS_REGION="us-east-1", HIPOBJ_NIC=client_dev,
               AWS_SHARED_CREDENTIALS_FILE="/nonexistent", AWS_EC2_METADATA_DISABLED="true")
    work = Path(tempfile.mkdtemp(prefix="hipobj-setup-"))
    try:
        client = server.client()
        client.create_bucket(Bucket=BUCKET)
        client.put_object(Bucket=BUCKET, Key="small", Body=os.urandom(1 << 20))
        back = work / "back"
        args = ["cp", "-q", f"s3://{BUCKET}/small", str(back)]
        for run in range(RUNS):
            for label, exe in BINS:
                print(f"run {run}: hipobj cp (1 MiB GET), {label}: {timed([exe] + args, env):.3f} s", flush=True)
                back.unlink()
        exe = BINS[0][1]
        print(f"hipobj --version: {timed([exe, '--version'], env):.3f} s", flush=True)
        print(f"hipobj info: {timed([exe, 'info'], env):.3f} s", flush=True)
        timeline([exe] + args, env)
        back.unlink()
        if os.environ.get("HIPOBJ_CP_SETUP_STRACE"):  # strace slows each system call ~4x here
            trace = work / "cp.strace"
            print(f"under strace: {timed(['strace', '-f', '-tt', '-o', str(trace), exe] + args, env):.3f} s")
            gaps(trace)
    finally:
        server.stop()
        subprocess.run(["rm", "-rf", str(work)])


if __name__ == "__main__":
    main()
