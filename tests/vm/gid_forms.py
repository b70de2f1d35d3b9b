"""Rule 9.4 for every GID form (issue 52, docs/protocol.md rule 9.4), on real verbs: a token whose
client GID is not the HTTP peer's address is refused (403) before any QP is touched, whatever
the GID's form, and the memory it names is never written; the token with the client's own GID
moves the object.

    gid_forms.py ENDPOINT            (env: HIPOBJ_LIB, HIPOBJ_NIC, AWS_ACCESS_KEY_ID, ...)

The application is boto3 at its defaults driving the C API (tests/vm/capi.py). Each token is the
library's own (hipObjGetRdmaToken, of a paired connection) with only its GID bytes replaced, sent
from the client NIC's own address: what an attacker who can send signed requests from one host
could try, to aim the server's QP at another host's memory. Prints PASS/FAIL lines and
"N passed, N failed"; exits 1 when any check failed.
"""

import ctypes
import ipaddress
import sys

import boto3

import capi
from capi import OP_GET, SUCCESS, Buffer, Call, Config, check, err_name, lib

ENDPOINT = sys.argv[1]
capi.ENDPOINT = ENDPOINT
BUCKET, KEY, SIZE = "gids", "victim", 64 * 1024
CANARY = 0xA5

# The GID forms a token may name, none of them this client's: (label, address).
FOREIGN = [
    ("link-local", "fe80::5054:ff:fe12:3456"),
    ("IPv6 of another host", "2001:db8::77"),
    ("IPv4-mapped of another host", "::ffff:169.254.77.99"),
]


class Token:
    """A token of the library's for `buf` (GET): its memory window stays bound until `release`
    (hipObjPutRdmaToken), which comes only after the request that carries it was answered."""

    def __init__(self, buf):
        self.handle = ctypes.c_char_p()
        e = lib.hipObjGetRdmaToken(buf.mem, SIZE, OP_GET, ctypes.byref(self.handle))
        if e.opError != SUCCESS:
            raise RuntimeError(f"hipObjGetRdmaToken: {err_name(e)}")
        self.text = self.handle.value.decode()

    def release(self):
        lib.hipObjPutRdmaToken(self.handle)


def answered(buf, token_text_of, source):
    """Send a GET with a token of `buf` (its text passed through `token_text_of`), then release
    the token: (status, x-amz-rdma-reply)."""
    token = Token(buf)
    try:
        return send_get(token_text_of(token.text), source)
    finally:
        token.release()


def with_gid(token, address):
    """`token` with its GID (bytes 5..21 of 44, hex digits 10..42) replaced by `address`."""
    gid = ipaddress.IPv6Address(address).packed.hex()
    return token[:10] + gid + token[42:]


def send_get(token, source):
    """One GET with `token`, sent from `source`: (status, x-amz-rdma-reply)."""
    call = Call("get_object", Bucket=BUCKET, Key=KEY)
    call.source = source
    call.send(token.encode())
    return call.status, call.reply


def stats(client):
    """The server's counters (/_hipobj/stats, signed as any S3 request)."""
    import json

    return json.loads(client.get_object(Bucket="_hipobj", Key="stats")["Body"].read())


def main():
    nic = (ctypes.c_char * 64)()
    config = Config(None, None, None, None, 0, -1, capi.os.environ.get("HIPOBJ_NIC", "").encode() or None)
    e = lib.hipObjInit(ctypes.byref(config))
    if not check(e.opError == SUCCESS, f"hipObjInit: {err_name(e)}"):
        return
    plain = boto3.client("s3", endpoint_url=ENDPOINT, region_name="us-east-1")
    plain.create_bucket(Bucket=BUCKET)
    data = bytes((i * 7 + 3) % 251 for i in range(SIZE))
    plain.put_object(Bucket=BUCKET, Key=KEY, Body=data)
    buf = Buffer(SIZE)
    buf.fill(bytes([CANARY]) * SIZE)

    # Pair the token connection: the first token is unpaired (428 with the server's token),
    # which hipObjParseRdmaReply takes; the next token is of the paired connection.
    probe = Token(buf)
    lib.hipObjTokenClientNic(probe.text.encode(), nic, 64)
    probe.release()
    source = nic.value.decode()
    check(source != "", f"the client's token names its NIC's IPv4 address ({source})")
    status, reply = answered(buf, lambda t: t, source)
    code = ctypes.c_int(0)
    if reply is not None:
        lib.hipObjParseRdmaReply(reply.encode(), len(reply), ctypes.byref(code))
    check(status == 428 and code.value == 428, f"the first token pairs: HTTP {status}, reply {reply and reply[:4]}")
    before = stats(plain)

    for label, address in FOREIGN:
        status, reply = answered(buf, lambda t, a=address: with_gid(t, a), source)
        check(status == 403, f"a token naming a {label} GID ({address}): HTTP {status}, reply {reply}")
        check(buf.bytes() == bytes([CANARY]) * SIZE, f"after the {label} token the buffer is as it was")

    after = stats(plain)
    touched = {k: (before.get(k), after.get(k)) for k in ("pairings_created", "pairings_replaced", "work_requests",
                                                          "rdma_gets") if before.get(k) != after.get(k)}
    check(not touched and after.get("replies_403", 0) - before.get("replies_403", 0) == len(FOREIGN),
          f"the refusals touched no QP and no pairing (changed: {touched}), "
          f"403s counted {after.get('replies_403', 0) - before.get('replies_403', 0)}")

    # The client's own GID (IPv4-mapped: the form the lane's RoCE v2 devices give): accepted.
    status, reply = answered(buf, lambda t: t, source)
    check(status == 200 and buf.bytes() == data, f"the token with the client's own GID moves the object: HTTP {status}")
    buf.close()
    e = lib.hipObjShutdown()
    check(e.opError == SUCCESS, f"hipObjShutdown: {err_name(e)}")


capi.run(main)
