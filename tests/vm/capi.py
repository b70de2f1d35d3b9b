"""hipObject's C API (libhipobj.so) through ctypes, as an application with its own S3 client
(boto3 at its defaults) drives it: the lane tests' one binding (tests/vm/boto3_capi.py,
tests/vm/gid_forms.py). HIPOBJ_LIB names the library; ENDPOINT is set by the caller."""

import ctypes
import os
import threading

from botocore.exceptions import ClientError

import boto3

ENDPOINT = None

lib = ctypes.CDLL(os.environ.get("HIPOBJ_LIB", "target/release/libhipobj.so"))


class Error(ctypes.Structure):
    _fields_ = [("opError", ctypes.c_int), ("hipError", ctypes.c_int)]


SEND = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t)
RECV = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_char), ctypes.POINTER(ctypes.c_size_t))


class Ops(ctypes.Structure):
    _fields_ = [("sendRequest", SEND), ("recvReply", RECV)]


class Config(ctypes.Structure):
    _fields_ = [
        ("endpoint", ctypes.c_char_p),
        ("region", ctypes.c_char_p),
        ("accessKey", ctypes.c_char_p),
        ("secretKey", ctypes.c_char_p),
        ("flags", ctypes.c_uint32),
        ("gpuDevice", ctypes.c_int),
        ("nicHint", ctypes.c_char_p),
    ]


for name in ("hipObjInit", "hipObjShutdown", "hipObjBufRegisterHost", "hipObjBufDeregister", "hipObjGet",
             "hipObjPut", "hipObjTokenClientNic", "hipObjRdmaChecksumCheck", "hipObjGetRdmaToken",
             "hipObjPutRdmaToken", "hipObjParseRdmaReply"):
    getattr(lib, name).restype = Error
lib.hipObjGetRdmaToken.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
lib.hipObjPutRdmaToken.argtypes = [ctypes.c_char_p]
lib.hipObjParseRdmaReply.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_int)]
lib.hipObjGetErrorString.restype = ctypes.c_char_p
lib.hipObjGet.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long, ctypes.POINTER(Ops), ctypes.c_void_p]
lib.hipObjPut.argtypes = lib.hipObjGet.argtypes
lib.hipObjBufRegisterHost.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
lib.hipObjBufDeregister.argtypes = [ctypes.c_void_p]
lib.hipObjRdmaChecksumCheck.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p,
                                        ctypes.POINTER(ctypes.c_int), ctypes.c_char_p, ctypes.c_size_t]
SUCCESS, BUSY = 0, 12
OP_PUT, OP_GET = 0, 1
VERIFIED, MISMATCH, UNCHECKED = 0, 1, 2

passed = failed = 0
counts = {"verified": 0, "unchecked": 0}


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
    print(("PASS: " if ok else "FAIL: ") + what, flush=True)
    return ok


def summary():
    """The closing line, and the exit status: 1 when any check failed."""
    print(f"{passed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


def run(main):
    """Run an application's `main`: a crash is a failed check, never a pass; exits with
    `summary`'s status."""
    try:
        main()
    except Exception as exc:
        import traceback

        traceback.print_exc()
        check(False, f"the application raised {exc!r}")
    raise SystemExit(summary())


def err_name(e):
    return lib.hipObjGetErrorString(e.opError).decode()


# --- the application's S3 client: boto3 at its defaults, one per source address -----------------
_clients = {}
_clients_lock = threading.Lock()


def client_from(address):
    """A boto3 client whose connections leave from `address` (the token's NIC: the server takes
    a token only from the address its GID names). urllib3's source_address pool option is the
    one knob; everything else is boto3's default."""
    with _clients_lock:
        c = _clients.get(address)
        if c is None:
            c = boto3.client("s3", endpoint_url=ENDPOINT, region_name="us-east-1")
            if address:
                c._endpoint.http_session._manager.connection_pool_kw["source_address"] = (address, 0)
            c.meta.events.register("before-sign.s3", _add_token)
            _clients[address] = c
        return c


_outgoing = threading.local()


def _add_token(request, **_):
    token = getattr(_outgoing, "token", None)
    if token is not None:
        request.headers["x-amz-rdma-token"] = token


class Call:
    """One hipObjGet/hipObjPut: the S3 operation its callbacks send, and what the answer said."""

    def __init__(self, operation, **params):
        self.operation, self.params = operation, params
        self.reply = None
        self.headers = {}
        self.raised = None
        self.on_send = None  # a hook the Busy check uses to hold the transfer inside its callback
        self.source = None  # the address to send from; None: the token's NIC (hipObjTokenClientNic)
        self.status = None

    def send(self, token):
        nic = ctypes.create_string_buffer(64)
        lib.hipObjTokenClientNic(token, nic, 64)
        client = client_from(self.source if self.source is not None else nic.value.decode())
        if self.on_send:
            self.on_send()
        _outgoing.token = token.decode()
        try:
            answer = getattr(client, self.operation)(**self.params)
            if "Body" in answer:
                answer["Body"].read()
            meta = answer["ResponseMetadata"]
        except ClientError as e:
            meta = e.response.get("ResponseMetadata", {})
        except Exception as e:  # botocore's own checks (a checksum it validated), connection errors
            self.raised = e
            return -1
        finally:
            _outgoing.token = None
        self.headers = {k.lower(): v for k, v in meta.get("HTTPHeaders", {}).items()}
        self.status = meta.get("HTTPStatusCode")
        self.reply = self.headers.get("x-amz-rdma-reply")
        return 0 if self.reply is not None else -1

    def recv(self, out, out_len):
        data = (self.reply or "").encode()
        if self.reply is None or len(data) > out_len[0]:
            return -1
        ctypes.memmove(out, data, len(data))
        out_len[0] = len(data)
        return 0


_calls = {}


@SEND
def send_request(ctx, token, _len):
    return _calls[ctx].send(token)


@RECV
def recv_reply(ctx, out, out_len):
    return _calls[ctx].recv(out, out_len)


OPS = Ops(send_request, recv_reply)
_ids = iter(range(1, 1 << 30))
_ids_lock = threading.Lock()


def transfer(fn, buf, size, offset, call):
    with _ids_lock:
        ctx = next(_ids)
    _calls[ctx] = call
    try:
        return fn(None, ctypes.addressof(buf) + 0, size, offset, ctypes.byref(OPS), ctx)
    finally:
        del _calls[ctx]


class Buffer:
    """Host memory registered with hipObjBufRegisterHost."""

    def __init__(self, size):
        self.mem = (ctypes.c_char * size)()
        self.size = size
        e = lib.hipObjBufRegisterHost(self.mem, size)
        if e.opError != SUCCESS:
            raise RuntimeError(f"hipObjBufRegisterHost: {err_name(e)}")

    def fill(self, data):
        ctypes.memmove(self.mem, data, len(data))

    def bytes(self, n=None, at=0):
        return ctypes.string_at(ctypes.addressof(self.mem) + at, self.size if n is None else n)

    def close(self):
        lib.hipObjBufDeregister(self.mem)


