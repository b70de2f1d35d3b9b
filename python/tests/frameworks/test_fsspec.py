"""hipobj.fsspec (issue 38): pandas and pyarrow read and write through the hipobj:// protocol,
each read and write on the path the Session's transport decision picks (RDMA here: the lane's
Session is transport "rdma"), counted in its stats."""

from __future__ import annotations

import io

import fsspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from hipobj.fsspec import HipObjFileSystem


def frame(rows: int, seed: int, first: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "id": np.arange(first, first + rows, dtype=np.int64),
            "x": rng.standard_normal(rows),
            "y": rng.integers(0, 1 << 30, rows),
            "tag": rng.choice(["alpha", "beta", "gamma"], rows),
        }
    )


def parquet_bytes(df: pd.DataFrame) -> bytes:
    out = io.BytesIO()
    df.to_parquet(out, engine="pyarrow", compression=None, row_group_size=len(df) // 4)
    return out.getvalue()


def options(server) -> dict:
    from hipobj_server import IDENTITIES

    access, secret = IDENTITIES[0]
    return {"endpoint_url": server.endpoint, "key": access, "secret": secret}


def test_protocol_registered_by_entry_point():
    assert fsspec.get_filesystem_class("hipobj") is HipObjFileSystem


def test_pandas_read_parquet_bytes_equal(session, server, client, bucket):
    df = frame(300_000, 1)  # about 9 MiB of parquet: its column chunks come by RDMA
    blob = parquet_bytes(df)
    client.put_object(Bucket=bucket, Key="fs/a.parquet", Body=blob)
    fs = HipObjFileSystem(client=client, session=session)
    assert fs.cat_file(f"{bucket}/fs/a.parquet") == blob
    assert (fs.checked["verified"], fs.checked["unchecked"]) == (1, 0), fs.checked  # the whole object: checked
    got = pd.read_parquet(f"hipobj://{bucket}/fs/a.parquet", storage_options={**options(server), "session": session})
    pd.testing.assert_frame_equal(got, df)
    assert fs.moved["rdma"] >= len(blob)


def test_pandas_writes_and_pyarrow_dataset_reads(session, client, bucket):
    fs = HipObjFileSystem(client=client, session=session)
    parts = [frame(120_000, s, first=s * 1_000_000) for s in (2, 3, 4)]
    for i, df in enumerate(parts):
        with fs.open(f"{bucket}/fs/ds/part-{i}.parquet", "wb") as f:
            df.to_parquet(f, engine="pyarrow", compression=None)
    assert fs.moved["rdma"] > 0
    for i, df in enumerate(parts):  # what landed is what pandas wrote
        local = io.BytesIO()
        df.to_parquet(local, engine="pyarrow", compression=None)
        assert client.get_object(Bucket=bucket, Key=f"fs/ds/part-{i}.parquet")["Body"].read() == local.getvalue()
    arrow_fs = pafs.PyFileSystem(pafs.FSSpecHandler(fs))
    table = ds.dataset(f"{bucket}/fs/ds", filesystem=arrow_fs, format="parquet").to_table()
    want = pa.Table.from_pandas(pd.concat(parts, ignore_index=True), preserve_index=False)
    assert table.sort_by("id").equals(want.sort_by("id"))
    assert sorted(fs.ls(f"{bucket}/fs/ds", detail=False)) == [f"{bucket}/fs/ds/part-{i}.parquet" for i in range(3)]


def test_each_copy_takes_the_path_the_decision_picks(session, client, bucket):
    """The filesystem's transport names each copy's path (the Session's "rdma" by default here),
    small copies included, and the Session's counters record every one."""
    client.put_object(Bucket=bucket, Key="fs/small", Body=b"0123456789" * 100)
    before = session.stats()
    over_http = HipObjFileSystem(client=client, session=session, transport="http")
    assert over_http.cat_file(f"{bucket}/fs/small", start=10, end=30) == b"01234567890123456789"
    assert over_http.moved == {"rdma": 0, "http": 20}
    by_rdma = HipObjFileSystem(client=client, session=session)
    assert by_rdma.cat_file(f"{bucket}/fs/small", start=10, end=30) == b"01234567890123456789"
    assert by_rdma.moved == {"rdma": 20, "http": 0}
    after = session.stats()
    for path in ("rdma", "http"):
        assert after[path]["transfers"] - before[path]["transfers"] == 1, (before, after)
        assert after[path]["bytes"] - before[path]["bytes"] == 20, (before, after)
