#!/usr/bin/env python3
"""Issue 39's emulator-independent figure, the guest half of benches/cpu-per-gib (one Soft-RoCE
lane boot): per transfer path, the CPU time our own code spends per GiB moved.

ROUNDS rounds; in each, for every PATH (its order rotated round by round) a `hipobj cp` download
(GET, into a file in host memory) and upload (PUT, from one) of a SIZE object against
hipobj-server (fs backend, started as engine.bench_server starts it), each under
`perf record -a -g --kernel-callchains -e cpu-clock -F 499` (TCG has no hardware counters):

  rdma     --transport rdma --rdma-protocol v1
  rdma-v2  --transport rdma --rdma-protocol v2 (hipobj-rc-v2)
  http     --transport http (plain HTTP to the same server)

An RDMA copy that fails, or no RDMA device, stops the run with an error: nothing is skipped.
Per copy it prints the raw numbers the summary (bench_summary.cpu_summary) is computed from:

  transfer ROUND PATH OP BYTES SECONDS CLIENT_CPU_S SERVER_CPU_S | cp's closing line
      (CLIENT_CPU_S: the command's utime+stime from wait4; SERVER_CPU_S: the server's from
      /proc/PID/stat, before and after)
  prof ROUND PATH OP ROLE COMM TAGS NS SAMPLES
      (the profile's samples by role: client, server, idle (pid 0) or other; by thread name,
      digits as N; and by the tags of their kernel call chain, bench_summary.cpu_tags; NS: the
      samples' CPU nanoseconds)
  leaf ROUND PATH OP ROLE SYMBOL NS   (the ten busiest innermost functions outside idle: for
      reading the profile, not used by the summary)

and at the start and at the end this machine's rates (benches/digest_rates.rs: one thread's
memcpy, CRC32C and CRC64NVME) as `rates {JSON}`.

  python benches/cpu_per_gib.py   (env: HIPOBJ_DIGEST_BIN, the digest_rates executable (needed);
      HIPOBJ_BENCH_MB, default 512; HIPOBJ_BENCH_ROUNDS, default 3; HIPOBJ_CPU_PATHS, default
      "rdma,http,rdma-v2" ("http" alone needs no RDMA device: the server on loopback, RDMA off);
      HIPOBJ_CPU_SERVER_ARGS: more hipobj-server options, e.g. "--copy-gets")
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_summary  # noqa: E402
from engine import BUCKET, CLI, SIZE, bench_server, cpu_now, run, write_object  # noqa: E402
from engine_profile import PERF  # noqa: E402

ROUNDS = int(os.environ.get("HIPOBJ_BENCH_ROUNDS", "3"))
PATHS = os.environ.get("HIPOBJ_CPU_PATHS", "rdma,http,rdma-v2").split(",")
DIGEST_BIN = os.environ.get("HIPOBJ_DIGEST_BIN", "")
SERVER_ARGS = os.environ.get("HIPOBJ_CPU_SERVER_ARGS", "").split()
PATH_ARGS = {
    "rdma": ["--transport", "rdma", "--rdma-protocol", "v1"],
    "rdma-v2": ["--transport", "rdma", "--rdma-protocol", "v2"],
    "http": ["--transport", "http"],
}
#: What cp's closing line says when the copy took the path.
PATH_SAYS = {"rdma": "RDMA via", "rdma-v2": "RDMA via", "http": "plain HTTP"}
TOP_LEAVES = 10


def say(line: str) -> None:
    print(line, flush=True)


def rates() -> None:
    """This machine's one-thread memcpy and checksum rates (64 MiB, best of 3)."""
    say("rates " + run([DIGEST_BIN, "64", "3"]).strip().splitlines()[-1])


def start_profile(data: Path) -> subprocess.Popen:
    rec = subprocess.Popen([PERF, "record", "-a", "-g", "--kernel-callchains", "-e", "cpu-clock",
                            "-F", "499", "-o", str(data)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)  # perf's mmap set-up before the clock starts
    return rec


def stop_profile(rec: subprocess.Popen) -> None:
    rec.send_signal(signal.SIGINT)
    _, err = rec.communicate()
    if rec.returncode not in (0, -signal.SIGINT):
        raise RuntimeError(f"perf record exited {rec.returncode}: {err[-600:]}")


def samples(data: Path):
    """(pid, comm, nanoseconds, kernel frames innermost first) of each sample in `data`."""
    p = subprocess.Popen([PERF, "script", "-i", str(data), "-F", "comm,pid,tid,period,ip,sym"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert p.stdout is not None
    yield from bench_summary.perf_script_samples(p.stdout)
    if p.wait() != 0:
        raise RuntimeError(f"perf script exited {p.returncode}")


def role_of(pid: int, client: int, server: int) -> str:
    return {client: "client", server: "server", 0: "idle"}.get(pid, "other")


def print_profile(tag: str, data: Path, client: int, server: int) -> None:
    """The `prof` and `leaf` lines of one copy's profile."""
    groups: dict = {}
    leaves: dict = {}
    for pid, comm, ns, frames in samples(data):
        role = role_of(pid, client, server)
        key = (role, re.sub(r"\d+", "N", comm).replace(" ", "_") or "-", bench_summary.cpu_tags(frames))
        g = groups.setdefault(key, [0, 0])
        g[0] += ns
        g[1] += 1
        if role != "idle":
            leaf = (role, frames[0] if frames else "(user)")
            leaves[leaf] = leaves.get(leaf, 0) + ns
    if not groups:
        raise RuntimeError(f"{tag}: the profile has no samples")
    for (role, comm, tags), (ns, n) in sorted(groups.items(), key=lambda kv: -kv[1][0]):
        say(f"prof {tag} {role} {comm} {tags} {ns} {n}")
    for (role, sym), ns in sorted(leaves.items(), key=lambda kv: -kv[1])[:TOP_LEAVES]:
        say(f"leaf {tag} {role} {sym} {ns}")


def timed_copy(cmd: list, env: dict, work: Path) -> tuple:
    """`cmd`'s seconds, CPU seconds (utime+stime, wait4), stdout and pid; an error if it failed."""
    out, err = work / "cp.out", work / "cp.err"
    with open(out, "w") as o, open(err, "w") as e:
        t = time.perf_counter()
        child = subprocess.Popen(cmd, env=env, stdout=o, stderr=e)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - t
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {child.returncode}: {out.read_text()[-600:]} "
                           f"{err.read_text()[-600:]}")
    return seconds, usage.ru_utime + usage.ru_stime, out.read_text().strip(), child.pid


def profiled_copy(rnd: int, path: str, op: str, src: Path, env: dict, server, work: Path) -> None:
    """One copy of the object over `path` (op: get or put) under the profile; its lines."""
    back = work / "back"
    objects = [f"s3://{BUCKET}/obj", str(back)] if op == "get" else [str(src), f"s3://{BUCKET}/obj"]
    cmd = [CLI, "cp", "-q", *PATH_ARGS[path], *objects]
    data = work / "perf.data"
    rec = start_profile(data)
    try:
        before = cpu_now(server.proc.pid)["server"]
        seconds, client_s, line, client_pid = timed_copy(cmd, env, work)
        server_s = cpu_now(server.proc.pid)["server"] - before
    finally:
        stop_profile(rec)
    if PATH_SAYS[path] not in line:
        raise RuntimeError(f"{path} {op}: cp did not say {PATH_SAYS[path]!r}: {line!r}")
    if op == "get":
        run(["cmp", str(src), str(back)])  # raises when the download differs
        back.unlink()
    tag = f"{rnd} {path} {op}"
    say(f"transfer {tag} {SIZE} {seconds:.3f} {client_s:.3f} {server_s:.3f} | {line}")
    print_profile(tag, data, client_pid, server.proc.pid)
    data.unlink()


def main() -> None:
    if not DIGEST_BIN:
        raise SystemExit("cpu_per_gib: HIPOBJ_DIGEST_BIN (the digest_rates executable) is not set")
    unknown = [p for p in PATHS if p not in PATH_ARGS]
    if unknown:
        raise SystemExit(f"cpu_per_gib: unknown paths {unknown} (known: {', '.join(PATH_ARGS)})")
    rdma = any(p != "http" for p in PATHS)
    say(f"cpu-per-gib: {SIZE} bytes, {ROUNDS} rounds of {', '.join(PATHS)}, GET and PUT; "
        f"kernel {os.uname().release}; {os.cpu_count()} CPUs")
    rates()
    work, server, env, _ = bench_server("hipobj-cpu-", SERVER_ARGS, rdma=rdma)
    try:
        server.client().create_bucket(Bucket=BUCKET)
        src = write_object(work / "src")
        run([CLI, "cp", "-q", *PATH_ARGS[PATHS[0]], str(src), f"s3://{BUCKET}/obj"], env)  # warm-up
        for rnd in range(1, ROUNDS + 1):
            shift = (rnd - 1) % len(PATHS)
            for path in PATHS[shift:] + PATHS[:shift]:
                for op in ("get", "put"):
                    profiled_copy(rnd, path, op, src, env, server, work)
    finally:
        server.stop()
        subprocess.run(["rm", "-rf", str(work)])
    rates()
    say(f"cpu-per-gib: done, {ROUNDS * len(PATHS) * 2} copies")


if __name__ == "__main__":
    main()
