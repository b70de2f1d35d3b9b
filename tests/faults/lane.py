"""The fault lane (issue 22): the C library, the command line and the Python package move
objects through hipobj-server over RDMA while faults.py injects one fault per phase, then several
at once. Every operation is counted: started, succeeded first try / after retries, failed with a
clear error, killed by the fault; the retries each phase took against its budget
(faults.schedule()); corrupt GETs (digest checked), operations past their deadline,
objects changed by a failed PUT, and whether the server's and the devices' resources (pairings,
sessions, QPs, MRs, CQs, PDs, open files, temp files) came back to their starting counts.

Run inside the lane by tests/faults/run. Writes target/faults/accounting.{json,md}; exit 0 only
when every phase passes."""

from __future__ import annotations

import hashlib
import json
import os
import re
import select
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import faults

REPO = Path(__file__).resolve().parents[2]
# HIPOBJ_FAULTS_RAILS=2: the lane's two rails (issue 40; rail_count() checks the value). Its own
# output directory, so that a two-rail run after the usual one (tests/vm/e2e.d/50-faults) keeps both.
OUT = REPO / "target/faults" / ("two-rails" if os.environ.get("HIPOBJ_FAULTS_RAILS") == "2" else "")
ACCESS, SECRET = "hipobjtestkey", "hipobjtestsecret0123456789"
PORT = 9400
BUCKET = "faults"
PHASE_SECONDS = float(os.environ.get("HIPOBJ_FAULTS_PHASE_S", "10"))
OP_DEADLINE = 60.0  # an operation running longer counts as hung
# The lane's own check (tests/faults/README.md): the first N attempts of the run fail without
# running, as a client's bug would; the baseline's 0-retry budget must then fail the lane.
SCRIPTED_FAILURES = int(os.environ.get("HIPOBJ_FAULTS_SCRIPTED_FAILURES", "0"))
SIZES = (1 << 20, (3 << 20) + 17)
SETTLE_S = 20.0  # resources must be back within this (the pairing idle time is 2 s)
# The server registers its staging buffers on first use and keeps them in its pool (one per RDMA
# worker at most, --rdma-workers 4): MRs may rise above the baseline by that much, never more.
STAGING_MRS = 4
DATA_TMPFS = "/tmp/faults-fs"
# The server with the test-only cargo feature fault-injection (scripts/build-e2e).
FAULTS_SERVER = str(REPO / "target/e2e/hipobj-server-faults")
WORK = "/tmp/faults-work"


def digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class Server:
    """hipobj-server on rxe1 (with two rails: rxe1,rxe3), on a fixed port and rxe1's address,
    data directory on its own small tmpfs."""

    def __init__(self, device: str, addr: str):
        # `device`: --device's value, one name or several separated by commas
        self.device, self.addr = device, addr
        self.usual_bin = os.environ.get("HIPOBJ_SERVER_BIN", str(REPO / "target/release/hipobj-server"))
        self.bin = self.usual_bin
        # the fault-injection flags the server runs with (then self.bin is FAULTS_SERVER)
        self.injected: List[str] = []
        self.data = os.path.join(DATA_TMPFS, "data")
        self.log = str(OUT / "server.log")
        self.url = f"http://{addr}:{PORT}"
        self.proc: Optional[subprocess.Popen] = None
        self.lock = threading.Lock()
        # Set while the server serves; cleared from its kill -9 until its restart answers.
        self.up = threading.Event()

    def start(self) -> None:
        with self.lock:
            log = open(self.log, "ab")
            # The secret in the environment (HIPOBJ_SECRET_KEY), never on the command line.
            self.proc = subprocess.Popen(
                [self.bin, "--listen", f"{self.addr}:{PORT}", "--data-dir", self.data,
                 "--device", self.device, "--access-key", ACCESS,
                 "--pairing-idle-secs", "2", *self.injected],
                stdout=log, stderr=log, env=dict(os.environ, HIPOBJ_SECRET_KEY=SECRET))
            log.close()
        for _ in range(600):
            if self.stats() is not None:
                self.up.set()
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError(f"hipobj-server did not start: {Path(self.log).read_text()[-2000:]}")

    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def kill9(self) -> None:
        with self.lock:
            assert self.proc is not None
            self.up.clear()
            self.proc.kill()
            self.proc.wait()

    def restart(self, faulty: Optional[List[str]]) -> None:
        """kill -9 and start again on the same address and data directory: as the fault-injection
        build with these flags (`faulty`), or as the usual server (None)."""
        self.kill9()
        self.bin = FAULTS_SERVER if faulty else self.usual_bin
        self.injected = list(faulty or [])
        self.start()

    def object_path(self, key: str) -> str:
        """Where the server keeps an object's bytes (server/src/backend/fs.rs; the lane's keys are
        stored under their own names)."""
        return os.path.join(self.data, BUCKET, key)

    def put_plain(self, key: str, path: str) -> None:
        """PUT a file over plain HTTP (the lane's own setup, not a client under test)."""
        r = self.curl("-f", "-T", path, f"{self.url}/{BUCKET}/{key}")
        if r.returncode != 0:
            raise RuntimeError(f"PUT {key}: {r.stderr.decode()}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait()

    def curl(self, *args: str) -> subprocess.CompletedProcess:
        # The keys reach curl on its standard input (-K -), never on its command line (ps).
        return subprocess.run(
            ["curl", "-K", "-", "-sS", "--max-time", "20", "--aws-sigv4", "aws:amz:us-east-1:s3",
             "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", *args],
            input=f'user = "{ACCESS}:{SECRET}"\n'.encode(), capture_output=True)

    def stats(self) -> Optional[Dict[str, int]]:
        r = self.curl("-f", f"{self.url}/_hipobj/stats")
        if r.returncode != 0:
            return None
        return json.loads(r.stdout)

    def stored_digest(self, key: str) -> Optional[Tuple[str, int]]:
        """The stored object's digest and size over plain HTTP; None when there is none. Retried
        while the server is restarting. Only a whole body counts: a server killed while it sends
        the object leaves curl with status 200 and part of the body (curl exits non-zero, and
        the bytes received fall short of Content-Length), which is read again, not digested.
        Each key is read into its own file: workers check their keys at the same time (two
        sharing one file once read each other's bytes)."""
        out = os.path.join(WORK, f"check-{key}")
        for _ in range(60):
            r = self.curl("-o", out, "-w", "%{http_code} %{size_download}",
                          f"{self.url}/{BUCKET}/{key}")
            code, _, got = r.stdout.decode().partition(" ")
            if r.returncode == 0 and code == "404":
                return None
            if r.returncode == 0 and code == "200" and int(got) == os.path.getsize(out):
                return digest(out), os.path.getsize(out)
            time.sleep(0.5)
        raise RuntimeError(f"cannot read back {key}: {r.stderr.decode()}")

    def resources(self) -> Dict[str, int]:
        """What must come back to its starting count after each fault."""
        s = self.stats() or {}
        res = {"pairings": s.get("pairings_live", -1), "v2_sessions": s.get("v2_sessions_live", -1)}
        assert self.proc is not None
        fd_dir = f"/proc/{self.proc.pid}/fd"
        links = []
        for fd in os.listdir(fd_dir):
            try:
                links.append(os.readlink(os.path.join(fd_dir, fd)))
            except OSError:  # closed meanwhile
                pass
        # sockets apart: a live client's keep-alive connection is not a leak
        res["server_files"] = sum(1 for link in links if not link.startswith("socket:"))
        tmp = os.path.join(self.data, ".tmp")
        res["temp_files"] = len(os.listdir(tmp)) if os.path.isdir(tmp) else 0
        res.update(rdma_resources(self.proc.pid))
        return res


SERVER_COUNTERS = ("rdma_gets", "rdma_puts", "replies_500", "replies_503", "replies_507",
                   "completion_errors", "watchdog_fired", "deadline_fired", "pairings_failed",
                   "pairings_created", "flush_timeouts", "poller_stalled_ms")


def server_counters(before: Dict[str, int], after: Dict[str, int]) -> Dict[str, int]:
    """What the server counted during a phase (from its last start, after a restart), and its
    measured rate (completion_ps_per_byte, a gauge)."""
    out = {k: after.get(k, 0) - before.get(k, 0) if after.get(k, 0) >= before.get(k, 0) else after.get(k, 0)
           for k in SERVER_COUNTERS}
    out["completion_ps_per_byte"] = after.get("completion_ps_per_byte", 0)
    return out


def at_baseline(name: str, base: Optional[int], now: int, staging_mrs: int = STAGING_MRS) -> bool:
    """`staging_mrs`: how many MRs the server may have registered since (STAGING_MRS per device:
    each of its devices is an engine with its own staging buffers)."""
    if name == "mr" and base is not None:
        return now <= base + staging_mrs
    return base == now


SERVER_DEVICE_COUNTERS = ("jobs", "transfers", "bytes", "port_down_refusals")


def server_device_counters(before: Dict[str, object], after: Dict[str, object]) -> Dict[str, Dict[str, int]]:
    """What each of the server's devices counted during a phase (`/_hipobj/stats` "devices"; from
    its last start, after a restart)."""
    out = {}
    for dev, now in (after.get("devices") or {}).items():
        was = (before.get("devices") or {}).get(dev, {})
        out[dev] = {k: now.get(k, 0) - was.get(k, 0) if now.get(k, 0) >= was.get(k, 0) else now.get(k, 0)
                    for k in SERVER_DEVICE_COUNTERS}
    return out


# The rails part of `hipobj cp`'s closing line (docs/rails.md), absent with one device:
# "RDMA via rxe0,rxe2 [rxe0 16 transfers, rxe2 16 transfers (port down); 2 failovers, 1 failbacks]"
RAILS_RE = re.compile(r"\[([^\[\];]*); (\d+) failovers, (\d+) failbacks\]")
RAIL_TRANSFERS_RE = re.compile(r"(\S+) (\d+) transfers")


def cli_rail_counts(stdout: str) -> Counter:
    """failovers, failbacks, port_downs (devices it ended with their port down) and
    transfers_<device> from the CLI's closing line; empty without it."""
    count: Counter = Counter()
    for m in RAILS_RE.finditer(stdout):
        count["failovers"] += int(m[2])
        count["failbacks"] += int(m[3])
        count["port_downs"] += m[1].count("(port down)")
        for dev, n in RAIL_TRANSFERS_RE.findall(m[1]):
            count[f"transfers_{dev}"] += int(n)
    return count


def py_rail_counts(before: Optional[List[Dict[str, object]]], after: Optional[List[Dict[str, object]]]) -> Counter:
    """What the Python Session's rails (Session.rails()) counted between two readings:
    failovers, failbacks, port_downs and transfers_<device>. A device missing from `before` (the
    client restarted) counts from zero."""
    count: Counter = Counter()
    was = {r["device"]: r for r in before or []}
    for rail in after or []:
        old = was.get(rail["device"], {})
        for key, name in (("failovers", "failovers"), ("failbacks", "failbacks"), ("port_downs", "port_downs"),
                          ("transfers", f"transfers_{rail['device']}")):
            now, then = int(rail.get(key, 0)), int(old.get(key, 0))
            count[name] += now - then if now >= then else now
    return +count


RDMA_KINDS = ("qp", "cq", "mr", "pd", "ctx")
# The Soft-RoCE counters of both devices (`rdma statistic show`) a phase reports: packets, and the
# RC recovery that loss or a dropped corrupt packet (bad ICRC) costs: NAKed sequence errors,
# requester retries, duplicates, and work requests that ran out of retries.
RXE_COUNTERS = ("sent_pkts", "rcvd_pkts", "rcvd_seq_err", "out_of_seq_request", "duplicate_request",
                "completer_retry_err", "retry_exceeded_err", "ack_deferred")


def rxe_counters() -> Dict[str, int]:
    """RXE_COUNTERS summed over the RDMA devices; {} when `rdma statistic` is not available."""
    r = subprocess.run(["rdma", "statistic", "show"], capture_output=True, text=True)
    total: Counter = Counter()
    for line in r.stdout.splitlines():
        words = line.split()
        for name, value in zip(words, words[1:]):
            if name in RXE_COUNTERS and value.isdigit():
                total[name] += int(value)
    return dict(total)


def counter_delta(before: Dict[str, int], after: Dict[str, int]) -> Dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after}


def rdma_resources(server_pid: int) -> Dict[str, int]:
    """QPs, CQs, MRs, PDs and contexts of every RDMA device (`rdma resource show KIND`) held by
    the server, the kernel, or a process that no longer exists (a leak). A live client holds its
    own (the long-lived Python client's session) and is not counted."""
    lines = rdma_lines()
    return {kind: len(found) for kind, found in counted_rdma_lines(lines, server_pid).items()}


def rdma_lines() -> Dict[str, List[str]]:
    return {kind: subprocess.run(["rdma", "resource", "show", kind], capture_output=True,
                                 text=True).stdout.splitlines() for kind in RDMA_KINDS}


def rdma_fields(line: str) -> Dict[str, str]:
    """The device (`link rxe0/1 ...` or `dev rxe0 ...`) and the pid, pdn and ctxn of a line."""
    words = line.split()
    out = {"dev": words[1].split("/")[0]} if len(words) > 1 else {}
    for name, value in zip(words, words[1:]):
        if name in ("pid", "pdn", "ctxn"):
            out[name] = value
    return out


def alive(pid: str) -> bool:
    return os.path.exists(f"/proc/{pid}")


def counted_rdma_lines(lines: Dict[str, List[str]], server_pid: int,
                       is_alive=alive) -> Dict[str, List[str]]:
    """The lines of each kind that rdma_resources counts: the server's, the kernel's, a gone
    process's. A resource made by a thread that has exited shows no pid (the kernel names the
    creating thread): its owner is its PD's or context's process (the Python client's transfer
    engine makes QPs on its worker threads and keeps them in its session's pool)."""
    owner: Dict[Tuple[str, str, str], Optional[str]] = {}
    for kind, ident in (("ctx", "ctxn"), ("pd", "pdn")):
        for line in lines.get(kind, []):
            f = rdma_fields(line)
            if ident in f:
                owner[(kind, f["dev"], f[ident])] = f.get("pid") or owner.get(("ctx", f["dev"], f.get("ctxn", "")))
    counted: Dict[str, List[str]] = {}
    for kind in RDMA_KINDS:
        counted[kind] = []
        for line in lines.get(kind, []):
            f = rdma_fields(line)
            pid = (f.get("pid") or owner.get(("pd", f.get("dev", ""), f.get("pdn", "")))
                   or owner.get(("ctx", f.get("dev", ""), f.get("ctxn", ""))))
            if pid is None or pid == str(server_pid) or not is_alive(pid):
                counted[kind].append(line.strip())
    return counted


class Worker(threading.Thread):
    """One client kind doing PUTs and GETs of its own keys in turn, each checked."""

    def __init__(self, lane: "Lane", kind: str):
        super().__init__(name=kind, daemon=True)
        self.lane, self.kind = lane, kind
        self.keys = [f"{kind}-{i}" for i in range(2)]
        self.stored: Dict[str, Optional[str]] = {k: None for k in self.keys}
        self.size: Dict[str, int] = {}
        self.n = 0
        self.current: Optional[Tuple[subprocess.Popen, str, float]] = None
        self.killed: set = set()
        self.py: Optional[subprocess.Popen] = None
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.go = threading.Event()

    # the three clients ---------------------------------------------------------------------
    def argv(self, op: str, key: str, path: str, size: int) -> List[str]:
        ex = REPO / "target/examples"
        if self.kind == "c":
            return ([str(ex / "put-object"), BUCKET, key, path] if op == "put"
                    else [str(ex / "get-object"), BUCKET, key, str(size), path])
        if self.kind == "cli":
            cli = str(REPO / "target/release/hipobj")
            # With two rails a GET moves in 1 MiB parts, spread over both (a process's transfers
            # start on its first device: one part would never use the second rail).
            parts = ["--part-size", "1M"] if self.lane.rails == 2 else []
            return ([cli, "cp", path, f"s3://{BUCKET}/{key}"] if op == "put"
                    else [cli, "cp", *parts, f"s3://{BUCKET}/{key}", path])
        # the Python client is one long-lived process (PyClient): this is its request line
        return ["put", BUCKET, key, path] if op == "put" else ["get", BUCKET, key, str(size), path]

    def kill_current(self, op: str, min_age: float) -> bool:
        """Kill the running operation if it is an `op` at least `min_age` s old. The Python
        client is not killed: it restarts in tens of seconds in the lane (the C library and the
        command line, one process per operation, are the clients killed mid-transfer)."""
        if self.kind == "py":
            return False
        with self.lock:
            if self.current is None:
                return False
            proc, cur_op, started = self.current
            if cur_op != op or time.monotonic() - started < min_age or proc.poll() is not None:
                return False
            self.killed.add(proc.pid)
            proc.kill()
            return True

    def attempt(self, op: str, argv: List[str]) -> Tuple[str, int, str, str]:
        """One try: ('ok'|'failed'|'killed'|'hung', exit status, stderr, stdout)."""
        if self.lane.take_scripted_failure():
            return "failed", 1, "scripted failure (HIPOBJ_FAULTS_SCRIPTED_FAILURES)", ""
        if self.kind == "py":
            return (*self.attempt_py(op, argv), "")
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=self.lane.client_env)
        with self.lock:
            self.current = (proc, op, time.monotonic())
        try:
            out, err = proc.communicate(timeout=OP_DEADLINE)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            return "hung", -9, err.decode(errors="replace"), out.decode(errors="replace")
        finally:
            with self.lock:
                self.current = None
        if proc.pid in self.killed:
            self.killed.discard(proc.pid)  # pids are reused: this one was killed once
            return "killed", proc.returncode, "", out.decode(errors="replace")
        return (("ok" if proc.returncode == 0 else "failed"), proc.returncode, err.decode(errors="replace"),
                out.decode(errors="replace"))

    def attempt_py(self, op: str, words: List[str]) -> Tuple[str, int, str]:
        """One try through the long-lived Python client (started, or restarted after a kill,
        before the operation's clock starts)."""
        try:
            proc = self.py_client()
        except (OSError, RuntimeError) as e:
            return "failed", -1, str(e)
        assert proc.stdin is not None and proc.stdout is not None
        with self.lock:
            self.current = (proc, op, time.monotonic())
        try:
            proc.stdin.write((" ".join(words) + "\n").encode())
            proc.stdin.flush()
            ready, _, _ = select.select([proc.stdout], [], [], OP_DEADLINE)
            if not ready:
                proc.kill()
                proc.wait()
                return "hung", -9, ""
            line = proc.stdout.readline().decode(errors="replace").strip()
        except OSError:
            line = ""
        finally:
            with self.lock:
                self.current = None
        if proc.pid in self.killed:
            self.killed.discard(proc.pid)  # pids are reused: this one was killed once
            proc.wait()
            return "killed", -9, ""
        if line == "ok":
            return "ok", 0, ""
        if not line:
            proc.kill()
            proc.wait()
            return "failed", -1, ""
        return "failed", 1, line.removeprefix("err ")

    def py_client(self) -> subprocess.Popen:
        if self.py is not None and self.py.poll() is None:
            return self.py
        self.py = subprocess.Popen(
            [str(REPO / "target/python-venv/bin/python"), str(REPO / "tests/faults/pyclient.py")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=self.lane.client_env, bufsize=0)
        assert self.py.stdout is not None
        if self.py.stdout.readline().strip() != b"ready":
            raise RuntimeError("the Python client did not start")
        return self.py

    def py_rails(self) -> Optional[List[Dict[str, object]]]:
        """The Python client's Session.rails(), asked between phases (its worker is
        parked); None when it is not running or does not answer."""
        proc = self.py
        if proc is None or proc.poll() is not None:
            return None
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(b"stats\n")
            proc.stdin.flush()
            ready, _, _ = select.select([proc.stdout], [], [], OP_DEADLINE)
            line = proc.stdout.readline().decode(errors="replace").strip() if ready else ""
        except OSError:
            return None
        try:
            return json.loads(line.removeprefix("stats ")) if line.startswith("stats ") else None
        except ValueError:
            return None

    # one operation with its retries and checks --------------------------------------------
    def operation(self, phase: faults.Phase, count: Counter) -> None:
        key = self.keys[self.n % 2]
        op = "put" if self.stored[key] is None or (self.n // 2) % 2 == 0 else "get"
        if op not in phase.ops:
            op = phase.ops[0]
        self.n += 1
        count["started"] += 1
        count[f"started_{op}"] += 1
        path = os.path.join(WORK, f"{self.kind}-{op}")
        if op == "put":
            size = SIZES[self.n % len(SIZES)]
            with open(path, "wb") as f:
                f.write(os.urandom(size))
            new = digest(path)
        else:
            size, new = self.size[key], None
            self.destinations(path, remove=True)
        outcome, rc, err, retried_err = "failed", 0, "", ""
        attempts = phase.attempts(op)
        for attempt in range(attempts):
            outcome, rc, err, out = self.attempt(op, self.argv(op, key, path, size))
            count.update(cli_rail_counts(out))
            if outcome != "failed" or attempt == attempts - 1:
                break
            retried_err = err
            time.sleep(min(0.5 * 2 ** attempt, 4.0))
            # A restart under CPU starvation can outlast the backoff: the next try waits for
            # the server to serve again (each try is still counted against the budget).
            self.lane.server.up.wait(OP_DEADLINE)
        count["retries"] += attempt
        if outcome == "ok":
            if op == "get" and digest(path) != self.stored[key]:
                count["corrupt"] += 1
                self.lane.note(f"{self.kind}: GET {key} returned other bytes than stored")
            count["ok_first" if attempt == 0 else "ok_retried"] += 1
            count[f"ok_{op}"] += 1
            if attempt:
                self.lane.note(f"{self.kind}: {op} {key} succeeded after {attempt} retries "
                               f"(last error: {retried_err.strip().splitlines()[-1:] if retried_err.strip() else 'no message'})")
        elif outcome == "killed":
            count["killed"] += 1
        elif outcome == "hung":
            count["hung"] += 1
            self.lane.note(f"{self.kind}: {op} {key} still running after {OP_DEADLINE:.0f} s")
        else:
            clear = rc > 0 and err.strip() != "" and "panicked" not in err
            count[f"failed_{op}" if clear else "failed_unclear"] += 1
            self.lane.note(f"{self.kind}: {op} {key} failed after {attempt + 1} tries (exit {rc}): "
                           f"{err.strip().splitlines()[-1:] if err.strip() else 'no message'}")
            if clear and op in phase.must_fail and phase.fails_with not in err.lower():
                count["failed_other_reason"] += 1
                self.lane.note(f"{self.kind}: {op} {key} failed, but not with a checksum {phase.fails_with}")
            if op == "get":
                self.check_nothing_left(key, path, count)
        if op == "put":
            self.settle_put(key, size, new, outcome == "ok", count)

    @staticmethod
    def destinations(path: str, remove: bool = False) -> List[str]:
        """The download's destination and any temporary file beside it (`<name>.hipobj-XXXXXXXX`
        of the CLI and Python, src/engine/io.rs): removed before a GET, so that what a client
        killed earlier left does not count against the next one."""
        d, name = os.path.split(path)
        found = sorted(f for f in os.listdir(d) if f == name or f.startswith(name + "."))
        if remove:
            for f in found:
                os.remove(os.path.join(d, f))
        return found

    def check_nothing_left(self, key: str, path: str, count: Counter) -> None:
        """A failed GET leaves no destination: no file, no temporary file (issue 37)."""
        left = self.destinations(path, remove=True)
        if left:
            count["left_behind"] += 1
            self.lane.note(f"{self.kind}: a failed GET of {key} left {left} behind")

    def settle_put(self, key: str, size: int, new: str, ok: bool, count: Counter) -> None:
        """After a PUT: the stored object is the whole new one, or (after a failure) the old one."""
        if ok:
            self.stored[key], self.size[key] = new, size
            return
        read = self.lane.server.stored_digest(key)
        now = read[0] if read is not None else None
        if now == new:
            self.stored[key], self.size[key] = new, size
        elif now != self.stored[key]:
            count["changed_by_failure"] += 1
            found = "no object" if read is None else f"{read[1]} bytes, sha256 {read[0][:12]}"
            self.lane.note(f"{self.kind}: a failed PUT of {key} ({size} bytes) left neither the old "
                           f"nor the new object: {found}")
            self.stored[key] = now
            if read is not None:
                self.size[key] = read[1]

    def run(self) -> None:
        while True:
            self.go.wait()
            self.go.clear()
            phase = self.lane.spec
            count = self.lane.counts[phase.name][self.kind]
            while not self.stop.is_set():
                try:
                    self.operation(phase, count)
                except Exception as e:  # a driver failure must not stall the phase
                    count["failed_unclear"] += 1
                    self.lane.note(f"{self.kind}: driver error {type(e).__name__}: {e}")
            self.stop.clear()
            self.lane.parked.release()


def rail_count(env: Dict[str, str]) -> int:
    """HIPOBJ_FAULTS_RAILS: 1 (the default) or 2."""
    value = env.get("HIPOBJ_FAULTS_RAILS", "1")
    if value not in ("1", "2"):
        raise SystemExit(f"fault lane: HIPOBJ_FAULTS_RAILS must be 1 or 2, not {value!r}")
    return int(value)


def rail_devices(env: Dict[str, str], rails: int) -> Tuple[List[str], List[str]]:
    """The client's and the server's RDMA devices, the first rail's first: one rail from
    HIPOBJ_VM_DEVICES ("rxe0 rxe1"), two from HIPOBJ_VM_RAILS ("rxe0:rxe1 rxe2:rxe3",
    tests/vm/run --rails 2)."""
    if rails == 1:
        devices = env.get("HIPOBJ_VM_DEVICES", "").split()
        if len(devices) < 2:
            raise SystemExit("fault lane: needs the lane's two RDMA devices (run it through tests/vm/run)")
        return [devices[0]], [devices[-1]]
    pairs = [p.split(":") for p in env.get("HIPOBJ_VM_RAILS", "").split()]
    if len(pairs) < 2 or any(len(p) != 2 or not all(p) for p in pairs):
        raise SystemExit("fault lane: HIPOBJ_FAULTS_RAILS=2 needs the lane with two rails (tests/vm/run "
                         f"--rails 2); HIPOBJ_VM_RAILS is {env.get('HIPOBJ_VM_RAILS', '')!r}")
    return [p[0] for p in pairs[:2]], [p[1] for p in pairs[:2]]


class Lane:
    def __init__(self, kinds: List[str], rails: int = 1):
        self.rails = rails
        clients, self.server_devices = rail_devices(dict(os.environ), rails)
        addrs = dict(a.split("=", 1) for a in os.environ.get("HIPOBJ_VM_ADDRS", "").split())
        # HTTP goes to the first server device's address (with two rails the phase takes the
        # second rail down, so HTTP stays up)
        self.server = Server(",".join(self.server_devices), addrs[self.server_devices[0]])
        # with two rails the clients spread their transfers over both devices (docs/rails.md)
        more = {"HIPOBJ_NICS": ",".join(clients[1:])} if rails == 2 else {}
        self.client_env = dict(os.environ, AWS_ENDPOINT_URL=self.server.url, AWS_ACCESS_KEY_ID=ACCESS,
                               AWS_SECRET_ACCESS_KEY=SECRET, AWS_REGION="us-east-1",
                               HIPOBJ_NIC=clients[0], RUST_LOG="off",
                               # the lane exercises RDMA under faults: forced (issue 39's auto
                               # would send some transfers over plain HTTP)
                               HIPOBJ_TRANSPORT="rdma", **more)
        self.phase = ""
        self.spec: Optional[faults.Phase] = None
        self.scripted_failures = SCRIPTED_FAILURES
        self.scripted_lock = threading.Lock()
        self.counts: Dict[str, Dict[str, Counter]] = {}
        self.notes: Dict[str, List[str]] = {}
        self.resources: Dict[str, Dict[str, object]] = {}
        self.parked = threading.Semaphore(0)
        self.workers = [Worker(self, k) for k in kinds]

    def stored_object_paths(self) -> List[str]:
        """The data files of the objects the clients stored (each client's own keys)."""
        return [self.server.object_path(k) for w in self.workers for k in w.keys if w.stored[k] is not None]

    def seed(self) -> None:
        """Every client's keys stored before the first phase (over plain HTTP), so that a phase
        run alone (HIPOBJ_FAULTS_ONLY) that only reads has objects to read."""
        for w in self.workers:
            for i, key in enumerate(w.keys):
                path = os.path.join(WORK, f"seed-{key}")
                with open(path, "wb") as f:
                    f.write(os.urandom(SIZES[i % len(SIZES)]))
                self.server.put_plain(key, path)
                w.stored[key], w.size[key] = digest(path), os.path.getsize(path)
                os.remove(path)

    def take_scripted_failure(self) -> bool:
        with self.scripted_lock:
            if self.scripted_failures <= 0:
                return False
            self.scripted_failures -= 1
            return True

    def note(self, text: str) -> None:
        print(f"  [{self.phase}] {text}", flush=True)
        self.notes.setdefault(self.phase, []).append(text)

    def run_phase(self, phase: faults.Phase) -> None:
        fault = phase.fault
        self.phase, self.spec = phase.name, phase
        self.counts[self.phase] = {w.kind: Counter() for w in self.workers}
        started = time.monotonic()
        before = self.server.stats() or {}
        rxe_before = rxe_counters()
        py_before = self.py_rails()
        fault.begin(self)
        stop = threading.Event()
        actor = threading.Thread(target=fault.during, args=(self, stop))
        actor.start()
        for w in self.workers:
            w.go.set()
        time.sleep(PHASE_SECONDS)
        stop.set()
        actor.join()
        for w in self.workers:
            w.stop.set()
        for _ in self.workers:
            self.parked.acquire()
        # what the server counted while the fault acted (a fault that restarts the server at its
        # end would otherwise leave the new one's zeros)
        after = self.server.stats() or {}
        counted = server_counters(before, after)
        if self.rails == 2:
            for kind, reading in self.py_rails().items():
                self.counts[self.phase][kind].update(py_rail_counts(py_before.get(kind), reading))
        fault.end(self)
        self.resources[self.phase] = self.settle()
        self.resources[self.phase]["wall_s"] = round(time.monotonic() - started, 1)
        self.resources[self.phase]["server"] = counted
        self.resources[self.phase]["rxe"] = counter_delta(rxe_before, rxe_counters())
        if self.rails == 2:
            self.resources[self.phase]["server_devices"] = server_device_counters(before, after)

    def py_rails(self) -> Dict[str, Optional[List[Dict[str, object]]]]:
        """The rail stats of the Python client, by its kind (two rails only: asked between phases)."""
        if self.rails != 2:
            return {}
        return {w.kind: w.py_rails() for w in self.workers if w.kind == "py"}

    def settle(self) -> Dict[str, object]:
        """Wait until every resource is back at its baseline; report what was not."""
        deadline = time.monotonic() + SETTLE_S
        while True:
            now = self.server.resources()
            staging = STAGING_MRS * len(self.server_devices)
            diff = {k: (self.baseline.get(k), v) for k, v in now.items()
                    if not at_baseline(k, self.baseline.get(k), v, staging)}
            if not diff or time.monotonic() > deadline:
                assert self.server.proc is not None
                counted = counted_rdma_lines(rdma_lines(), self.server.proc.pid)
                for kind in (k for k in diff if k in RDMA_KINDS):
                    self.note(f"{kind} counted: {counted[kind]}")
                return {"back": not diff, "diff": diff}
            time.sleep(0.5)

    def start(self) -> None:
        shutil.rmtree(WORK, ignore_errors=True)
        os.makedirs(WORK)
        OUT.mkdir(parents=True, exist_ok=True)
        Path(self.server.log).unlink(missing_ok=True)
        os.makedirs(DATA_TMPFS, exist_ok=True)
        subprocess.run(["umount", DATA_TMPFS], stderr=subprocess.DEVNULL)
        faults.sh("mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", DATA_TMPFS)
        os.makedirs(self.server.data)
        self.server.start()
        if self.rails == 2:
            print(f"fault lane: two rails: server --device {self.server.device} on {self.server.url}, clients "
                  f"HIPOBJ_NIC={self.client_env['HIPOBJ_NIC']} HIPOBJ_NICS={self.client_env['HIPOBJ_NICS']}",
                  flush=True)
        r = self.server.curl("-f", "-X", "PUT", f"{self.server.url}/{BUCKET}")
        if r.returncode != 0:
            raise RuntimeError(f"CreateBucket: {r.stderr.decode()}")
        self.seed()
        # the long-lived Python client starts before the clock of any phase (tens of seconds)
        for w in self.workers:
            if w.kind == "py":
                w.py_client()
        time.sleep(1)
        self.baseline = self.server.resources()
        print(f"fault lane: baseline resources {self.baseline}", flush=True)
        for w in self.workers:
            w.start()

    def finish(self) -> None:
        for w in self.workers:
            if w.py is not None:
                w.py.kill()
        self.server.stop()
        subprocess.run(["umount", DATA_TMPFS], stderr=subprocess.DEVNULL)


def verdict(phase: faults.Phase, c: Counter, res: Dict[str, object],
            by_client: Optional[Dict[str, Counter]] = None) -> List[str]:
    """What is wrong with a phase (nothing: it passed), against its budget in faults.schedule().
    `by_client`: each client's counts; in a phase whose failures must say `fails_with`, every
    client must have been caught at least once."""
    bad = []
    if phase.fails_with:
        for kind, kc in sorted((by_client or {}).items()):
            if not any(kc[f"failed_{op}"] for op in phase.must_fail):
                bad.append(f"{kind}: no {'/'.join(phase.must_fail)} failed")
    for what in ("corrupt", "hung", "changed_by_failure", "failed_unclear", "left_behind",
                 "failed_other_reason"):
        if c[what]:
            bad.append(f"{what} {c[what]}")
    if c["retries"] > phase.max_retries:
        bad.append(f"retries {c['retries']} > budget {phase.max_retries}")
    for op in ("put", "get"):
        if c[f"failed_{op}"] and op not in phase.may_fail + phase.must_fail:
            bad.append(f"{c[f'failed_{op}']} {op}s failed")
        if op in phase.must_fail and c[f"ok_{op}"]:
            bad.append(f"{c[f'ok_{op}']} {op}s succeeded (they must fail)")
    failed_allowed = sum(c[f"failed_{op}"] for op in phase.may_fail)
    if failed_allowed > phase.max_failed:
        bad.append(f"{failed_allowed} {'/'.join(phase.may_fail)}s failed > {phase.max_failed} allowed")
    if phase.must_fail and not any(c[f"failed_{op}"] for op in phase.must_fail):
        bad.append("the lasting fault failed no operation")
    if not res["back"]:
        bad.append(f"resources not back: {res['diff']}")
    if phase.drops_packets:
        rxe = res.get("rxe") or {}
        dropped = rxe.get("sent_pkts", 0) - rxe.get("rcvd_pkts", 0)
        if not rxe or dropped <= 0:
            bad.append(f"the fault dropped no RDMA packet (rxe {rxe or 'counters unavailable'})")
    ok_ops = c["ok_first"] + c["ok_retried"]
    if ok_ops == 0 and not phase.must_fail:
        bad.append("no operation succeeded")
    return bad


def rails_text(total: Counter, res: Dict[str, object]) -> str:
    """A two-rail phase's failovers, failbacks and transfers per device, the clients' (the CLI's
    closing lines, the Python Session) and the server's (`/_hipobj/stats` "devices")."""
    moved = {k.removeprefix("transfers_"): v for k, v in sorted(total.items()) if k.startswith("transfers_")}
    return (f"failovers {total['failovers']}, port downs seen {total['port_downs']}, failbacks "
            f"{total['failbacks']}, client transfers {moved}; "
            f"server devices {res.get('server_devices', {})}")


COLUMNS = ("started", "ok_first", "ok_retried", "retries", "failed_put", "failed_get", "failed_unclear",
           "killed", "corrupt", "hung", "changed_by_failure", "left_behind")


def report(lane: Lane, schedule: List[faults.Phase], bench: Optional[Dict[str, object]], wall: float,
           quiet: bool = False) -> bool:
    """The accounting table (printed unless `quiet`, written to target/faults either way: a lane
    that times out still leaves the phases it finished). `bench` is None where the many-threads
    run has not run (yet, or at all: HIPOBJ_FAULTS_BENCH=0); it then neither passes nor fails."""
    rows, rails, passed = [], [], bench is None or bool(bench["passed"])
    head = "| fault | " + " | ".join(COLUMNS) + " | retry budget | resources back | wall s | verdict |"
    lines = [head, "|" + " --- |" * (len(COLUMNS) + 5)]
    for phase in schedule:
        if phase.name not in lane.resources:
            continue
        per_kind = lane.counts[phase.name]
        total = sum(per_kind.values(), Counter())
        res = lane.resources[phase.name]
        bad = verdict(phase, total, res, per_kind)
        passed &= not bad
        rows.append({"fault": phase.name, "total": dict(total), "max_retries": phase.max_retries,
                     "failures_rule": phase.failures_rule(),
                     "by_client": {k: dict(v) for k, v in per_kind.items()},
                     "resources": res, "problems": bad, "notes": lane.notes.get(phase.name, [])})
        cells = [str(total[c]) for c in COLUMNS]
        if "server_devices" in res:
            rails.append(f"{phase.name}: rails {rails_text(total, res)}")
        if not quiet:
            print(f"  {phase.name}: server {res['server']}", flush=True)
            print(f"  {phase.name}: rxe {res.get('rxe', {})}", flush=True)
            if "server_devices" in res:
                print(f"  {phase.name}: rails {rails_text(total, res)}", flush=True)
            print(f"  phase '{phase.name}': retries {total['retries']}, budget {phase.max_retries}"
                  f"{'' if total['retries'] <= phase.max_retries else ' OVER'}", flush=True)
        lines.append(f"| {phase.name} | " + " | ".join(cells) + f" | {phase.max_retries}" +
                     f" | {'yes' if res['back'] else 'NO'} | {res['wall_s']} | {'pass' if not bad else 'FAIL: ' + '; '.join(bad)} |")
    table = "\n".join(lines) + "".join(f"\n\n{r}" for r in rails)
    table += ("\n\n16 threads x 200 operations (64 KiB), loss 1 %: "
              + (f"{bench}" if bench is not None else "not run in this invocation"))
    if not quiet:
        print(table, flush=True)
    out = OUT
    (out / "accounting.md").write_text(table + f"\n\nbaseline resources: {lane.baseline}; lane wall {wall:.0f} s\n")
    (out / "accounting.json").write_text(json.dumps(
        {"baseline": lane.baseline, "phases": rows, "many_threads_loss_1pct": bench, "wall_s": round(wall, 1), "passed": passed},
        indent=1))
    return passed


BENCH_RE = re.compile(r"hipobj bench: (\d+) timed operations, retried (\d+), failed (\d+)")


def many_threads_under_loss(lane: Lane) -> Dict[str, object]:
    """Issue 22's acceptance: 16 client threads on defaults, 200 operations each (100 GETs and
    100 PUTs through `hipobj bench`), with 1 % packet loss on both veth ends: 0 errors."""
    loss = faults.Netem("loss 1%")
    loss.begin(lane)
    started = time.monotonic()
    try:
        r = subprocess.run(
            [str(REPO / "target/release/hipobj"), "bench", "--sizes", "64K", "--concurrency", "16",
             "--iterations", "100", "--bucket", "faults-bench"],
            capture_output=True, text=True, env=lane.client_env, timeout=300)
    except subprocess.TimeoutExpired as e:
        r = subprocess.CompletedProcess(e.cmd, 124, str(e.stdout or ""), "timed out after 300 s")
    finally:
        loss.end(lane)
    m = BENCH_RE.search(r.stdout)
    result: Dict[str, object] = {"exit": r.returncode, "wall_s": round(time.monotonic() - started, 1)}
    if m:
        result.update(timed=int(m[1]), retried=int(m[2]), failed=int(m[3]))
    else:
        result["error"] = (r.stdout + r.stderr)[-1500:]
    result["passed"] = r.returncode == 0 and result.get("failed") == 0
    print(f"fault lane: 16 threads x 200 operations, loss 1%: {result}", flush=True)
    return result


def main() -> int:
    err = faults.load_netem()
    if err:
        print(f"fault lane: {err}", file=sys.stderr)
        return 1
    kinds = os.environ.get("HIPOBJ_FAULTS_CLIENTS", "c cli py").split()
    rails = rail_count(dict(os.environ))
    lane = Lane(kinds, rails)
    t0 = time.monotonic()
    lane.start()
    schedule = faults.schedule(rails)
    only = os.environ.get("HIPOBJ_FAULTS_ONLY")
    if only:
        schedule = [p for i, p in enumerate(schedule) if str(i) in only.split(",")]
    bench: Optional[Dict[str, object]] = None
    try:
        for phase in schedule:
            print(f"fault lane: phase '{phase.name}' (retry budget {phase.max_retries}, "
                  f"failures: {phase.failures_rule()})", flush=True)
            lane.run_phase(phase)
            report(lane, schedule, bench, time.monotonic() - t0, quiet=True)
        if os.environ.get("HIPOBJ_FAULTS_BENCH", "1") == "1":
            bench = many_threads_under_loss(lane)
    finally:
        lane.finish()
    passed = report(lane, schedule, bench, time.monotonic() - t0)
    print(f"fault lane: {'PASS' if passed else 'FAIL'} in {time.monotonic() - t0:.0f} s")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
