"""The Python package against hipobj-server over https (issue 23): the application's boto3 client
verifies the server's certificate as usual (botocore), the bytes move over RDMA, and a client that
trusts another CA is refused with an error that names the certificate."""

from __future__ import annotations

import subprocess

import boto3
import numpy as np
import pytest
from botocore.config import Config

import hipobj
from hipobj_server import IDENTITIES, Server, device_address


def make_ca(d, name: str):
    key, cert = d / f"{name}.key", d / f"{name}.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                    f"/CN={name}", "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return key, cert


def server_cert(d, ca, ip: str):
    ca_key, ca_cert = ca
    key, csr, cert, ext = d / "srv.key", d / "srv.csr", d / "srv.pem", d / "srv.ext"
    ext.write_text(f"subjectAltName=IP:{ip}\n")
    subprocess.run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={ip}", "-keyout", str(key),
                    "-out", str(csr)], check=True, capture_output=True)
    subprocess.run(["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca_cert), "-CAkey", str(ca_key),
                    "-CAcreateserial", "-days", "2", "-extfile", str(ext), "-out", str(cert)],
                   check=True, capture_output=True)
    return key, cert


def https_client(endpoint: str, ca):
    access, secret = IDENTITIES[0]
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=access, aws_secret_access_key=secret,
                        region_name="us-east-1", verify=str(ca),
                        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1, "mode": "standard"}))


def test_rdma_over_an_https_endpoint(devices, tmp_path):
    client_dev, server_dev = devices
    ip = device_address(server_dev)
    ca = make_ca(tmp_path, "test-ca")
    key, cert = server_cert(tmp_path, ca, ip)
    server = Server(server_dev, ip, extra=["--tls-cert", str(cert), "--tls-key", str(key)])
    try:
        endpoint = f"https://{server.address}"
        client = https_client(endpoint, ca[1])
        client.create_bucket(Bucket="tls-bucket")
        src = np.random.default_rng(23).integers(0, 256, 3 << 20, dtype=np.uint8)
        dst = np.zeros_like(src)
        with hipobj.Session(nic=client_dev) as session:
            with session.register(src) as s, session.register(dst) as d:
                put = session.put_object(client, "tls-bucket", "obj", from_=s)
                got = session.get_object(client, "tls-bucket", "obj", into=d)
                assert put.via == "rdma" and got.via == "rdma" and got.size == src.size
                assert np.array_equal(src, dst)
                # another CA: botocore refuses the server's certificate, and so does the transfer
                other = make_ca(tmp_path, "other-ca")
                stranger = https_client(endpoint, other[1])
                with pytest.raises(Exception) as refused:
                    session.get_object(stranger, "tls-bucket", "obj", into=d)
                assert "certificate" in str(refused.value).lower() or "ssl" in str(refused.value).lower(), refused.value
    finally:
        server.stop()
