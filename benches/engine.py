#!/usr/bin/env python3
"""Issue 21's transfer benchmark, the guest half of benches/engine (one Soft-RoCE lane boot).

One hipobj-server with RDMA on the lane's second device; on the first, for N in STREAMS (1, 4, 8):
  - `hipobj cp --concurrency N` of a SIZE object, download and upload (the transfer engine),
    and the same command's fixed cost (start, init, N pairings, ring: an N MiB object in 1 MiB
    parts), so that the download can also be compared past its setup as perftest reports itself;
  - `ib_write_bw -q N` again while the guest copies the object file over and over (what the
    download does besides RDMA: the server reads the store, cp writes the file), with the
    copies' own MB/s: how much of the emulated NIC's CPUs those copies take;
  - `hipobj.safetensors.load` of a SIZE checkpoint with max_concurrency N (one registration,
    concurrent ranged GETs; checked equal to safetensors.numpy.load of the same bytes);
  - perftest on the same path and the same number of QPs: `ib_write_bw -q N` (a GET is the
    server's RDMA WRITE) and `ib_read_bw -q N` (a PUT is its RDMA READ), 1 MiB messages, the
    server's work-request size;
  - where the guest's CPUs went during the copies and perftest (cpu_*: the share busy, and CPU
    seconds of the server, the command, softirq where Soft-RoCE moves packets, system, user);
  - context over plain HTTP against the same server: `aws s3 cp` (awscli, max_concurrent_requests
    N) download, and runai-model-streamer's streaming engine (libstreamer, the C++ core its
    SafetensorsStreamer uses; RUNAI_STREAMER_CONCURRENCY=N) reading the checkpoint's bytes.
Rows alternate with their perftest reference cell by cell. Prints one JSON document (the raw
seconds, MB/s and ratios) on stdout; progress on stderr.

The object, the checkpoint, the server's store and the copies all live in the guest's /tmp, a
3 GiB tmpfs whatever the guest's memory: 1024 MiB overflowed it (the server answered 507
StorageFull on 2026-12-02), 512 fits.

A larger SIZE (the issue's 1 GiB) needs HIPOBJ_BENCH_TMPFS: a tmpfs of that size is mounted for
the server's store and the bench's files (and the guest needs the memory: benches/engine gives it).

  python benches/engine.py   (env: HIPOBJ_BENCH_MB, default 512; HIPOBJ_BENCH_STREAMS, "1,4,8";
                              HIPOBJ_BENCH_VENV: the venv with awscli and runai-model-streamer;
                              HIPOBJ_BENCH_TMPFS=6g: the bench's own tmpfs of that size;
                              HIPOBJ_BENCH_CONTEXT=0: no awscli / runai columns;
                              HIPOBJ_BENCH_CLI_BEFORE=BIN: another `hipobj` (an earlier build)
                              timed beside cp's rows, alternating, as cp_*_before_s)
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import safetensors.numpy

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python" / "tests"))
import hipobj  # noqa: E402
import hipobj.safetensors  # noqa: E402
from hipobj_server import IDENTITIES, Server, device_address, device_pair  # noqa: E402

MB = 1 << 20
SIZE = int(os.environ.get("HIPOBJ_BENCH_MB", "512")) * MB
STREAMS = [int(n) for n in os.environ.get("HIPOBJ_BENCH_STREAMS", "1,4,8").split(",")]
VENV = Path(os.environ.get("HIPOBJ_BENCH_VENV", REPO / "target" / "bench-venv"))
CLI = os.environ.get("HIPOBJ_CLI_BIN", str(REPO / "target" / "release" / "hipobj"))
PERFTEST = str(REPO / "benches" / "server-datapath-perftest.sh")
TMPFS = os.environ.get("HIPOBJ_BENCH_TMPFS")
CONTEXT = os.environ.get("HIPOBJ_BENCH_CONTEXT", "1") != "0"
CLI_BEFORE = os.environ.get("HIPOBJ_BENCH_CLI_BEFORE")
BUCKET = "engine-bench"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


TICK = os.sysconf("SC_CLK_TCK")


def cpu_now(server_pid: int) -> dict:
    """CPU seconds so far: the whole guest's by kind (/proc/stat), the server's (all its threads)
    and this script's finished children's (cp, perftest, aws ...)."""
    fields = open("/proc/stat").readline().split()[1:8]
    user, nice, system, idle, iowait, irq, softirq = (int(x) / TICK for x in fields)
    stat = open(f"/proc/{server_pid}/stat").read().rsplit(")", 1)[1].split()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"user": user + nice, "system": system, "softirq": softirq + irq, "idle": idle + iowait,
            "server": (int(stat[11]) + int(stat[12])) / TICK,
            "children": children.ru_utime + children.ru_stime}


def timed_cpu(fn, server_pid: int) -> tuple:
    """`fn`'s seconds and where the guest's CPUs went meanwhile: `busy` (the share of all CPUs
    not idle), and CPU seconds of the server, of the command (children), of the kernel's
    softirq work (where Soft-RoCE moves packets) and of all system time."""
    before = cpu_now(server_pid)
    seconds = timed(fn)
    after = cpu_now(server_pid)
    d = {k: after[k] - before[k] for k in before}
    total = d["user"] + d["system"] + d["softirq"] + d["idle"]
    return seconds, {"busy": round(1 - d["idle"] / total, 3) if total else None,
                     "server_s": round(d["server"], 2), "command_s": round(d["children"], 2),
                     "softirq_s": round(d["softirq"], 2), "system_s": round(d["system"], 2),
                     "user_s": round(d["user"], 2)}


def run(cmd, env=None) -> str:
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} exited {p.returncode}: {p.stdout[-800:]} {p.stderr[-800:]}")
    return p.stdout


def perftest(tool: str, qps: int) -> float:
    """MB/s of `tool -q qps` with 1 MiB messages (perftest's MB/s are 2^20 bytes)."""
    iters = max(64, SIZE // MB // 2)
    out = run([PERFTEST, tool, str(qps), str(MB), str(iters)])
    return float(out.split()[-1]) * MB / 1e6


def perftest_beside_copies(tool: str, qps: int, src: Path, dst: Path) -> tuple:
    """`tool -q qps` while the guest copies `src` to `dst` over and over (read + write: the two
    copies of a download's bytes, the server's from its store and cp's into the file): perftest's
    MB/s (None if it failed twice) and the copies' MB/s over the same time."""
    copier = subprocess.Popen(["bash", "-c", f"while :; do dd if={src} of={dst} bs=8M status=none; "
                               "echo x; done"], stdout=subprocess.PIPE, text=True)
    t = time.perf_counter()
    try:
        bw = perftest(tool, qps)
    except RuntimeError as e:  # a context figure: its failure (perftest's time limit) is logged
        log(f"{tool} -q {qps} beside the copies failed: {str(e)[:300]}")
        bw = None
    finally:
        elapsed = time.perf_counter() - t
        copier.kill()
        rounds = copier.communicate()[0].count("x")
        dst.unlink(missing_ok=True)
    return bw, rounds * src.stat().st_size / elapsed / 1e6


def write_checkpoint(path: str) -> dict:
    """SIZE bytes of float32 tensors, 16 MiB each, in a safetensors file; their digests by name."""
    assert SIZE % (16 * MB) == 0, "HIPOBJ_BENCH_MB must be a multiple of 16"
    rng = np.random.default_rng(21)
    tensors = {f"layer.{i:03d}.weight": rng.standard_normal(4 * MB, dtype=np.float32).reshape(-1, 1024)
               for i in range(SIZE // (16 * MB))}
    safetensors.numpy.save_file(tensors, path)
    return digests(safetensors.numpy.load_file(path))


def digests(tensors: dict) -> dict:
    return {k: (v.dtype.str, v.shape, hashlib.sha256(v.tobytes()).hexdigest()) for k, v in tensors.items()}


def own_tmpfs(size: str) -> None:
    """Every temporary file of this run (the server's store too) on a tmpfs of `size`."""
    mnt = "/tmp/hipobj-bench-fs"  # the guest's /tmp is its own; the rest of its root is the host's, read only
    os.makedirs(mnt, exist_ok=True)
    run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", mnt])
    tempfile.tempdir = mnt


def finish_row(row: dict, n: int, ckpt_size: int) -> None:
    """The row's MB/s and its ratios to perftest of the same boot; logged."""
    mbps = lambda s, size=SIZE: size / s / 1e6  # noqa: E731
    row["cp_get_MBps"] = mbps(row["cp_get_s"])
    row["cp_put_MBps"] = mbps(row["cp_put_s"])
    row["safetensors_load_MBps"] = mbps(row["safetensors_load_s"], ckpt_size)
    row["cp_get_vs_ib_write_bw"] = row["cp_get_MBps"] / row["ib_write_bw_MBps"]
    # perftest's figure leaves out its own setup; this is cp's with its fixed cost
    # (cp_setup_s, which moves n MiB) left out the same way.
    row["cp_get_past_setup_vs_ib_write_bw"] = (
        (SIZE - n * MB) / (row["cp_get_s"] - row["cp_setup_s"]) / 1e6 / row["ib_write_bw_MBps"])
    row["cp_put_vs_ib_read_bw"] = row["cp_put_MBps"] / row["ib_read_bw_MBps"]
    row["safetensors_load_vs_ib_write_bw"] = row["safetensors_load_MBps"] / row["ib_write_bw_MBps"]
    for k in ("cp_get_before_s", "cp_put_before_s"):
        if k in row:
            row[k[:-2] + "_MBps"] = mbps(row[k])
    log(json.dumps(row))


def bench_server(prefix: str, extra: Sequence[str] = (), rdma: bool = True) -> tuple:
    """A work directory, hipobj-server (with the options `extra`) with RDMA on the lane's second
    device, and the environment of a command (`hipobj`, `aws`) that reaches it from the first:
    (work, server, env, device). `rdma=False`: the server on loopback with RDMA off (plain HTTP
    only, no device needed; device None)."""
    client_dev, server_dev = device_pair() if rdma else (None, None)
    work = Path(tempfile.mkdtemp(prefix=prefix))
    server = Server(server_dev, device_address(server_dev) if rdma else "127.0.0.1", extra)
    access, secret = IDENTITIES[0]
    env = dict(os.environ, AWS_ENDPOINT_URL=server.endpoint, AWS_ACCESS_KEY_ID=access,
               AWS_SECRET_ACCESS_KEY=secret, AWS_REGION="us-east-1",
               AWS_SHARED_CREDENTIALS_FILE="/nonexistent", AWS_EC2_METADATA_DISABLED="true")
    if client_dev:
        env["HIPOBJ_NIC"] = client_dev
    env.pop("AWS_PROFILE", None)
    return work, server, env, client_dev


def write_object(path: Path) -> Path:
    """SIZE random bytes (the benchmark's object) at `path`."""
    with open(path, "wb") as f:
        rng = np.random.default_rng(7)
        for _ in range(SIZE // (16 * MB)):
            f.write(rng.integers(0, 256, 16 * MB, dtype=np.uint8).tobytes())
    return path


def main() -> None:
    if TMPFS:
        own_tmpfs(TMPFS)
    work, server, env, client_dev = bench_server("hipobj-bench-")
    results = {"size_bytes": SIZE, "streams": STREAMS, "guest_kernel": os.uname().release, "rows": []}
    try:
        client = server.client()
        client.create_bucket(Bucket=BUCKET)
        src = write_object(work / "src")
        run([CLI, "cp", "-q", str(src), f"s3://{BUCKET}/obj"], env)  # the object, and a warm-up
        # The fixed cost of one `hipobj cp` with N streams: start, hipObjInit, the N pairings,
        # the ring's registration, one 1 MiB GET per stream (the same command on an N MiB object).
        small = work / "small"
        with open(small, "wb") as f:
            f.write(os.urandom(max(STREAMS) * MB))
        run([CLI, "cp", "-q", str(small), f"s3://{BUCKET}/small"], env)
        small.unlink()
        ckpt = work / "model.safetensors"
        reference = write_checkpoint(str(ckpt))
        run([CLI, "cp", "-q", str(ckpt), f"s3://{BUCKET}/model.safetensors"], env)
        ckpt_size = ckpt.stat().st_size
        ckpt.unlink()  # the guest's /tmp is memory
        aws_cfg = work / "aws-config"
        with hipobj.Session(nic=client_dev) as session:
            for n in STREAMS:
                row = {"streams": n}
                back = work / "back"
                row["cp_get_s"], row["cpu_cp_get"] = timed_cpu(
                    lambda: run([CLI, "cp", "-q", "--concurrency", str(n), f"s3://{BUCKET}/obj",
                                 str(back)], env), server.proc.pid)
                back.unlink()
                if CLI_BEFORE:
                    row["cp_get_before_s"] = timed(lambda: run([CLI_BEFORE, "cp", "-q", "--concurrency", str(n),
                                                                f"s3://{BUCKET}/obj", str(back)], env))
                    back.unlink()
                row["cp_setup_s"] = timed(lambda: run([CLI, "cp", "-q", "--concurrency", str(n),
                                                       "--part-size", str(MB), f"s3://{BUCKET}/small",
                                                       str(back)], env))
                back.unlink()
                _, row["cpu_ib_write_bw"] = timed_cpu(
                    lambda: row.__setitem__("ib_write_bw_MBps", perftest("ib_write_bw", n)),
                    server.proc.pid)
                (row["ib_write_bw_beside_copies_MBps"],
                 row["copies_beside_ib_write_bw_MBps"]) = perftest_beside_copies("ib_write_bw", n, src, back)
                row["cp_put_s"], row["cpu_cp_put"] = timed_cpu(
                    lambda: run([CLI, "cp", "-q", "--concurrency", str(n), str(src),
                                 f"s3://{BUCKET}/obj"], env), server.proc.pid)
                if CLI_BEFORE:
                    row["cp_put_before_s"] = timed(lambda: run([CLI_BEFORE, "cp", "-q", "--concurrency", str(n),
                                                                str(src), f"s3://{BUCKET}/obj"], env))
                _, row["cpu_ib_read_bw"] = timed_cpu(
                    lambda: row.__setitem__("ib_read_bw_MBps", perftest("ib_read_bw", n)),
                    server.proc.pid)
                config = hipobj.TransferConfig(max_concurrency=n, multipart_chunksize=8 * MB)
                loaded = {}

                def load():
                    loaded.update(hipobj.safetensors.load(client, BUCKET, "model.safetensors",
                                                          session=session, config=config))

                row["safetensors_load_s"] = timed(load)

                def register():  # the load's fixed cost: a fresh SIZE destination, registered
                    with session.register(np.empty(ckpt_size, dtype=np.uint8)):
                        pass

                row["register_s"] = timed(register)
                assert digests(loaded) == reference, "the loaded tensors differ from the file's"
                loaded.clear()
                if not CONTEXT:
                    finish_row(row, n, ckpt_size)
                    results["rows"].append(row)
                    continue
                aws_cfg.write_text(f"[default]\ns3 =\n  max_concurrent_requests = {n}\n"
                                   f"  multipart_chunksize = 8MB\n")
                aws_env = dict(env, AWS_CONFIG_FILE=str(aws_cfg))
                row["awscli_get_s"] = timed(lambda: run([str(VENV / "bin" / "aws"), "s3", "cp", "--quiet",
                                                         f"s3://{BUCKET}/obj", str(back)], aws_env))
                back.unlink()
                runai_env = dict(env, RUNAI_STREAMER_CONCURRENCY=str(n),
                                 RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING="0")
                row["runai_get_s"] = float(run([str(VENV / "bin" / "python"),
                                                str(REPO / "benches" / "runai_read.py"),
                                                f"s3://{BUCKET}/model.safetensors", str(ckpt_size)],
                                               runai_env).split()[-1])
                row["awscli_get_MBps"] = SIZE / row["awscli_get_s"] / 1e6
                row["runai_get_MBps"] = ckpt_size / row["runai_get_s"] / 1e6
                finish_row(row, n, ckpt_size)
                results["rows"].append(row)
    finally:
        server.stop()
        subprocess.run(["rm", "-rf", str(work)])
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
