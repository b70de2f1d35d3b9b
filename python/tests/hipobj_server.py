"""Start and stop hipobj-server for the Python lane tests, and make boto3 clients for it.

The one place that decides how the server authenticates: `auth_args` passes a credentials file
(`--credentials FILE`, one `ACCESS SECRET` line per identity, written with mode 600: the server
refuses a file that group or others may read) when the server has that flag, and the single
`--access-key/--secret-key` pair only to a build older than that flag (which has no other way to
take a secret). `HIPOBJ_SERVER_BIN` overrides the binary.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import boto3
from botocore.config import Config

REPO = Path(__file__).resolve().parents[2]
IDENTITIES: List[Tuple[str, str]] = [("hipobj-test", "hipobj-test-secret"), ("hipobj-other", "hipobj-other-secret")]


def server_binary() -> str:
    return os.environ.get("HIPOBJ_SERVER_BIN", str(REPO / "target/release/hipobj-server"))


def rdma_devices() -> List[str]:
    """$HIPOBJ_VM_DEVICES (the lane), else the host's RDMA devices."""
    devices = os.environ.get("HIPOBJ_VM_DEVICES", "").split()
    if not devices and os.path.isdir("/sys/class/infiniband"):
        devices = sorted(os.listdir("/sys/class/infiniband"))
    return devices


def device_pair() -> Tuple[str, str]:
    """(client device, server device); raises when there is no RDMA device (the tests then fail)."""
    devices = rdma_devices()
    if not devices:
        raise RuntimeError("no RDMA device: run the Python tests through the lane (tests/vm/run)")
    return devices[0], devices[-1]


def device_address(device: str) -> str:
    """The IPv4 address of `device` in the lane ($HIPOBJ_VM_ADDRS), else loopback."""
    for item in os.environ.get("HIPOBJ_VM_ADDRS", "").split():
        name, _, addr = item.partition("=")
        if name == device and addr:
            return addr
    return "127.0.0.1"


def _server_help() -> str:
    out = subprocess.run([server_binary(), "--help"], capture_output=True, text=True)
    return out.stdout + out.stderr


def write_private(path: Path, text: str) -> None:
    """`text` into `path`, readable by its owner only (mode 600, also when it existed)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(text)


def auth_args(data_dir: Path, identities: Sequence[Tuple[str, str]]) -> List[str]:
    if "--credentials" in _server_help():
        path = data_dir.parent / (data_dir.name + ".credentials")
        write_private(path, "".join(f"{a} {s}\n" for a, s in identities))
        return ["--credentials", str(path)]
    # A build from before --credentials (mixed revisions) takes its secret on argv only.
    access, secret = identities[0]
    return ["--access-key", access, "--secret-key", secret]


class Server:
    """A running hipobj-server on `host` (port chosen by the kernel); `device=None`: RDMA off."""

    def __init__(self, device: Optional[str], host: str, extra: Sequence[str] = ()):
        self.device = device
        self.tmp = Path(tempfile.mkdtemp(prefix="hipobj-py-"))
        self.data_dir = self.tmp / "data"
        self.data_dir.mkdir()
        self.log_path = self.tmp / "server.log"
        args = [server_binary(), "--listen", f"{host}:0", "--data-dir", str(self.data_dir)]
        if device:
            args += ["--device", device]
        args += auth_args(self.data_dir, IDENTITIES) + list(extra)
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self._log)
        self.address = self._wait_listening()
        threading.Thread(target=self._drain, daemon=True).start()

    def _wait_listening(self) -> str:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").strip()
            if line.startswith("listening on "):
                return line.split()[-1]
        self.proc.wait()
        raise RuntimeError(f"hipobj-server exited ({self.proc.returncode}): {self.log()}")

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for _ in self.proc.stdout:
            pass

    @property
    def endpoint(self) -> str:
        return f"http://{self.address}"

    def client(self, identity: int = 0, secret: Optional[str] = None):
        access, good_secret = IDENTITIES[identity]
        return make_client(self.endpoint, access, secret or good_secret)

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self._log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def make_client(endpoint: str, access: str, secret: str):
    """A boto3 S3 client as an application would make one (path-style addressing, no retries so
    that a refused request shows at once)."""
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=access,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=Config(
            s3={"addressing_style": "path"},
            retries={"max_attempts": 1, "mode": "standard"},
            connect_timeout=10,
            read_timeout=60,
        ),
    )


def stored_file(data_dir, bucket: str, key: str):
    """The file hipobj-server's embedded store keeps the object in: ``<data dir>/<bucket>/<key as
    one file name>``, bytes outside [A-Za-z0-9_.~-] (and a leading ".") written %XX
    (server/src/backend/keys.rs)."""
    name = "".join(
        chr(b) if (chr(b).isascii() and (chr(b).isalnum() or chr(b) in "-_.~")) and not (i == 0 and b == ord(".")) else f"%{b:02X}"
        for i, b in enumerate(key.encode())
    )
    return data_dir / bucket / name


def flip_on_disk(data_dir, bucket: str, key: str, offset: int) -> None:
    """One byte of the stored object changed in place in the server's store (its files under its
    data directory), after the server stored its checksum: what a rotten disk does."""
    path = stored_file(data_dir, bucket, key)
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x20]))
