#!/usr/bin/env python3
"""Where the guest's CPUs go during a `hipobj cp` download and during `ib_write_bw` on the same
path (the guest half of benches/engine-profile, one Soft-RoCE lane boot).

For N in STREAMS: `perf record -a -e cpu-clock` (TCG has no hardware counters) around
`hipobj cp --concurrency N` of a SIZE object from hipobj-server, and around `ib_write_bw -q N`
moving about as many bytes; then `perf report` by command, object and symbol. Both processes and
the emulated NIC share the guest's CPUs, so the two profiles side by side say what a download
does that perftest does not (the store's read into staging, the ring's writes into the file, the
HTTP exchange, the library's polling) and what that costs in CPU samples per byte moved.

  python benches/engine_profile.py   (env: HIPOBJ_BENCH_MB, default 256; HIPOBJ_BENCH_STREAMS "1,4";
      HIPOBJ_PROFILE_GRAPH="SYM ...": record call graphs and print who calls each SYM)
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine import BUCKET, CLI, MB, PERFTEST, SIZE, STREAMS, bench_server, run, \
    write_object  # noqa: E402

PERF = os.environ.get("HIPOBJ_PERF_BIN", "perf")
# Symbols whose callers to show (`perf record -g`), e.g. "crc32_body copy_user_generic_string".
GRAPH = os.environ.get("HIPOBJ_PROFILE_GRAPH", "").split()


def profiled(name: str, cmd: list, env: dict, work: Path) -> str:
    """`cmd` under a system-wide cpu-clock profile; its seconds and the report's top lines."""
    data = work / f"{name}.data"
    rec = subprocess.Popen([PERF, "record", "-a", "-e", "cpu-clock", "-F", "499", "-o", str(data)]
                           + (["-g"] if GRAPH else []),
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)  # perf's mmap set-up before the clock starts
    t = time.perf_counter()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t
    rec.send_signal(2)
    rec.wait()
    if out.returncode != 0:
        raise RuntimeError(f"{cmd[0]} exited {out.returncode}: {out.stdout[-600:]} {out.stderr[-600:]}")
    report = []
    for sort in ("comm,dso", "comm,dso,sym"):
        r = subprocess.run([PERF, "report", "-i", str(data), "--stdio", "--no-children", "--sort", sort,
                            "--percent-limit", "0.7"], capture_output=True, text=True)
        report += [l for l in r.stdout.splitlines() if l and not l.startswith("#")]
    for sym in GRAPH:  # who calls it, by command (the first lines of each chain)
        r = subprocess.run([PERF, "report", "-i", str(data), "--stdio", "--no-children", "--sort", "comm",
                            "--symbols", sym, "-g", "caller,2,callee,function,percent", "--percent-limit", "2"],
                           capture_output=True, text=True)
        lines = [l for l in r.stdout.splitlines() if l.strip() and not l.startswith("#")]
        report += [f"-- callers of {sym}"] + lines[:80]
    data.unlink(missing_ok=True)
    return f"== {name}: {seconds:.2f} s, stdout tail {out.stdout.strip()[-200:]!r}\n" + "\n".join(report)


def main() -> None:
    work, server, env, _ = bench_server("hipobj-profile-")
    try:
        server.client().create_bucket(Bucket=BUCKET)
        src = write_object(work / "src")
        run([CLI, "cp", "-q", str(src), f"s3://{BUCKET}/obj"], env)
        src.unlink()
        back = work / "back"
        for n in STREAMS:
            print(profiled(f"cp GET, {n} streams", [CLI, "cp", "-q", "--concurrency", str(n),
                                                    f"s3://{BUCKET}/obj", str(back)], env, work), flush=True)
            back.unlink()
            print(profiled(f"ib_write_bw -q {n}", [PERFTEST, "ib_write_bw", str(n), str(MB),
                                                   str(SIZE // MB)], env, work), flush=True)
    finally:
        server.stop()
        subprocess.run(["rm", "-rf", str(work)])


if __name__ == "__main__":
    main()
