"""Fixtures of the NIXL tests: this repository's plugin found through NIXL_PLUGIN_DIR (set before
the first agent: NIXL reads it once per process), and for the lane tests a hipobj-server with RDMA
on the lane's second device (python/tests/hipobj_server.py), a boto3 client and a bucket."""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python/tests"))
import nixl_env  # noqa: E402

os.environ["NIXL_PLUGIN_DIR"] = str(nixl_env.PLUGIN_DIR)


@pytest.fixture(scope="session")
def devices():
    from hipobj_server import device_pair

    return device_pair()


@pytest.fixture(scope="session")
def server(devices):
    from hipobj_server import Server, device_address

    _, server_dev = devices
    srv = Server(server_dev, device_address(server_dev))
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def identity():
    from hipobj_server import IDENTITIES

    return IDENTITIES[0]


@pytest.fixture(scope="session")
def s3(server):
    return server.client()


@pytest.fixture
def bucket(s3):
    name = "nixl-" + secrets.token_hex(4)
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture
def params(server, identity, devices):
    """HIPOBJ's parameters for a bucket: def params(bucket, **extra)."""

    def make(bucket: str, **extra: str):
        return nixl_env.hipobj_params(server.endpoint, bucket, identity[0], identity[1], devices[0], **extra)

    return make


def pytest_report_header(config):
    return f"plugin {nixl_env.PLUGIN}, devices {os.environ.get('HIPOBJ_VM_DEVICES', '')}"
