"""The HIPOBJ plugin as a NIXL user drives it (nixl_agent, create_backend, register_memory,
get_xfer_descs, initialize_xfer, transfer, check_xfer_state, release_xfer_handle), against
hipobj-server over real verbs in the lane (tests/vm/nixl), with NIXL's own OBJ plugin from the
wheel as the peer on the same server (plain HTTP, SigV4, aws-chunked uploads).

Counts: HIPOBJ_NIXL_BLOCKS (default 2048) blocks of 256 KiB in batches of 64 for the KV pattern of
each plugin; HIPOBJ_NIXL_CROSS (default 512) blocks each way for the cross reads.
"""

from __future__ import annotations

import base64
import os

import numpy as np
import pytest
from awscrt import checksums

import nixl_env
from nixl_env import KiB, MiB, KvStore, block, delta, make_agent, peer, stats

BLOCKS = int(os.environ.get("HIPOBJ_NIXL_BLOCKS", "2048"))
CROSS = int(os.environ.get("HIPOBJ_NIXL_CROSS", "512"))
SIZE, BATCH = 256 * KiB, 64


def crc64nvme(data: np.ndarray) -> str:
    return base64.b64encode(checksums.crc64nvme(data.tobytes()).to_bytes(8, "big")).decode()


def batches(count: int, prefix: str):
    for start in range(0, count, BATCH):
        ids = list(range(start, min(start + BATCH, count)))
        yield ids, [f"{prefix}{i}" for i in ids]


def test_kv_blocks_through_hipobj(params, bucket, s3):
    """2,048 KV blocks of 256 KiB written to objects and read back in batches of 64: bytes equal,
    each object's stored CRC64NVME is the block's, every GET checked the landed bytes, and the
    counters show RDMA moved every block."""
    agent = make_agent("kv-hipobj", "HIPOBJ", params(bucket))
    store = KvStore(agent, "HIPOBJ", BATCH, SIZE, BATCH)
    before = stats()
    crcs = {}
    for ids, keys in batches(BLOCKS, "kv-"):
        for n, i in enumerate(ids):
            store.slot(n)[:] = block(i, SIZE)
            crcs[keys[n]] = crc64nvme(store.slot(n))
        store.move("WRITE", keys)
    differ = []
    for ids, keys in batches(BLOCKS, "kv-"):
        store.pool[:] = 0
        store.move("READ", keys)
        differ += [keys[n] for n, i in enumerate(ids) if not (store.slot(n) == block(i, SIZE)).all()]
    moved = delta(stats(), before)
    store.close()
    print(f"\nHIPOBJ KV pattern: {BLOCKS} blocks of {SIZE // KiB} KiB each way, counters {moved}")
    assert differ == []
    wrong_crc = [k for k, want in crcs.items()
                 if s3.head_object(Bucket=bucket, Key=k, ChecksumMode="ENABLED").get("ChecksumCRC64NVME") != want]
    assert wrong_crc == []
    assert moved["puts"] == BLOCKS and moved["gets"] == BLOCKS and moved["failed"] == 0
    assert moved["verified"] == BLOCKS, "every whole-object GET checks the landed bytes"
    assert moved["rdmaV1"] + moved["rdmaV2"] == 2 * BLOCKS and moved["http"] == 0
    assert moved["bytes"] == 2 * BLOCKS * SIZE


def test_obj_plugin_peer_and_cross_reads(server, identity, params, bucket, s3):
    """NIXL's OBJ plugin, unchanged, writes and reads the same pattern on the same server; its
    uploads (aws-chunked, trailing checksum) are served back without aws-chunked; HIPOBJ reads what
    OBJ wrote and OBJ reads what HIPOBJ wrote, bytes equal."""
    common = ["--backend", "OBJ", "--endpoint", server.endpoint, "--bucket", bucket,
              "--access", identity[0], "--size", str(SIZE), "--batch", str(BATCH)]
    wrote = peer(common + ["write", "obj-", "0", str(BLOCKS)], identity[1])
    read = peer(common + ["read", "obj-", "0", str(BLOCKS)], identity[1])
    print(f"\nOBJ plugin: wrote {wrote['blocks']} in {wrote['seconds']:.1f} s, read {read['blocks']} "
          f"in {read['seconds']:.1f} s, {read['differ']} differ")
    assert read["differ"] == 0 and read["blocks"] == BLOCKS

    head = s3.head_object(Bucket=bucket, Key="obj-0")
    got = s3.get_object(Bucket=bucket, Key="obj-0")
    assert "ContentEncoding" not in head, head.get("ContentEncoding")
    assert "ContentEncoding" not in got, got.get("ContentEncoding")
    assert got["Body"].read() == block(0, SIZE).tobytes()

    agent = make_agent("cross-hipobj", "HIPOBJ", params(bucket))
    store = KvStore(agent, "HIPOBJ", BATCH, SIZE, BATCH)
    before = stats()
    differ = []
    for ids, keys in batches(CROSS, "obj-"):  # OBJ wrote them, HIPOBJ reads
        store.pool[:] = 0
        store.move("READ", keys)
        differ += [keys[n] for n, i in enumerate(ids) if not (store.slot(n) == block(i, SIZE)).all()]
    for ids, keys in batches(CROSS, "hip-"):  # HIPOBJ writes, OBJ reads below
        for n, i in enumerate(ids):
            store.slot(n)[:] = block(i, SIZE)
        store.move("WRITE", keys)
    moved = delta(stats(), before)
    store.close()
    print(f"HIPOBJ read {CROSS} objects OBJ wrote and wrote {CROSS} for OBJ: counters {moved}")
    assert differ == []
    assert moved["gets"] == CROSS and moved["puts"] == CROSS and moved["failed"] == 0
    assert moved["verified"] == CROSS, "OBJ's uploads keep a checksum the GETs check"
    back = peer(common + ["read", "hip-", "0", str(CROSS)], identity[1])
    assert back["differ"] == 0 and back["blocks"] == CROSS


def test_release_in_flight_leaves_the_buffer_alone(params, bucket):
    """release_xfer_handle of a READ still in flight cancels it; afterwards its DRAM buffer is
    never written again (a canary written right after release survives a whole later transfer of
    the same objects), and the buffer deregisters at once (no operation holds it)."""
    count, size = 64, 1 * MiB
    agent = make_agent("release", "HIPOBJ", params(bucket, depth="64"))
    source = KvStore(agent, "HIPOBJ", count, size, count)
    keys = [f"rel-{i}" for i in range(count)]
    for n in range(count):
        source.slot(n)[:] = block(10_000 + n, size)
    source.move("WRITE", keys)

    victim = KvStore(agent, "HIPOBJ", count, size, count)
    before = stats()
    handle = victim.start("READ", keys)
    agent.release_xfer_handle(handle)  # in flight: cancels, returns once no worker holds the buffer
    victim.pool[:] = 0xA5
    moved = delta(stats(), before)

    source.pool[:] = 0
    source.move("READ", keys)  # the same objects again, through the same queue, to the end
    assert all((source.slot(n) == block(10_000 + n, size)).all() for n in range(count))
    victim.close()  # deregisters: refused (hipObjBusy) if an operation still held the region
    assert (victim.pool == 0xA5).all(), "a released request wrote its buffer after release"
    print(f"\nreleased in flight: {moved}")
    assert moved["cancelled"] >= 1, "the release found nothing in flight: the test proves nothing"
    source.close()


def test_wrong_settings_fail_create_backend_and_write_nothing(server, identity, params, bucket, s3, capfd):
    """A wrong endpoint, wrong keys or a missing bucket: create_backend fails with NIXL's error and
    the plugin's message naming the cause; nothing is written."""
    host = server.address.rsplit(":", 1)[0]
    nixl_agent, nixl_agent_config = nixl_env.nixl_api()
    cases = [
        (params(bucket, endpoint_override=f"http://{host}:1"),
         f"bucket '{bucket}' at http://{host}:1: no reply"),
        (params(bucket, secret_key="not-the-secret"),
         f"bucket '{bucket}' at {server.endpoint}: HTTP 403 (check the access and secret key)"),
        (params(bucket + "-missing"),
         f"bucket '{bucket}-missing' at {server.endpoint}: HTTP 404 (no such bucket)"),
    ]
    for n, (given, message) in enumerate(cases):
        agent = nixl_agent(f"bad-{n}", nixl_agent_config(enable_prog_thread=False, backends=[]))
        with pytest.raises(Exception) as err:
            agent.create_backend("HIPOBJ", given)
        assert str(err.value) == "NIXL_ERR_BACKEND"
        assert f"hipObject: {message}" in capfd.readouterr().err
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    assert bucket + "-missing" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]


def test_first_transfer_of_a_missing_object_fails_with_its_cause(params, bucket, capfd):
    agent = make_agent("missing", "HIPOBJ", params(bucket))
    store = KvStore(agent, "HIPOBJ", 1, SIZE, 1)
    handle = store.start("READ", ["no-such-key"])
    assert store.wait(handle) == "ERR"
    agent.release_xfer_handle(handle)
    store.close()
    err = capfd.readouterr().err
    assert f"hipObject: GET '{bucket}/no-such-key' at " in err and "HTTP 404 NoSuchKey" in err, err


def test_query_memory_heads_objects(params, bucket, s3):
    s3.put_object(Bucket=bucket, Key="present", Body=b"x" * 1234)
    agent = make_agent("query", "HIPOBJ", params(bucket))
    got = agent.query_memory([(0, 0, 0, "present"), (0, 0, 0, "absent")], "HIPOBJ", mem_type="OBJ")
    assert got == [{"size": "1234"}, None]


def test_two_agents_share_one_hipobject(params, bucket):
    """Two agents, a HIPOBJ backend each, in one process: hipObject is initialised once and a
    region registered by both is one registration with two uses."""
    a = make_agent("share-a", "HIPOBJ", params(bucket))
    b = make_agent("share-b", "HIPOBJ", params(bucket))
    sa = KvStore(a, "HIPOBJ", 4, SIZE, 4)
    sb_reg = b.register_memory([(sa.addr, 4 * SIZE, 0, "")], "DRAM", backends=["HIPOBJ"])
    for n in range(4):
        sa.slot(n)[:] = block(500 + n, SIZE)
    sa.move("WRITE", [f"share-{n}" for n in range(4)])
    b.deregister_memory(sb_reg, backends=["HIPOBJ"])  # a's registration stays
    sa.pool[:] = 0
    sa.move("READ", [f"share-{n}" for n in range(4)])
    assert all((sa.slot(n) == block(500 + n, SIZE)).all() for n in range(4))
    sa.close()
