"""Fixtures of the Python lane tests: a hipobj-server with RDMA on the lane's second device, a
boto3 client for it, and an open hipobj.Session on the first device."""

from __future__ import annotations

import os
import secrets

import pytest

import hipobj
from hipobj_server import Server, device_address, device_pair


@pytest.fixture(scope="session")
def devices():
    return device_pair()


@pytest.fixture(scope="session")
def server(devices):
    _, server_dev = devices
    srv = Server(server_dev, device_address(server_dev))
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def client(server):
    return server.client()


@pytest.fixture(scope="session")
def bucket(client):
    name = "py-" + secrets.token_hex(4)
    client.create_bucket(Bucket=name)
    return name


@pytest.fixture(scope="module")
def session(devices):
    client_dev, _ = devices
    with hipobj.Session(nic=client_dev, transport="rdma") as s:
        yield s


def pattern(size: int, seed: int) -> bytes:
    """Reproducible bytes (never all one value)."""
    import numpy as np

    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()


@pytest.fixture
def data():
    return pattern


def pytest_report_header(config):
    return f"hipobj {hipobj.__version__}, devices {os.environ.get('HIPOBJ_VM_DEVICES', '')}"
