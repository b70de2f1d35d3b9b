#!/usr/bin/env python3
"""`hipobj cp` of this tree against another build of it, alternating in one Soft-RoCE lane boot
(the guest half of benches/cp-against): for N in STREAMS, ROUNDS rounds of download then upload
of a SIZE object with each build in turn, the order swapped every round. Prints one JSON document:
every time, and per build and direction the median MB/s and the ratio this / other.

  python benches/cp_against.py OTHER_HIPOBJ   (env: HIPOBJ_BENCH_MB, default 512;
      HIPOBJ_BENCH_STREAMS, "1,4"; HIPOBJ_BENCH_ROUNDS, 3; HIPOBJ_BENCH_TMPFS as benches/engine.py;
      HIPOBJ_BENCH_OTHER_ARGS: options for the other's `cp` only, e.g. this build against itself
      with another --part-size; HIPOBJ_BENCH_OTHER_SERVER_ARGS: when set, the other copies to
      and from a second server started with these options (e.g. this build against itself, the
      second server with --copy-gets); HIPOBJ_BENCH_DIRECTIONS, "get,put")
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine import BUCKET, CLI, SIZE, STREAMS, TMPFS, bench_server, cpu_now, log, own_tmpfs, run, \
    timed, write_object  # noqa: E402
from hipobj_server import IDENTITIES  # noqa: E402
from bench_summary import cp_against_summary  # noqa: E402

ROUNDS = int(os.environ.get("HIPOBJ_BENCH_ROUNDS", "3"))
OTHER_ARGS = os.environ.get("HIPOBJ_BENCH_OTHER_ARGS", "").split()
DIRECTIONS = os.environ.get("HIPOBJ_BENCH_DIRECTIONS", "get,put").split(",")
OTHER_SERVER_ARGS = os.environ.get("HIPOBJ_BENCH_OTHER_SERVER_ARGS")


def server_stats(server) -> dict:
    """The server's counters of how GETs moved (GET /_hipobj/stats, signed as the first identity);
    `cpu_s` beside them: its CPU seconds over the rounds."""
    access, secret = IDENTITIES[0]
    # The keys reach curl on its standard input (-K -), never on its command line (ps).
    out = subprocess.run(["curl", "-K", "-", "-sf", "--aws-sigv4", "aws:amz:us-east-1:s3",
                          "-H", "x-amz-content-sha256:UNSIGNED-PAYLOAD", f"{server.endpoint}/_hipobj/stats"],
                         input=f'user = "{access}:{secret}"\n', capture_output=True, text=True, check=True).stdout
    every = json.loads(out)
    return {k: every[k] for k in ("rdma_gets", "file_registrations", "file_registrations_refused")}


def main() -> None:
    other = sys.argv[1]
    if TMPFS:
        own_tmpfs(TMPFS)
    work, server, env, _ = bench_server("hipobj-against-")
    servers = [server]
    envs = {"this": env, "other": env}
    if OTHER_SERVER_ARGS is not None:
        second_work, second, envs["other"], _ = bench_server("hipobj-against-2-", OTHER_SERVER_ARGS.split())
        servers.append(second)
        subprocess.run(["rm", "-rf", str(second_work)])
    builds = {"this": CLI, "other": other}
    times = {f"{b} {d} {n}": [] for b in builds for d in DIRECTIONS for n in STREAMS}
    try:
        src = write_object(work / "src")
        back = work / "back"
        for s in servers:
            s.client().create_bucket(Bucket=BUCKET)
        for e in {id(e): e for e in envs.values()}.values():
            run([CLI, "cp", "-q", str(src), f"s3://{BUCKET}/obj"], e)
        # Each server's CPU seconds over the rounds (with a second server, each serves one side).
        cpu_before = [cpu_now(s.proc.pid)["server"] for s in servers]
        for n in STREAMS:
            for r in range(ROUNDS):
                order = ["this", "other"] if r % 2 == 0 else ["other", "this"]
                for b in order:
                    cp = [builds[b], "cp", "-q", "--concurrency", str(n)] + (OTHER_ARGS if b == "other" else [])
                    if "get" in DIRECTIONS:
                        times[f"{b} get {n}"].append(timed(lambda: run(cp + [f"s3://{BUCKET}/obj", str(back)], envs[b])))
                        back.unlink()
                    if "put" in DIRECTIONS:
                        times[f"{b} put {n}"].append(timed(lambda: run(cp + [str(src), f"s3://{BUCKET}/obj"], envs[b])))
                log(json.dumps({k: v[-1] for k, v in times.items() if len(v) == r + 1}))
        counted = [dict(server_stats(s), cpu_s=round(cpu_now(s.proc.pid)["server"] - before, 2))
                   for s, before in zip(servers, cpu_before)]
    finally:
        for s in servers:
            s.stop()
        subprocess.run(["rm", "-rf", str(work)])
    mbps = {k: SIZE / statistics.median(v) / 1e6 for k, v in times.items()}
    summary = {f"{d} {n}": {"this_MBps": round(mbps[f"this {d} {n}"], 1),
                            "other_MBps": round(mbps[f"other {d} {n}"], 1),
                            "this_vs_other": round(mbps[f"this {d} {n}"] / mbps[f"other {d} {n}"], 3)}
               for d in DIRECTIONS for n in STREAMS}
    report = {"size_bytes": SIZE, "guest_kernel": os.uname().release, "rounds": ROUNDS, "other_args": OTHER_ARGS,
              "other_server_args": OTHER_SERVER_ARGS, "server_stats": counted, "times_s": times,
              "median": summary}
    for line in cp_against_summary(report):  # every copy, spread over the rounds (stderr)
        log(line)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
