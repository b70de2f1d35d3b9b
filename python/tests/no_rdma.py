"""What the tests of a host without an RDMA device share (issue 39). Importing this module, before
anything loads libibverbs, points libibverbs at an empty driver directory (IBV_CONFIG_DIR, as
cli/tests/cli_http.rs does), so such a test holds on a host that has a device too; such a test
module therefore runs in its own process. Then `rdma_off_server` serves a bucket from hipobj-server
on loopback with RDMA off."""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Iterator

os.environ["IBV_CONFIG_DIR"] = tempfile.mkdtemp(prefix="hipobj-no-ibverbs-drivers-")
os.environ.pop("HIPOBJ_TRANSPORT", None)


def assert_no_rdma_device() -> str:
    """Why libibverbs finds no device (fails when it still finds one)."""
    from hipobj import _core

    why = _core.rdma_missing()
    assert why is not None, "libibverbs still lists a device: run this module in its own process"
    return why


@contextlib.contextmanager
def rdma_off_server(bucket: str) -> Iterator["object"]:
    """hipobj-server on 127.0.0.1 without --device (RDMA off), with `bucket` created."""
    from hipobj_server import Server

    srv = Server(None, "127.0.0.1")
    try:
        srv.client().create_bucket(Bucket=bucket)
        yield srv
    finally:
        srv.stop()
