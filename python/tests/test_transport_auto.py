"""transport="auto" over real verbs (issue 39): a fresh Session's decision starts RDMA from 1 MiB up
and plain HTTP below (the default start), moves the bytes by the path it picked, and counts them."""

from __future__ import annotations

import hipobj
from conftest import pattern


def test_auto_default_start_and_stats(devices, client, bucket):
    data = pattern(4 << 20, 39)
    with hipobj.Session(nic=devices[0], transport="auto") as s:  # the lane exports rdma: the argument wins
        assert s.transport == "auto" and s.nic == devices[0]
        put = s.put_object(client, bucket, "auto-large", from_=bytearray(data))
        dst = bytearray(len(data))
        got = s.get_object(client, bucket, "auto-large", into=dst)
        head = bytearray(4096)
        small = s.get_object(client, bucket, "auto-large", into=head, range=(0, 4095))
        stats = s.stats()
    assert (put.via, put.reason, got.via, got.reason) == ("rdma", "default start", "rdma", "default start")
    assert (small.via, small.reason, small.size) == ("http", "default start", 4096)
    assert dst == data and head == data[:4096]
    assert stats == {
        "rdma": {"transfers": 2, "bytes": 2 * len(data), "by_reason": {"default start": 2}},
        "http": {"transfers": 1, "bytes": 4096, "by_reason": {"default start": 1}},
        "switches": 0,
    }
