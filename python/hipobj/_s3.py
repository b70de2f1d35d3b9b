"""boto3 glue: the token goes in through botocore's ``before-sign`` event (so SigV4 signs it), the
reply comes back in the response headers, and the client's HTTP connections leave from the RDMA
NIC's address (the server checks that the request's peer address is the token's GID)."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional, Tuple

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.exceptions import ClientError

from . import _core

TOKEN_HEADER = "x-amz-rdma-token"
REPLY_HEADER = "x-amz-rdma-reply"
BYTES_HEADER = "x-amz-rdma-bytes-transferred"
V2_ETAG_HEADER = "x-amz-rdma-etag"

# The token of the request this thread is sending now (a transfer's callbacks run on the thread
# that called get_object/put_object, so one slot per thread is enough).
_outgoing = threading.local()
_prepare_lock = threading.Lock()


def token_client_nic(token: str) -> str:
    """The client NIC address a token names (``hipObjTokenClientNic``): "" if its GID is not
    IPv4-mapped. Raises InvalidValueError for a malformed token."""
    return _core.token_client_nic(token)


class TokenResent(Exception):
    """botocore was about to send a token request again (its own retry). A token goes out once:
    the server may have moved bytes through its window or dropped its pairing after the first
    answer (docs/protocol.md 5.3, 5.5), so the library must see that answer and retry with a fresh
    token itself. ``first`` is what the first attempt got: botocore's caught exception, or the
    ClientError of its response."""

    def __init__(self, first: BaseException):
        super().__init__(f"botocore retried a token request after: {first}")
        self.first = first


@contextmanager
def token_on_thread(token: str) -> Iterator[None]:
    """This thread's next botocore request carries `token`, once."""
    _outgoing.token, _outgoing.signed, _outgoing.first, _outgoing.body = token, False, None, b""
    try:
        yield
    finally:
        _outgoing.token, _outgoing.signed, _outgoing.first, _outgoing.body = None, False, None, b""


def _add_token(request: Any, **_: Any) -> None:
    """botocore ``before-sign``: put this thread's token in, so that SigV4 signs it; raise
    TokenResent instead when botocore signs the same request again to retry it."""
    token = getattr(_outgoing, "token", None)
    if token is None:
        return
    if getattr(_outgoing, "signed", False):
        first = getattr(_outgoing, "first", None)
        raise TokenResent(first if first is not None else RuntimeError("an unknown answer"))
    _outgoing.signed = True
    # Integrity headers stay (docs/protocol.md rule 4.9): on a token PUT they describe the bytes RDMA
    # moves. The checksum botocore computes of the empty body by default is recognised as such by
    # the server, which then computes and stores that algorithm's checksum of the moved bytes; a
    # real checksum the caller gave is compared with them.
    request.headers[TOKEN_HEADER] = token
    # botocore's own response checks stay on: a token GET's answer carries no x-amz-checksum-*
    # for them (docs/protocol.md rule 16.1); the stored checksum comes in x-amz-rdma-checksum,
    # which hipObject checks against the bytes that landed.


def _note_answer(response: Any = None, caught_exception: Any = None, operation: Any = None, **_: Any) -> None:
    """botocore ``needs-retry``: keep what this thread's token request got, as the error to
    report if botocore then retries it (TokenResent), and the answer's body (the library reads
    the S3 error of it). Never asks for a retry itself."""
    if getattr(_outgoing, "token", None) is None:
        return None
    if caught_exception is not None:
        _outgoing.first = caught_exception
    elif response is not None:
        name = getattr(operation, "name", "request")
        _outgoing.first = ClientError(response[1], name)
        if getattr(response[0], "status_code", 200) >= 300:  # a 2xx's body is not read here
            _outgoing.body = response[0].content or b""
    return None


def bind_http_source(client: Any, address: Optional[str]) -> None:
    """Make `client`'s new HTTP connections leave from `address` (port chosen by the kernel);
    None: no binding. Existing idle connections are dropped. Uses botocore's URLLib3Session
    (``client._endpoint.http_session``): urllib3's ``source_address`` pool option."""
    session = client._endpoint.http_session
    source: Optional[Tuple[str, int]] = (address, 0) if address else None
    if getattr(session, "_hipobj_source", None) == source:
        return
    managers = [session._manager, *session._proxy_managers.values()]
    for manager in managers:
        if source is None:
            manager.connection_pool_kw.pop("source_address", None)
        else:
            manager.connection_pool_kw["source_address"] = source
        manager.clear()
    if not hasattr(session, "_hipobj_pool_kwargs"):
        session._hipobj_pool_kwargs = session._get_pool_manager_kwargs

        def pool_kwargs(**extra: Any) -> Dict[str, Any]:
            kwargs = session._hipobj_pool_kwargs(**extra)
            if session._hipobj_source is not None:
                kwargs["source_address"] = session._hipobj_source
            return kwargs

        session._get_pool_manager_kwargs = pool_kwargs  # proxy managers made later
    session._hipobj_source = source


def _token_source() -> Optional[Tuple[str, int]]:
    """The source address of this thread's token request: the NIC its token names (with several
    RDMA devices, each token's own; ``hipObjTokenClientNic``), None without a token."""
    token = getattr(_outgoing, "token", None) or getattr(_outgoing, "control_token", None)
    if not token:
        return None
    try:
        nic = token_client_nic(token)
    except _core.InvalidValueError:  # not a token of ours: the client's own binding stands
        return None
    return (nic, 0) if nic else None


def _bind_each_token(manager: Any) -> None:
    """Make `manager` (a urllib3 PoolManager of botocore's) send a thread's token request from
    the address of its token's NIC: urllib3 keys its pools by source address, so requests of
    different NICs never share a connection, and threads never see each other's choice."""
    if getattr(manager, "_hipobj_each_token", False):
        return
    original = manager.connection_from_url

    def connection_from_url(url: str, pool_kwargs: Optional[Dict[str, Any]] = None) -> Any:
        source = _token_source()
        if source is not None:
            pool_kwargs = dict(pool_kwargs or {}, source_address=source)
        return original(url, pool_kwargs=pool_kwargs)

    manager.connection_from_url = connection_from_url
    manager._hipobj_each_token = True


def prepare_client(client: Any, source_address: Optional[str]) -> None:
    """Install the token hook once per client and bind its HTTP source address."""
    with _prepare_lock:
        client.meta.events.register("before-sign.s3", _add_token, unique_id="hipobj-rdma-token")
        client.meta.events.register("needs-retry.s3", _note_answer, unique_id="hipobj-rdma-answer")
        bind_http_source(client, source_address)
        if source_address:
            session = client._endpoint.http_session
            for manager in [session._manager, *session._proxy_managers.values()]:
                _bind_each_token(manager)


def get_params(bucket: str, key: str, span: Optional[Tuple[int, int]]) -> Dict[str, Any]:
    """get_object parameters of a token GET: the range. No checksum mode: the server sends the
    stored checksum in x-amz-rdma-checksum unasked (docs/protocol.md rule 16.2)."""
    params: Dict[str, Any] = {"Bucket": bucket, "Key": key}
    if span is not None:
        params["Range"] = f"bytes={span[0]}-{span[1]}"
    return params



def endpoint_of(client: Any) -> str:
    """The endpoint URL a client sends to (the key of what it was found to speak)."""
    return str(client.meta.endpoint_url).rstrip("/")


class S3Call:
    """One S3 operation as one RDMA transfer sends it: ``send(token)`` once per v1 request, or
    ``control(path, headers, keep)`` for each hipobj-rc-v2 request (PREPARE, READY, CANCEL).
    ``negotiation`` (a ``_core.Negotiation``) says which the transfer uses (docs/protocol.md 10.1)."""

    def __init__(self, client: Any, operation: str, params: Dict[str, Any], negotiation: Any = None):
        self.client = client
        self.operation = getattr(client, operation)
        self.params = params
        self.negotiation = negotiation
        self.endpoint = endpoint_of(client)
        self.headers: Dict[str, str] = {}
        self.status: Optional[int] = None
        self.reply: Optional[str] = None
        self.error: Optional[ClientError] = None
        # The body of the last answer when it was an error (the library reads its S3 error).
        self.body: bytes = b""
        # What the last send raised (a connection error, a timeout, a ClientError without reply).
        self.exception: Optional[BaseException] = None

    def send(self, token: str) -> Optional[str]:
        self.exception = None
        self.body = b""
        try:
            with token_on_thread(token):
                try:
                    response = self._call_once()
                finally:
                    self.body = _outgoing.body
            meta = response["ResponseMetadata"]
            self._drain(response.get("Body"), meta.get("HTTPHeaders", {}))
            self.error = None
        except ClientError as e:
            meta = e.response.get("ResponseMetadata", {})
            if REPLY_HEADER not in meta.get("HTTPHeaders", {}):
                self.exception = e
                self.status = meta.get("HTTPStatusCode")
                self.headers = meta.get("HTTPHeaders", {})
                raise
            self.error = e
        except Exception as e:
            self.exception = e
            raise
        self.headers = meta.get("HTTPHeaders", {})
        self.status = meta.get("HTTPStatusCode")
        self.reply = self.headers.get(REPLY_HEADER)
        return self.reply

    def _call_once(self) -> Any:
        """The operation with this thread's token, sent once: if botocore retries it, the first
        attempt's answer is this call's (the library then retries with a fresh token)."""
        try:
            return self.operation(**self.params)
        except TokenResent as resent:
            raise resent.first from None

    def error_response(self) -> Optional[Dict[str, Any]]:
        """The S3 error of the last answer as the library reads it (botocore's
        ``ClientError.response`` shape), or None when it was none."""
        if self.status is None:
            return None
        return _core.error_response(self.status, self.headers, self.body)

    def etag(self) -> Optional[str]:
        """The ETag of the last answer (hipobj-rc-v2: FINAL's ``x-amz-rdma-etag``)."""
        return self.headers.get("etag") or self.headers.get(V2_ETAG_HEADER)

    def v2_target(self) -> Tuple[str, str, List[Tuple[str, str]], int]:
        """(bucket, key, query, object offset) of this operation as a hipobj-rc-v2 transfer."""
        p = self.params
        query: List[Tuple[str, str]] = []
        if "UploadId" in p:
            query = [("partNumber", str(p["PartNumber"])), ("uploadId", str(p["UploadId"]))]
        offset = 0
        rng = p.get("Range")
        if rng:
            offset = int(rng.split("=", 1)[1].split("-", 1)[0])
        return p["Bucket"], p["Key"], query, offset

    def control(self, path: str, headers: List[Tuple[str, str]], keep: bool) -> Tuple[int, Dict[str, str]]:
        """One hipobj-rc-v2 control request: a body-less POST to `path` of the endpoint, SigV4
        (service s3) with every header signed, through the client's HTTP session (so from the
        NIC's address, as the token requests). (status, lowercase headers); kept as this call's
        last answer when `keep`."""
        request = AWSRequest(method="POST", url=self.endpoint + path, data=b"", headers=dict(headers))
        request.headers["Content-Length"] = "0"
        credentials = self.client._request_signer._credentials
        if credentials is not None:
            region = self.client.meta.region_name or "us-east-1"
            S3SigV4Auth(credentials.get_frozen_credentials(), "s3", region).add_auth(request)
        _outgoing.control_token = next((v for k, v in headers if k.lower() == TOKEN_HEADER), None)
        try:
            response = self.client._endpoint.http_session.send(request.prepare())
        except Exception as e:
            self.exception = e
            raise
        finally:
            _outgoing.control_token = None
        answer = {k.lower(): v for k, v in response.headers.items()}
        if keep:
            self.status, self.headers, self.body = response.status_code, answer, response.content or b""
        return response.status_code, answer

    def http(self, kind: str, address: int, length: int) -> None:
        """The operation over plain HTTP, its bytes in host memory at `address` (the body of a
        PUT, or where a GET's body goes): RDMA off (``TransferConfig(transport="http")``)."""
        from ._memory import host_view

        view = host_view(address, length)
        params = dict(self.params)
        if kind == "put":
            params["Body"] = bytes(view)
        self.exception = None
        try:
            response = self.operation(**params)
        except ClientError as e:
            meta = e.response.get("ResponseMetadata", {})
            self.status, self.headers, self.exception = meta.get("HTTPStatusCode"), meta.get("HTTPHeaders", {}), e
            raise
        except Exception as e:
            self.exception = e
            raise
        meta = response["ResponseMetadata"]
        self.status, self.headers = meta.get("HTTPStatusCode"), meta.get("HTTPHeaders", {})
        if kind == "get":
            read_body_into(response["Body"], view, length)

    @staticmethod
    def _drain(body: Any, headers: Dict[str, str]) -> None:
        if body is None:
            return
        # An RDMA GET answers with an empty body; read it so the connection is reused. A server
        # that ignored the token sent the object itself: drop the connection instead of reading.
        if int(headers.get("content-length", "0") or 0) <= 65536:
            body.read()
        body.close()


def read_body_into(body: Any, view: memoryview, length: int, chunk: int = 1 << 20) -> None:
    """Exactly `length` bytes of an HTTP body into `view` (closed after); a shorter or longer body
    is an error."""
    done = 0
    try:
        while done < length:
            got = body.read(min(chunk, length - done))
            if not got:
                raise _core.S3Error(f"the HTTP body ended after {done} of {length} bytes")
            view[done : done + len(got)] = got
            done += len(got)
        if body.read(1):
            raise _core.S3Error(f"the HTTP body is longer than the {length} bytes asked for")
    finally:
        body.close()
