"""What the NIXL tests and the benchmark share: the plugin's path, NIXL's Python agent with the
HIPOBJ or the OBJ backend, the KV-block data pattern, hipobj_nixl_stats() through ctypes, and the
peer process that runs NIXL's own OBJ plugin.

NIXL 1.4.0 reads NIXL_PLUGIN_DIR once per process and it replaces the wheel's own plugin folder
(there is no Python call that adds one): a process sees either HIPOBJ (NIXL_PLUGIN_DIR =
target/nixl/plugins) or the wheel's plugins, OBJ among them. The tests run HIPOBJ in the pytest
process and NIXL's OBJ plugin in a child process (nixl_peer.py) started without NIXL_PLUGIN_DIR.
"""

from __future__ import annotations

import ctypes
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Sequence

import numpy as np

REPO = Path(__file__).resolve().parents[2]
PLUGIN_DIR = Path(os.environ.get("HIPOBJ_NIXL_PLUGIN_DIR", REPO / "target/nixl/plugins"))
PLUGIN = PLUGIN_DIR / "libplugin_HIPOBJ.so"
KiB, MiB = 1024, 1024 * 1024
# An OBJ segment's devId names its object in NIXL (its metaInfo is the key): one per registration
# in the process, so that two stores of one agent never register the same segment twice.
_DEV_IDS = itertools.count(1 << 20)


def nixl_api():
    """nixl_agent and nixl_agent_config from the wheel (nixl-cu12)."""
    from nixl_cu12._api import nixl_agent, nixl_agent_config

    return nixl_agent, nixl_agent_config


def block(seed: int, size: int) -> np.ndarray:
    """A KV block's reproducible bytes (never one value repeated)."""
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)


def obj_params(endpoint: str, bucket: str, access: str, secret: str) -> Dict[str, str]:
    """NIXL's OBJ plugin against the same server: plain HTTP, path-style, SigV4."""
    return {
        "endpoint_override": endpoint,
        "scheme": endpoint.split("://")[0],
        "bucket": bucket,
        "access_key": access,
        "secret_key": secret,
        "region": "us-east-1",
        "use_virtual_addressing": "false",
    }


def hipobj_params(endpoint: str, bucket: str, access: str, secret: str, nic: str, **extra: str) -> Dict[str, str]:
    """HIPOBJ's backend parameters: the OBJ plugin's map, as it is, plus nics and transport."""
    return {**obj_params(endpoint, bucket, access, secret), "nics": nic, "transport": "rdma", **extra}


class Stats(ctypes.Structure):
    """hipObjNixlStats_t (nixl/include/hipobj_nixl.h)."""

    _fields_ = [
        (name, ctypes.c_uint64)
        for name in (
            "completed", "failed", "cancelled", "bytes", "rdmaV1", "rdmaV2", "http",
            "pathUnknown", "gets", "puts", "verified", "retries",
        )
    ]

    def as_dict(self) -> Dict[str, int]:
        return {name: getattr(self, name) for name, _ in self._fields_}


def stats() -> Dict[str, int]:
    """The plugin's counters (the plugin NIXL loaded: dlopen of the same file gives its handle)."""
    lib = ctypes.CDLL(str(PLUGIN))
    lib.hipobj_nixl_stats.argtypes = [ctypes.POINTER(Stats)]
    out = Stats()
    assert lib.hipobj_nixl_stats(ctypes.byref(out)) == 0
    return out.as_dict()


def delta(after: Dict[str, int], before: Dict[str, int]) -> Dict[str, int]:
    return {k: after[k] - before[k] for k in after}


class KvStore:
    """A KV-block pool as an inference engine keeps one: `slots` blocks of `size` bytes in one
    registered DRAM region, moved to and from one object per block through one NIXL backend, in
    batches of `batch` descriptors (one NIXL request per batch)."""

    def __init__(self, agent, backend: str, slots: int, size: int, batch: int):
        self.agent, self.backend, self.slots, self.size, self.batch = agent, backend, slots, size, batch
        self.pool = np.zeros(slots * size, dtype=np.uint8)
        self.addr = self.pool.ctypes.data
        self.reg = agent.register_memory([(self.addr, slots * size, 0, "")], "DRAM", backends=[backend])
        self.objects = {}

    def close(self) -> None:
        for reg, _ in self.objects.values():
            self.agent.deregister_memory(reg, backends=[self.backend])
        self.objects.clear()
        self.agent.deregister_memory(self.reg, backends=[self.backend])

    def slot(self, i: int) -> np.ndarray:
        return self.pool[i * self.size:(i + 1) * self.size]

    def _objects(self, keys: Sequence[str]):
        """OBJ segments for `keys`, registered once each as NIXL's OBJ plugin maps them (the
        descriptor's metaInfo is the key, its devId names the segment)."""
        descs = []
        for key in keys:
            if key not in self.objects:
                dev = next(_DEV_IDS)
                reg = self.agent.register_memory([(0, self.size, dev, key)], "OBJ", backends=[self.backend])
                self.objects[key] = (reg, dev)
            descs.append((0, self.size, self.objects[key][1]))
        return self.agent.get_xfer_descs(descs, "OBJ")

    def start(self, op: str, keys: Sequence[str], first_slot: int = 0):
        """One NIXL request: WRITE (slots -> objects) or READ (objects -> slots); returns the handle."""
        remote = self._objects(keys)
        local = self.agent.get_xfer_descs(
            [(self.addr + (first_slot + n) * self.size, self.size, 0) for n in range(len(keys))], "DRAM")
        handle = self.agent.initialize_xfer(op, local, remote, self.agent.name, backends=[self.backend])
        state = self.agent.transfer(handle)
        assert state != "ERR", f"{op} of {len(keys)} objects: postXfer answered ERR"
        return handle

    def wait(self, handle, timeout: float = 300.0) -> str:
        """Polls check_xfer_state until DONE or ERR (or `timeout` s). NIXL's binding raises its
        error (nixlBackendError: NIXL_ERR_BACKEND) where the API documents "ERR": both are ERR."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                state = self.agent.check_xfer_state(handle)
            except Exception as err:  # noqa: BLE001 - the binding's error classes are not exported
                if not str(err).startswith("NIXL_ERR"):
                    raise
                state = "ERR"
            if state != "PROC":
                return state
            if time.monotonic() > deadline:
                return "TIMEOUT"

    def move(self, op: str, keys: Sequence[str], first_slot: int = 0) -> None:
        handle = self.start(op, keys, first_slot)
        state = self.wait(handle)
        self.agent.release_xfer_handle(handle)
        assert state == "DONE", f"{op} of {len(keys)} objects ({keys[0]}...): {state}"


def make_agent(name: str, backend: str, params: Dict[str, str]):
    nixl_agent, nixl_agent_config = nixl_api()
    agent = nixl_agent(name, nixl_agent_config(enable_prog_thread=False, backends=[]))
    agent.create_backend(backend, params)
    return agent


def peer(args: List[str], secret: str, timeout: float = 600.0) -> dict:
    """Runs nixl_peer.py in a process of its own (it sets NIXL_PLUGIN_DIR for HIPOBJ and drops it
    for NIXL's OBJ plugin), the secret key on its standard input (never on a command line: issue
    52's check samples them); returns its JSON answer."""
    env = {k: v for k, v in os.environ.items() if k != "NIXL_PLUGIN_DIR"}
    out = subprocess.run([sys.executable, str(Path(__file__).with_name("nixl_peer.py"))] + args,
                         env=env, input=secret + "\n", capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise AssertionError(f"nixl_peer {' '.join(args)} failed ({out.returncode}):\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])
