"""An application with its own S3 client, as hipObject's seed API intends it to be used: boto3 at
its default settings (SigV4, request checksums, response checksum validation, retries) drives
hipObjGet/hipObjPut of libhipobj.so through its own callbacks (ctypes), and checks what each
whole-object GET landed with hipObjRdmaChecksumCheck against the reply's x-amz-rdma-checksum
(docs/protocol.md section 16). It uses nothing of the hipobj Python package.

    boto3_capi.py ENDPOINT DATA_DIR          (env: HIPOBJ_LIB, HIPOBJ_NIC, AWS_ACCESS_KEY_ID, ...)

DATA_DIR is the server's --data-dir (the rot check changes one stored byte in place). Prints one
PASS/FAIL line per check and, last, "N passed, N failed"; exits 1 when any check failed.
"""

import base64
import ctypes
import hashlib
import os
import sys
import threading
import zlib

import boto3

import capi
from capi import BUSY, SUCCESS, UNCHECKED, VERIFIED, Buffer, Call, Config, check, counts, err_name, lib, transfer

ENDPOINT, DATA_DIR = sys.argv[1], sys.argv[2]
capi.ENDPOINT = ENDPOINT
BUCKET = "capi"
MIB = 1 << 20

def put(buf, key, size, **extra):
    call = Call("put_object", Bucket=BUCKET, Key=key, Body=b"", **extra)
    return transfer(lib.hipObjPut, buf.mem, size, 0, call), call


def get(buf, key, size, **extra):
    call = Call("get_object", Bucket=BUCKET, Key=key, **extra)
    return transfer(lib.hipObjGet, buf.mem, size, 0, call), call


def landed_check(buf, size, call):
    """(status, message) of the landed bytes against the reply's x-amz-rdma-checksum; None
    when the reply names none (a range, or nothing stored)."""
    value = call.headers.get("x-amz-rdma-checksum")
    if value is None:
        counts["unchecked"] += 1
        return None
    status = ctypes.c_int(-1)
    message = ctypes.create_string_buffer(256)
    e = lib.hipObjRdmaChecksumCheck(buf.mem, size, value.encode(), ctypes.byref(status), message, 256)
    assert e.opError == SUCCESS, err_name(e)
    if status.value == VERIFIED:
        counts["verified"] += 1
    return status.value, message.value.decode()


def checked_get(buf, key, size, **extra):
    """A GET whose landed bytes are checked: read again once on a mismatch, then a failure that
    names the algorithm and both values. (ok, what happened)."""
    for attempt in (1, 2):
        e, call = get(buf, key, size, **extra)
        if e.opError != SUCCESS:
            return False, f"hipObjGet: {err_name(e)} ({call.raised or call.reply})"
        sdk_checked = sorted(h for h in call.headers if h.startswith("x-amz-checksum-"))
        if sdk_checked:
            return False, f"the token reply carries {sdk_checked}"
        found = landed_check(buf, size, call)
        if found is None:
            return True, "unchecked (no x-amz-rdma-checksum)"
        status, message = found
        if status == VERIFIED:
            return True, message
        if status == UNCHECKED:
            return True, message
        if attempt == 2:
            return False, message
    raise AssertionError("unreachable")


def pattern(n, seed):
    block = hashlib.sha256(f"{seed}".encode()).digest() * 2048  # 64 KiB
    return (block * (n // len(block) + 1))[:n]


def main():
    config = Config(None, None, None, None, 0, -1, os.environ.get("HIPOBJ_NIC", "").encode() or None)
    e = lib.hipObjInit(ctypes.byref(config))
    if not check(e.opError == SUCCESS, f"hipObjInit: {err_name(e)}"):
        return
    plain = boto3.client("s3", endpoint_url=ENDPOINT, region_name="us-east-1")
    plain.create_bucket(Bucket=BUCKET)
    buf = Buffer(8 * MIB)

    # 1. PUT by RDMA with the SDK's default checksum headers (CRC32 of the empty body, which the
    #    server replaces by the CRC32 of the moved bytes) and with each algorithm named, then a
    #    whole-object GET by RDMA: boto3 validates nothing of an empty body, the library checks
    #    the landed bytes against x-amz-rdma-checksum.
    for i, algorithm in enumerate([None, "CRC32", "CRC32C", "CRC64NVME", "SHA256"]):
        size = 3 * MIB + 1000 * i
        data = pattern(size, i)
        key = f"algo-{algorithm or 'default'}"
        buf.fill(data)
        extra = {"ChecksumAlgorithm": algorithm} if algorithm else {}
        e, call = put(buf, key, size, **extra)
        check(e.opError == SUCCESS, f"RDMA PUT {key} ({size} B): {err_name(e)} {call.raised or ''}")
        head = plain.head_object(Bucket=BUCKET, Key=key, ChecksumMode="ENABLED")
        stored = [k[len("Checksum"):] for k in head if k.startswith("Checksum") and k != "ChecksumType"]
        want = algorithm or "CRC32"
        check(stored == [want], f"{key}: stored {stored}, the PUT's {want}")
        buf.fill(b"\0" * size)
        ok, what = checked_get(buf, key, size)
        check(ok and what == f"{want} verified" and buf.bytes(size) == data, f"RDMA GET {key}: {what}")

    # 2. An 8 MiB object PUT over plain HTTP by boto3 (its default CRC32), GET whole by RDMA.
    data = pattern(8 * MIB, 99)
    plain.put_object(Bucket=BUCKET, Key="http-8m", Body=data)
    ok, what = checked_get(buf, "http-8m", 8 * MIB)
    check(ok and what.endswith(" verified") and buf.bytes() == data, f"RDMA GET of an 8 MiB object PUT over HTTP: {what}")

    # 3. Plain S3 unaffected: a plain GET and HEAD with boto3's own validation (awscrt for CRC64NVME).
    got = plain.get_object(Bucket=BUCKET, Key="algo-CRC64NVME")
    body = got["Body"].read()
    check(body == pattern(3 * MIB + 3000, 3) and got.get("ChecksumCRC64NVME"),
          f"plain GET validated by boto3 ({got.get('ChecksumType')} CRC64NVME)")

    # 4. Multipart COMPOSITE CRC32C (over HTTP): the whole object is unchecked (a digest of the
    #    parts' digests), each part GET by RDMA (partNumber) is checked against its own value.
    parts = [pattern(5 * MIB, 41), pattern(1 * MIB + 7, 42)]
    up = plain.create_multipart_upload(Bucket=BUCKET, Key="mp", ChecksumAlgorithm="CRC32C")
    done = []
    for n, part in enumerate(parts, 1):
        r = plain.upload_part(Bucket=BUCKET, Key="mp", UploadId=up["UploadId"], PartNumber=n, Body=part,
                              ChecksumAlgorithm="CRC32C")
        done.append({"PartNumber": n, "ETag": r["ETag"], "ChecksumCRC32C": r["ChecksumCRC32C"]})
    plain.complete_multipart_upload(Bucket=BUCKET, Key="mp", UploadId=up["UploadId"],
                                    MultipartUpload={"Parts": done})
    whole = b"".join(parts)
    e, call = get(buf, "mp", len(whole))
    found = landed_check(buf, len(whole), call) if e.opError == SUCCESS else None
    check(e.opError == SUCCESS and buf.bytes(len(whole)) == whole and found is not None
          and found[0] == UNCHECKED and "COMPOSITE" in found[1],
          f"RDMA GET of a COMPOSITE multipart object: {err_name(e)}, {call.headers.get('x-amz-rdma-checksum')}: {found}")
    for n, part in enumerate(parts, 1):
        ok, what = checked_get(buf, "mp", len(part), PartNumber=n)
        check(ok and what == "CRC32C verified" and buf.bytes(len(part)) == part, f"RDMA GET of part {n}: {what}")

    # 5. A range: no checksum of its own, counted unchecked; the bytes are right.
    ok, what = checked_get(buf, "http-8m", 1000, Range="bytes=100-1099")
    check(ok and what.startswith("unchecked") and buf.bytes(1000) == data[100:1100], f"RDMA GET of a range: {what}")

    # 6. A byte rotted on the server's disk after its checksum was stored: the GET is read again
    #    once, then fails naming the algorithm and both values; never a success.
    rot = pattern(2 * MIB, 7)
    buf.fill(rot)
    e, _ = put(buf, "rot", len(rot))
    with open(os.path.join(DATA_DIR, BUCKET, "rot"), "r+b") as f:
        f.seek(MIB)
        f.write(bytes([rot[MIB] ^ 0x10]))
    ok, what = checked_get(buf, "rot", len(rot))
    stored_crc = base64.b64encode(zlib.crc32(rot).to_bytes(4, "big")).decode()
    check(not ok and "CRC32 mismatch" in what and stored_crc in what, f"a rotted byte fails the GET: {what}")

    # 7. 8 threads of PUT then GET, each byte-checked and verified.
    def worker(t, results):
        mine = Buffer(256 * 1024)
        try:
            for i in range(6):
                d = pattern(256 * 1024, 1000 + t * 10 + i)
                mine.fill(d)
                e, call = put(mine, f"t{t}-{i}", len(d))
                if e.opError != SUCCESS:
                    results.append(f"PUT t{t}-{i}: {err_name(e)} {call.raised or ''}")
                    continue
                mine.fill(b"\0" * len(d))
                ok, what = checked_get(mine, f"t{t}-{i}", len(d))
                if not (ok and what.endswith(" verified") and mine.bytes() == d):
                    results.append(f"GET t{t}-{i}: {what}")
        finally:
            mine.close()

    results = []
    threads = [threading.Thread(target=worker, args=(t, results)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(not results, f"8 threads x 6 PUT+GET of 256 KiB, each verified: {results[:3]}")

    # 8. Deregistering a buffer while a GET into it is inside its callback answers Busy; the GET
    #    then completes and is verified (ordered by events, no sleeps).
    inside, release = threading.Event(), threading.Event()
    busy = Buffer(4 * MIB)
    call = Call("get_object", Bucket=BUCKET, Key="algo-CRC64NVME")
    sent = []

    def hold():
        if not sent:
            sent.append(1)
            inside.set()
            release.wait(60)

    call.on_send = hold
    box = {}
    runner = threading.Thread(target=lambda: box.update(e=transfer(lib.hipObjGet, busy.mem, 3 * MIB + 3000, 0, call)))
    runner.start()
    inside.wait(60)
    d = lib.hipObjBufDeregister(busy.mem)
    release.set()
    runner.join()
    found = landed_check(busy, 3 * MIB + 3000, call)
    check(d.opError == BUSY and box["e"].opError == SUCCESS and found is not None and found[0] == VERIFIED,
          f"deregister during a GET: {err_name(d)}; the GET: {err_name(box['e'])}, {found}")
    busy.close()

    buf.close()
    print(f"checksums: {counts['verified']} verified, {counts['unchecked']} unchecked", flush=True)
    e = lib.hipObjShutdown()
    check(e.opError == SUCCESS, f"hipObjShutdown: {err_name(e)}")


capi.run(main)
