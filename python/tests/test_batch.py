"""hipobj.Batch over real verbs (docs/batch.md): many GETs and PUTs from one thread through one
queue, as a scheduler (submit/poll), as a batch (run) and under asyncio (await get/put over the
eventfd), forced to RDMA and to plain HTTP; a cancelled await leaves its buffer alone; HEAD; bad
input refused with nothing queued."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import hipobj
from conftest import pattern

BLOCK = 256 << 10
BLOCKS = 32


def blocks(seed: int) -> np.ndarray:
    return np.frombuffer(b"".join(pattern(BLOCK, seed + i) for i in range(BLOCKS)), dtype=np.uint8).copy()


@pytest.mark.parametrize("transport,path", [("rdma", "rdma-v1"), ("http", "http")])
def test_a_batch_of_puts_and_gets_lands_every_byte_checked(session, client, bucket, transport, path):
    src, dst = blocks(1), np.zeros(BLOCK * BLOCKS, dtype=np.uint8)
    with session.register(src) as s, session.register(dst) as d, session.batch(client, 16, transport=transport) as b:
        keys = [f"batch-{transport}-{i}" for i in range(BLOCKS)]
        puts = b.run([("put", bucket, k, s, i * BLOCK, BLOCK, 0, None) for i, k in enumerate(keys)])
        assert [e.status for e in puts] == ["complete"] * BLOCKS, [e for e in puts if e.status != "complete"]
        gets = b.run([("get", bucket, k, d, i * BLOCK, BLOCK, 0, None) for i, k in enumerate(keys)])
        assert [e.status for e in gets] == ["complete"] * BLOCKS
        assert {e.path for e in puts + gets} == {path}
        # checked end to end over RDMA; over HTTP the queue reads ranges, for which S3 names no checksum
        assert [e.verified for e in gets] == [transport == "rdma"] * BLOCKS
        assert b.counters()[transport] == 2 * BLOCKS
    assert np.array_equal(src, dst)


def test_asyncio_gathers_more_awaits_than_the_depth(session, client, bucket):
    src, dst = blocks(2), np.zeros(BLOCK * BLOCKS, dtype=np.uint8)

    async def main(b: hipobj.Batch, s: hipobj.Registration, d: hipobj.Registration) -> None:
        puts = [b.put(bucket, f"aio-{i}", s, offset=i * BLOCK, size=BLOCK) for i in range(BLOCKS)]
        assert all(e.status == "complete" for e in await asyncio.gather(*puts))
        gets = [b.get(bucket, f"aio-{i}", d, offset=i * BLOCK, size=BLOCK) for i in range(BLOCKS)]
        events = await asyncio.gather(*gets)
        assert all(e.verified for e in events)

    with session.register(src) as s, session.register(dst) as d, session.batch(client, 8, transport="rdma") as b:
        asyncio.run(main(b, s, d))
    assert np.array_equal(src, dst)


def test_a_cancelled_await_leaves_its_buffer_alone(session, client, bucket):
    size = 8 << 20
    client.put_object(Bucket=bucket, Key="aio-big", Body=pattern(size, 3))
    dst = np.zeros(size * 4, dtype=np.uint8)

    async def main(b: hipobj.Batch, d: hipobj.Registration) -> None:
        tasks = [asyncio.create_task(b.get(bucket, "aio-big", d, offset=i * size, size=size)) for i in range(4)]
        await asyncio.sleep(0)  # the tasks submit
        for t in tasks[1:]:
            t.cancel()
        first = await tasks[0]
        assert first.status == "complete"
        for t in tasks[1:]:
            with pytest.raises(asyncio.CancelledError):
                await t

    with session.register(dst) as d, session.batch(client, 4, transport="rdma") as b:
        asyncio.run(main(b, d))
        # cancel returned for each, so nothing writes their regions from here on: a canary stays
        dst[size:] = 0xA5
        b.close()
    assert bytes(dst[:size]) == pattern(size, 3)
    assert (dst[size:] == 0xA5).all()


def test_head_and_bad_input(session, client, bucket):
    client.put_object(Bucket=bucket, Key="head-me", Body=b"x" * 1234)
    buf = bytearray(4096)
    with session.register(buf) as reg, session.batch(client, 2) as b:
        assert b.head(bucket, "head-me") == (200, 1234)
        assert b.head(bucket) == (200, 0)
        with pytest.raises(hipobj.S3Error, match="404"):
            b.head(bucket, "no-such-key")
        with pytest.raises(hipobj.InvalidValueError):
            b.submit_get(bucket, "head-me", buf)  # not a Registration
        with pytest.raises(hipobj.InvalidValueError):
            b.submit([("delete", bucket, "head-me", reg, 0, 10, 0, None)])
        with pytest.raises(hipobj.InvalidValueError):
            b.submit_get(bucket, "head-me", reg, offset=4000, size=200)  # past the buffer
        with pytest.raises(hipobj.InvalidValueError):
            b.submit_put(bucket, "", reg)
        assert b.poll(0, 4, 0) == []
        assert bytes(buf) == bytes(4096)
    with pytest.raises(hipobj.InvalidValueError):
        session.batch(client, 2, transport="carrier-pigeon")
