#!/usr/bin/env python3
"""Issue 38's benchmark, in the guest of one lane boot (benches/frameworks runs it): the same
work by each method, the methods alternating round by round, every transfer logged.

- DCP save and load of one state dict (STATE_MIB, dozens of tensors) without a process group:
  hipobj's StorageWriter/StorageReader over RDMA ("hipobj"), the same with
  ``TransferConfig(transport="http")`` (RDMA off: plain HTTP from and into the same memory,
  "hipobj-http"), and
  s3torchconnector's S3StorageWriter/S3StorageReader (HTTP, its CRT client, "s3torchconnector").
- A safetensors model (SAFETENSORS_MIB, one file) loaded into host memory: hipobj.safetensors.load
  ("hipobj") and runai-model-streamer's SafetensorsStreamer ("runai").

  python benches/frameworks.py ROUNDS STATE_MIB SAFETENSORS_MIB > report.json

Prints one JSON object: {"transfers": [{"what", "method", "round", "seconds", "bytes"}...],
"context": {...}}; every transfer is in it, and the figures (benches/bench_summary.py
frameworks_*) are ratios of medians over all of them."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python/tests"))

import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402

import hipobj  # noqa: E402
import hipobj.safetensors  # noqa: E402
from hipobj.torch.dcp import StorageReader, StorageWriter  # noqa: E402
from hipobj_server import IDENTITIES, Server, device_address, device_pair  # noqa: E402

MIB = 1 << 20


def state_dict(mib: int) -> dict:
    """About `mib` MiB in 40 tensors of a few sizes (as a model's layers), plus a few bytes."""
    g = torch.Generator().manual_seed(11)
    per = mib * MIB // 40 // 4
    out = {f"layer{i}.weight": torch.randn(per // 512 if i % 4 else per // 256, 512 if i % 4 else 256, generator=g) for i in range(40)}
    out["meta"] = {"step": 1000, "name": "bench"}
    return out


def zeroed(s: dict) -> dict:
    return {k: (torch.zeros_like(v) if isinstance(v, torch.Tensor) else zeroed(v) if isinstance(v, dict) else None) for k, v in s.items()}


def tensor_bytes(s: dict) -> int:
    return sum(v.numel() * v.element_size() if isinstance(v, torch.Tensor) else tensor_bytes(v) if isinstance(v, dict) else 0 for v in s.values())


def s3torch_fs(endpoint: str):
    from s3torchconnector import S3ClientConfig
    from s3torchconnector._s3client import S3Client
    from s3torchconnector.dcp.s3_file_system import S3FileSystem

    client = S3Client("us-east-1", endpoint=endpoint, s3client_config=S3ClientConfig(force_path_style=True))
    return S3FileSystem("us-east-1", s3_client=client)


def s3torch(kind: str, endpoint: str, path: str):
    from s3torchconnector.dcp import S3StorageReader, S3StorageWriter

    storage = S3StorageWriter("us-east-1", path) if kind == "writer" else S3StorageReader("us-east-1", path)
    storage.fs = s3torch_fs(endpoint)
    storage.path = storage.fs.init_path(path)
    return storage


def timed(log: list, what: str, method: str, rnd: int, nbytes: int, fn) -> None:
    t0 = time.perf_counter()
    fn()
    log.append({"what": what, "method": method, "round": rnd, "seconds": time.perf_counter() - t0, "bytes": nbytes})
    print(json.dumps(log[-1]), file=sys.stderr, flush=True)


def check_equal(got: dict, want: dict) -> None:
    for k, v in want.items():
        if isinstance(v, torch.Tensor) and not torch.equal(got[k], v):
            raise SystemExit(f"{k}: the loaded tensor differs")


def dcp_round(log, rnd, order, s3, endpoint, bucket, session, want, nbytes) -> None:
    for method in order:
        path = f"s3://{bucket}/dcp-{method}-{rnd}"
        if method == "s3torchconnector":
            writer, reader = s3torch("writer", endpoint, path), s3torch("reader", endpoint, path)
        else:
            config = hipobj.TransferConfig(transport="http" if method == "hipobj-http" else "rdma")
            writer = StorageWriter(s3, path, session=session, config=config)
            reader = StorageReader(s3, path, session=session, config=config)
        timed(log, "dcp-save", method, rnd, nbytes, lambda: dcp.save(want, storage_writer=writer))
        got = zeroed(want)
        timed(log, "dcp-load", method, rnd, nbytes, lambda: dcp.load(got, storage_reader=reader))
        check_equal(got, want)


def runai_load(endpoint: str, bucket: str, key: str) -> dict:
    from runai_model_streamer import SafetensorsStreamer

    out = {}
    with SafetensorsStreamer() as streamer:
        streamer.stream_file(f"s3://{bucket}/{key}")
        for name, t in streamer.get_tensors():
            out[name] = t.clone()  # the streamer's buffer is reused: keep what a loader keeps
    return out


def main() -> int:
    rounds, state_mib, st_mib = (int(a) for a in sys.argv[1:4])
    client_dev, server_dev = device_pair()
    server = Server(server_dev, device_address(server_dev))
    access, secret = IDENTITIES[0]
    os.environ.update(AWS_ACCESS_KEY_ID=access, AWS_SECRET_ACCESS_KEY=secret, AWS_ENDPOINT_URL=server.endpoint,
                      AWS_REGION="us-east-1", RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING="0")
    s3 = server.client()
    bucket = "bench-frameworks"
    s3.create_bucket(Bucket=bucket)
    log: list = []
    try:
        with hipobj.Session(nic=client_dev) as session:
            want = state_dict(state_mib)
            nbytes = tensor_bytes(want)
            methods = ["hipobj", "hipobj-http", "s3torchconnector"]
            for rnd in range(rounds):
                order = methods[rnd % 3:] + methods[: rnd % 3]
                dcp_round(log, rnd, order, s3, server.endpoint, bucket, session, want, nbytes)
            g = torch.Generator().manual_seed(5)
            model = {f"w{i}": torch.randn(st_mib * MIB // 32 // 4, generator=g) for i in range(32)}
            key = "model.safetensors"
            hipobj.safetensors.save(s3, bucket, key, model, session=session)
            st_bytes = tensor_bytes(model)
            for rnd in range(rounds):
                for method in (["hipobj", "runai"] if rnd % 2 == 0 else ["runai", "hipobj"]):
                    got: dict = {}
                    if method == "hipobj":
                        load = lambda: got.update(hipobj.safetensors.load(s3, bucket, key, device="cpu", session=session))  # noqa: E731
                    else:
                        load = lambda: got.update(runai_load(server.endpoint, bucket, key))  # noqa: E731
                    timed(log, "safetensors-load", method, rnd, st_bytes, load)
                    check_equal(got, model)
                    got.clear()
    finally:
        server.stop()
    context = {"rounds": rounds, "state_bytes": nbytes, "safetensors_bytes": st_bytes, "devices": [client_dev, server_dev],
               "torch": torch.__version__, "hipobj": hipobj.__version__}
    print(json.dumps({"transfers": log, "context": context}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
