"""A 2-rank distributed checkpoint over RDMA with torch.distributed.checkpoint (DCP):

    torchrun --nproc-per-node 2 python/examples/dcp_torchrun.py save   --endpoint URL --nic rxe0 ...
    torchrun --nproc-per-node 2 python/examples/dcp_torchrun.py load   --endpoint URL --nic rxe0 ...
    torchrun --nproc-per-node 2 python/examples/dcp_torchrun.py all    --endpoint URL --nic rxe0 ...

Every rank builds the same model and takes one Adam step (same seed), so each knows every
tensor's value. `save` writes the model's and the optimizer's state with every tensor sharded
by rows (DTensor Shard(0)) through hipobj's StorageWriter; `load` reads it into a fresh state
with another sharding (columns, Shard(1), for matrices; replicated vectors) through hipobj's
StorageReader, or with `--reader s3torchconnector` through s3torchconnector's S3StorageReader
over plain HTTP, and checks every tensor equal. `all` saves, then loads through both readers, in
one launch (torch's start is minutes under emulation), then does the same in the Hugging Face
safetensors layout at `<path>-safetensors` (phases save-safetensors and load-safetensors):
SafetensorsStorageWriter refuses the row-sharded state by name, saves the small layers' weights
as replicated DTensors (each rank writes the half DCP's planner gives it:
model-0000r-of-00002.safetensors, then the index), and SafetensorsStorageReader loads them into
the column sharding. Credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY. The process group
is gloo (CPU tensors). Each report line of a load through hipobj's readers carries the reader's
counters (``checks``: items verified against the writer's CRC64NVME, and unchecked; DCP's
resharding reads parts of the stored chunks, each checked against the writer's block CRCs)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor


def build_model(embedding_rows: int) -> torch.nn.Module:
    """An embedding (the one tensor over 64 MiB) and a stack of linear layers."""
    torch.manual_seed(0)
    layers = [torch.nn.Embedding(embedding_rows, 1024)]
    layers += [torch.nn.Linear(1024, 1024) for _ in range(6)]
    layers += [torch.nn.Linear(1024 if i == 0 else 512, 512) for i in range(8)]
    return torch.nn.Sequential(*layers)


def trained_state(embedding_rows: int) -> dict:
    """Model and Adam state after one step: the same on every rank."""
    model = build_model(embedding_rows)
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    optim.step()
    names = {id(p): n for n, p in model.named_parameters()}
    state = {"model": {n: p.detach() for n, p in model.named_parameters()}, "optim": {}}
    for p, s in optim.state.items():
        name = names[id(p)]
        state["optim"][name] = {"exp_avg": s["exp_avg"], "exp_avg_sq": s["exp_avg_sq"], "step": s["step"]}
    state["optim_groups"] = {"lr": 1e-3, "betas": [0.9, 0.999], "note": "param_groups as bytes"}
    return state


def placements(t: torch.Tensor, phase: str) -> list:
    if phase == "save":
        return [Shard(0)]
    return [Shard(1)] if t.dim() == 2 else [Replicate()]


def sharded(state: dict, mesh, phase: str, fresh: bool) -> dict:
    """The state with every floating tensor a DTensor placed for `phase` (zeros when fresh)."""

    def one(v):
        if isinstance(v, dict):
            return {k: one(x) for k, x in v.items()}
        if isinstance(v, torch.Tensor) and v.is_floating_point() and v.dim() > 0:
            return distribute_tensor(torch.zeros_like(v) if fresh else v, mesh, placements(v, phase))
        if isinstance(v, torch.Tensor):
            return torch.zeros_like(v) if fresh else v.clone()
        return "unset" if fresh else v

    return {k: one(v) for k, v in state.items()}


def small_layers(expected: dict, mesh, phase: str, fresh: bool) -> dict:
    """The model's tensors of at most 1024 x 512 elements (about 9 MiB, not the embedding nor the
    1024 x 1024 layers) as DTensors: replicated to save (each rank holds each whole, which the
    safetensors layout can hold), placed for `phase` otherwise (zeros when fresh)."""
    small = {k: v for k, v in expected["model"].items() if v.numel() <= 1024 * 512}
    out = {}
    for k, v in small.items():
        where = [Replicate()] if phase == "save" else placements(v, phase)
        out[k] = distribute_tensor(torch.zeros_like(v) if fresh else v, mesh, where)
    return {"model": out}


def save_safetensors(expected: dict, mesh, s3, path: str, session) -> None:
    """The row-sharded state refused by name (nothing written), then the small layers saved."""
    from torch.distributed.checkpoint.api import CheckpointException

    from hipobj.torch.dcp import SafetensorsStorageWriter

    try:
        dcp.save(sharded(expected, mesh, "save", fresh=False), storage_writer=SafetensorsStorageWriter(s3, path, session=session))
    except CheckpointException as e:
        if "is split across ranks" not in str(e):
            raise
    else:
        raise SystemExit("SafetensorsStorageWriter took tensors split across ranks")
    state = small_layers(expected, mesh, "save", fresh=False)
    dcp.save(state, storage_writer=SafetensorsStorageWriter(s3, path, session=session))


def compare(loaded: dict, expected: dict, mesh, where: str = "") -> int:
    """Tensors checked; raises on the first difference."""
    count = 0
    for k, v in expected.items():
        got = loaded[k]
        if isinstance(v, dict):
            count += compare(got, v, mesh, f"{where}{k}.")
        elif isinstance(v, torch.Tensor) and v.is_floating_point() and v.dim() > 0:
            want = distribute_tensor(v, mesh, placements(v, "load")).to_local()
            if not torch.equal(got.to_local(), want):
                raise SystemExit(f"{where}{k}: the loaded shard differs")
            count += 1
        elif isinstance(v, torch.Tensor):
            if not torch.equal(got, v):
                raise SystemExit(f"{where}{k}: differs")
            count += 1
        elif got != v:
            raise SystemExit(f"{where}{k}: {got!r} != {v!r}")
    return count


def nbytes(state: dict) -> int:
    return sum(
        nbytes(v) if isinstance(v, dict) else (v.numel() * v.element_size() if isinstance(v, torch.Tensor) else 0)
        for v in state.values()
    )


def client(args):
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3", endpoint_url=args.endpoint, region_name="us-east-1", config=Config(s3={"addressing_style": "path"})
    )


def s3torchconnector_reader(args):
    """s3torchconnector's DCP reader for our endpoint (its S3StorageReader names no endpoint,
    so its file system gets a client for ours)."""
    from s3torchconnector import S3ClientConfig
    from s3torchconnector._s3client import S3Client
    from s3torchconnector.dcp import S3StorageReader
    from s3torchconnector.dcp.s3_file_system import S3FileSystem

    reader = S3StorageReader("us-east-1", args.path)
    config = S3ClientConfig(force_path_style=True)
    s3 = S3Client("us-east-1", endpoint=args.endpoint, s3client_config=config)
    reader.fs = S3FileSystem("us-east-1", s3_client=s3, reader_constructor=reader._reader_constructor)
    reader.path = reader.fs.init_path(args.path)
    return reader


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("phase", choices=["save", "load", "all"])
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--path", required=True, help="s3://bucket/prefix")
    ap.add_argument("--nic", default=None)
    ap.add_argument("--embedding-rows", type=int, default=17000)
    ap.add_argument("--reader", choices=["hipobj", "s3torchconnector"], default="hipobj")
    args = ap.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    expected = trained_state(args.embedding_rows)
    s3 = client(args)

    import hipobj
    from hipobj.torch.dcp import SafetensorsStorageReader, StorageReader, StorageWriter

    steps = [("save", None)] if args.phase == "save" else [("load", args.reader)]
    if args.phase == "all":
        steps = [("save", None), ("load", "hipobj"), ("load", "s3torchconnector")]
        steps += [("save-safetensors", None), ("load-safetensors", "hipobj")]
    hf_path = args.path.rstrip("/") + "-safetensors"
    with hipobj.Session(nic=args.nic) as session:
        for phase, reader in steps:
            t0 = time.monotonic()
            checked = 0
            counters = None
            if phase == "save":
                state = sharded(expected, mesh, "save", fresh=False)
                dcp.save(state, storage_writer=StorageWriter(s3, args.path, session=session))
            elif phase == "save-safetensors":
                save_safetensors(expected, mesh, s3, hf_path, session)
            elif phase == "load-safetensors":
                state = small_layers(expected, mesh, "load", fresh=True)
                storage = SafetensorsStorageReader(s3, hf_path, session=session)
                dcp.load(state, storage_reader=storage)
                counters = storage.stats
                checked = compare(state, {"model": {k: expected["model"][k] for k in state["model"]}}, mesh)
            else:
                state = sharded(expected, mesh, "load", fresh=True)
                if reader == "s3torchconnector":
                    storage = s3torchconnector_reader(args)
                else:
                    storage = StorageReader(s3, args.path, session=session)
                dcp.load(state, storage_reader=storage)
                if reader == "hipobj":
                    counters = storage.stats
                checked = compare(state, expected, mesh)
            seconds = time.monotonic() - t0
            dist.barrier()
            report = {"rank": rank, "phase": phase, "reader": reader, "seconds": round(seconds, 3),
                      "state_bytes": nbytes(expected), "tensors_checked": checked}
            if counters is not None:
                report["checks"] = {k: counters[k] for k in ("verified", "unchecked", "check_bytes", "check_gets")}
            # one write(2) of the whole line: the ranks share the launcher's stdout, and a line
            # written in pieces interleaves with the other rank's
            sys.stdout.flush()
            os.write(sys.stdout.fileno(), ("dcp_torchrun " + json.dumps(report) + "\n").encode())
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
