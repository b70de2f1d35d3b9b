"""The one place where the benches' published figures are computed (stdlib only).

Every figure is a ratio of medians (of totals for throughput) over ALL the transfers a run made,
with its spread, the count of transfers and the baseline it divides by. Nothing is left out of a
sample unless the figure says how many and why. The benches' summaries print these figures, and
`benches/figures --check` recomputes the published ones from the logs in docs/perf/ with the same
functions.

A sample of a log may be per transfer (logs written since this module) or per round (older
server-datapath logs printed each round's median of 3 transfers, not the transfers): a figure
says which in its `sample` text.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

MIB = 1 << 20
#: The object size of benches/server_datapath.rs (8 MiB).
DATAPATH_OBJECT = 8 * MIB
#: Transfers per round of benches/server_datapath.rs (OURS_PER_ROUND).
DATAPATH_PER_ROUND = 3


@dataclass
class Figure:
    """A published figure: `value` with its spread `lo`-`hi`, over `count` transfers."""

    value: float
    lo: float | None
    hi: float | None
    count: int
    sample: str
    baseline: str
    excluded: str = "none"
    digits: int = 2
    #: An outcome (an exit status and time, a pass count) rather than a ratio: `short` formats
    #: its label with {v} and these fields, and prints no spread.
    outcome: dict | None = None

    def number(self, x: float | None) -> str:
        return "-" if x is None else f"{x:.{self.digits}f}"

    def spread(self) -> str:
        """The spread as published ("0.61-1.59"), or "none" for a figure of one transfer."""
        if self.lo is None or self.hi is None:
            return "none"
        return f"{self.number(self.lo)}-{self.number(self.hi)}"

    def short(self, label: str = "") -> str:
        """The figure as README and docs/perf.md print it: "GET 0.96 (0.61-1.59, n=12)"."""
        if self.outcome is not None:
            return label.format(v=self.number(self.value), n=self.count, **self.outcome)
        head = f"{label} " if label else ""
        spread = "no spread" if self.spread() == "none" else self.spread()
        return f"{head}{self.number(self.value)} ({spread}, n={self.count})"

    def line(self, label: str) -> str:
        """The summary line a bench prints: the figure, its spread, sample, baseline, exclusions."""
        return (f"FIGURE {label}: {self.number(self.value)}, spread {self.spread()}, "
                f"{self.sample}; baseline: {self.baseline}; left out: {self.excluded}")


def median(xs) -> float:
    """The median (the mean of the two middle values of an even count)."""
    return statistics.median(list(xs))


def hmean_rate(rates) -> float:
    """Rate of the total of runs that each moved the same bytes: the harmonic mean of their rates."""
    rates = list(rates)
    return len(rates) / sum(1.0 / r for r in rates)


def text(path: Path | str) -> str:
    return Path(path).read_text(errors="replace")


# --- benches/server-datapath -----------------------------------------------------------------

@dataclass
class DatapathRound:
    """One round of a server-datapath figure: the baseline run before ours, and ours."""

    base: float | None  # perftest MB/s, None when it failed
    ours: list  # seconds per transfer (single) or aggregate MB/s (streams)
    per_transfer: bool  # False: `ours` holds the round's median of DATAPATH_PER_ROUND transfers
    repaired: int = 0  # transfers of the round that had to pair again (counted in `ours`)


def datapath_section(log: str, mode: str, variant: str = "") -> list:
    """The lines of a server-datapath log's `=== MODE` section (with `(server VARIANT)` or none)."""
    head = f"=== {mode} (server {variant})" if variant else f"=== {mode} ("
    lines, inside = [], False
    for line in log.splitlines():
        if line.startswith("=== "):
            inside = line.startswith(head) and (variant or "(server " not in line)
            continue
        if inside:
            lines.append(line)
    if not lines:
        raise ValueError(f"no '=== {mode}' section{' with server ' + variant if variant else ''}")
    return lines


_MBS = r"(failed|[\d.]+ MB/s)"


def _mbs(s: str) -> float | None:
    return None if s == "failed" else float(s.split()[0])


def _transfers(s: str) -> tuple:
    """`ms 62.8 64.1 70.2*` (every transfer; * paired again) or `62.8 ms` (a round's median)."""
    s = s.strip()
    if s.startswith("ms "):
        values = s[3:].split()
        return [float(v.rstrip("*")) / 1e3 for v in values], True, sum(v.endswith("*") for v in values)
    if s == "paired again":
        return [], False, 0
    return [float(s.split()[0]) / 1e3], False, 0


def datapath_single_rounds(lines: list, op: str) -> list:
    """Rounds of the single-stream figure of `op` (GET after ib_write_bw, PUT after ib_read_bw)."""
    pat = re.compile(r"round \d+: ib_write_bw " + _MBS + r", GET (.*?); ib_read_bw " + _MBS
                     + r", PUT (.*)$")
    rounds = []
    for line in lines:
        m = pat.match(line)
        if not m:
            continue
        base, ours = (m.group(1), m.group(2)) if op == "GET" else (m.group(3), m.group(4))
        times, per_transfer, repaired = _transfers(ours)
        rounds.append(DatapathRound(_mbs(base), times, per_transfer, repaired))
    return rounds


def datapath_rtt(lines: list) -> float:
    for line in lines:
        m = re.match(r"single: HTTP round trip ([\d.]+) ms", line)
        if m:
            return float(m.group(1)) / 1e3
    raise ValueError("no 'single: HTTP round trip' line")


def _datapath_exclusions(rounds: list, with_base: list) -> str:
    parts = []
    no_base = [r for r in rounds if r not in with_base]
    if no_base:
        lost = sum(len(r.ours) if r.per_transfer else DATAPATH_PER_ROUND for r in no_base)
        parts.append(f"{len(no_base)} rounds ({lost} transfers) whose perftest baseline failed")
    repaired = sum(r.repaired for r in rounds)
    if repaired:
        parts.append(f"none of the transfers ({repaired} paired again, counted)")
    return "; ".join(parts) or "none"


def _datapath_sample(rounds: list, kind: str) -> tuple:
    """The count of transfers, and the text saying what the sample holds."""
    if all(r.per_transfer for r in rounds):
        n = sum(len(r.ours) for r in rounds)
        return n, f"{n} {kind} in {len(rounds)} rounds, every transfer"
    raise ValueError(f"this log printed each round's median of {DATAPATH_PER_ROUND} {kind}, not "
                     "every transfer: it cannot back a figure (run benches/server-datapath again)")


def datapath_single(log: str, op: str, variant: str = "") -> Figure:
    """Single-stream 8 MiB `op`: reference time / median time, the reference time being one HTTP
    round trip + 8 MiB at the median rate of the perftest runs of the same rounds (ib_write_bw for
    a GET, ib_read_bw for a PUT). Above 1.0 the transfer beat that reference."""
    lines = datapath_section(log, "single", variant)
    rtt = datapath_rtt(lines)
    rounds = datapath_single_rounds(lines, op)
    with_base = [r for r in rounds if r.base is not None and r.ours]
    if not with_base:
        raise ValueError("no round with both a perftest baseline and a transfer")
    reference = lambda mbs: rtt + DATAPATH_OBJECT / (mbs * 1e6)
    ref = reference(median(r.base for r in with_base))
    times = [t for r in with_base for t in r.ours]
    per_round = [reference(r.base) / t for r in with_base for t in r.ours]
    tool = "ib_write_bw" if op == "GET" else "ib_read_bw"
    n, sample = _datapath_sample(with_base, "transfers")
    return Figure(ref / median(times), min(per_round), max(per_round), n, sample,
                  f"reference time {ref * 1e3:.2f} ms = HTTP round trip {rtt * 1e3:.2f} ms + 8 MiB "
                  f"at the median {tool} rate of the same rounds; value = reference / median "
                  f"{op} time {median(times) * 1e3:.2f} ms",
                  _datapath_exclusions(rounds, with_base))


def datapath_streams_rounds(lines: list, op: str) -> list:
    tool = "ib_write_bw" if op == "GET" else "ib_read_bw"
    name = "Get" if op == "GET" else "Put"
    pat = re.compile(rf"{tool} -q \d+ {_MBS}, {name} ([\d.]+) MB/s;")
    rounds = []
    for line in lines:
        if line.startswith("round "):
            m = pat.search(line)
            if m:
                rounds.append(DatapathRound(_mbs(m.group(1)), [float(m.group(2))], True))
    return rounds


def datapath_streams(log: str, op: str, variant: str = "", streams: int = 4) -> Figure:
    """4 streams of 8 MiB `op` at once: our rate over all rounds (total bytes / total time) / the
    rate of the perftest runs (`-q 4`) between them, each of the same bytes per run."""
    lines = datapath_section(log, f"streams{streams}", variant)
    rounds = datapath_streams_rounds(lines, op)
    with_base = [r for r in rounds if r.base is not None]
    if not with_base:
        raise ValueError("every perftest baseline of the rounds failed")
    ours = hmean_rate(r.ours[0] for r in with_base)
    base = hmean_rate(r.base for r in with_base)
    per_round = [r.ours[0] / r.base for r in with_base]
    tool = "ib_write_bw" if op == "GET" else "ib_read_bw"
    n = len(with_base) * streams * DATAPATH_PER_ROUND
    return Figure(ours / base, min(per_round), max(per_round), n,
                  f"{n} transfers in {len(with_base)} rounds of {streams} streams x "
                  f"{DATAPATH_PER_ROUND}; spread over the rounds",
                  f"{tool} -q {streams} run before each round, total rate {base:.1f} MB/s "
                  f"(ours {ours:.1f} MB/s); a reference run, not a limit",
                  _datapath_exclusions(rounds, with_base))


def datapath_errors(log: str, variant: str = "", streams: int = 4) -> Figure:
    """The failed transfers of a streams section (`RESULT 4 streams: N errors`)."""
    lines = datapath_section(log, f"streams{streams}", variant)
    m = next(m for m in map(re.compile(rf"RESULT {streams} streams: (\d+) errors").match, lines) if m)
    rounds = datapath_streams_rounds(lines, "GET")
    n = 2 * len(rounds) * streams * DATAPATH_PER_ROUND
    return Figure(int(m.group(1)), None, None, n, f"{n} transfers", "none", digits=0, outcome={})


def datapath_summary(log: str) -> list:
    """The summary lines of a whole server-datapath log: every section's figures."""
    out = []
    for line in log.splitlines():
        m = re.match(r"=== (single|streams(\d+))(?: \(server (.*?)\))? \(", line)
        if not m:
            continue
        mode, variant = m.group(1), m.group(3) or ""
        tag = f" (server {variant})" if variant else ""
        for op in ("GET", "PUT"):
            label = f"{mode}{tag} 8MiB {op}"
            try:
                fig = (datapath_single(log, op, variant) if mode == "single"
                       else datapath_streams(log, op, variant, int(m.group(2))))
            except ValueError as e:
                out.append(f"FIGURE {label}: none ({e})")
                continue
            out.append(fig.line(label))
    return out


# --- benches/run-transfer-overhead -----------------------------------------------------------

def transfer_overhead_blocks(log: str) -> list:
    """The `rdma vs http` and `overhead` lines of each run in a transfer-overhead log, in order."""
    return [line for line in log.splitlines() if line.startswith(("rdma vs http", "overhead"))]


def transfer_overhead_rdma_http(log: str, run: int, threads: int = 1) -> Figure:
    """4 KiB GET: median RDMA GET time / median plain-HTTP GET time (above 1: RDMA is slower),
    from the `run`-th (0-based) measurement of `threads` threads in the log."""
    pat = re.compile(rf"rdma vs http, +{threads} thread\(s\): median 4 KiB GET ([\d.]+) us by RDMA, "
                     rf"([\d.]+) us by plain HTTP.*\((\d+) HTTP GETs\)(?:, RDMA p10-p90 ([\d.]+)-([\d.]+) us, "
                     rf"HTTP p10-p90 ([\d.]+)-([\d.]+) us)?")
    found = [m for m in map(pat.match, log.splitlines()) if m]
    m = found[run]
    rdma, http, n = float(m.group(1)), float(m.group(2)), int(m.group(3))
    lo = hi = None
    if m.group(4):
        lo, hi = float(m.group(4)) / float(m.group(7)), float(m.group(5)) / float(m.group(6))
    return Figure(rdma / http, lo, hi, n,
                  f"{n} RDMA GETs and {n} HTTP GETs"
                  + ("; spread: RDMA p10 / HTTP p90 to RDMA p90 / HTTP p10" if lo is not None
                     else "; this log printed no spread"),
                  f"median plain-HTTP GET {http:.1f} us (keep-alive, same server and boot); "
                  f"RDMA median {rdma:.1f} us; above 1.0 = RDMA slower")


def transfer_overhead_library(log: str, run: int, threads: int = 1) -> Figure:
    """Library time of a warm 4 KiB GET (inside hipObjGet, outside the callbacks) as a percentage
    of the median transfer."""
    pat = re.compile(rf"overhead, +{threads} thread\(s\): inside hipObjGet outside the callbacks "
                     rf"median ([\d.]+) us \(p99 ([\d.]+) us\) = [\d.]+ % of the median transfer "
                     rf"([\d.]+) us \((\d+) GETs\)")
    m = [m for m in map(pat.match, log.splitlines()) if m][run]
    lib, p99, whole, n = float(m.group(1)), float(m.group(2)), float(m.group(3)), int(m.group(4))
    return Figure(100 * lib / whole, None, None, n,
                  f"{n} GETs; p99 library time {p99:.1f} us; this log printed no spread of the ratio",
                  f"median whole GET {whole:.1f} us", digits=2)


def transfer_overhead_against(log: str, what: str, threads: int = 1) -> Figure:
    """benches/run-transfer-overhead-against: this tree's median over the older revision's, from
    rounds alternating in one boot (`what`: "library", the time inside hipObjGet outside the
    callbacks; "GET", the whole GET). The value is the ratio of the medians of the rounds'
    medians; the spread, the per-round ratios."""
    lib = re.compile(rf"overhead, +{threads} thread\(s\): inside hipObjGet outside the callbacks "
                     rf"median ([\d.]+) us .*?median transfer ([\d.]+) us \((\d+) GETs\)")
    side, seen = None, {"old": [], "new": []}
    n = 0
    for line in log.splitlines():
        head = re.match(r"== round \d+: (old|new)$", line)
        if head:
            side = head.group(1)
            continue
        m = lib.match(line)
        if m and side:
            seen[side].append(float(m.group(1) if what == "library" else m.group(2)))
            n += int(m.group(3))
    old, new = seen["old"], seen["new"]
    if not old or len(old) != len(new):
        raise ValueError("the log has no matching old and new rounds")
    per_round = [b / a for a, b in zip(old, new)]
    return Figure(median(new) / median(old), min(per_round), max(per_round), n,
                  f"{len(old)} rounds of {n // (2 * len(old))} warm 4 KiB GETs each way",
                  "the older revision's median, alternating rounds in the same boot", digits=3)


# --- benches/checksum-cost -------------------------------------------------------------------

def checksum_cost(log: str, op: str, streams: int) -> Figure:
    """benches/checksum-cost: median seconds of the engine's copies with the end-to-end check over
    the median without it (same object, alternating rounds); spread: the per-round ratios."""
    pat = re.compile(rf"run {op} streams {streams} round (\d+) check (true|false) seconds ([\d.]+)")
    runs: dict = {}
    for m in filter(None, map(pat.match, log.splitlines())):
        runs.setdefault(int(m.group(1)), {})[m.group(2) == "true"] = float(m.group(3))
    rounds = [r for r in runs.values() if len(r) == 2]
    if not rounds:
        raise ValueError(f"no {op} runs at {streams} streams in the log")
    per_round = [r[True] / r[False] for r in rounds]
    value = median(r[True] for r in rounds) / median(r[False] for r in rounds)
    return Figure(value, min(per_round), max(per_round), 2 * len(rounds),
                  f"{len(rounds)} rounds of one copy with and one without the check",
                  "the median copy without the check, same run", digits=3)


def checksum_cost_summary(log: str) -> list:
    return [checksum_cost(log, op, n).line(f"{op} {n} stream(s), with check / without")
            for op in ("GET", "PUT") for n in (1, 4)]


# --- benches/engine (JSON) -------------------------------------------------------------------

ENGINE_KEYS = {
    "cp GET": ("cp_get_MBps", "ib_write_bw_MBps"),
    "cp PUT": ("cp_put_MBps", "ib_read_bw_MBps"),
    "load": ("safetensors_load_MBps", "ib_write_bw_MBps"),
}


def engine_row(report: dict, streams: int) -> dict:
    return next(r for r in report["rows"] if r["streams"] == streams)


def engine_ratio(report: dict, what: str, streams: int) -> Figure:
    """benches/engine: one copy's MB/s / one perftest run's MB/s (`-q streams`), same boot."""
    ours_key, base_key = ENGINE_KEYS[what]
    row = engine_row(report, streams)
    tool = base_key.removesuffix("_MBps")
    return Figure(row[ours_key] / row[base_key], None, None, 1,
                  f"1 copy of {report['size_bytes'] >> 20} MiB (one run each, no spread)",
                  f"one {tool} -q {streams} run of the same boot, {row[base_key]:.1f} MB/s "
                  f"(ours {row[ours_key]:.1f} MB/s)")


def engine_summary(report: dict) -> list:
    return [engine_ratio(report, what, row["streams"]).line(f"{what} {row['streams']} streams")
            for row in report["rows"] for what in ENGINE_KEYS if ENGINE_KEYS[what][0] in row]


# --- benches/cp-against (JSON) ---------------------------------------------------------------

def cp_against(report: dict, direction: str, streams: int) -> Figure:
    """this build / the other: median time of the other's copies / median time of this build's
    (= ratio of the median MB/s), every copy of the run; spread over the alternating rounds."""
    this = report["times_s"][f"this {direction} {streams}"]
    other = report["times_s"][f"other {direction} {streams}"]
    per_round = [o / t for t, o in zip(this, other)]
    size = report["size_bytes"]
    return Figure(median(other) / median(this), min(per_round), max(per_round),
                  len(this) + len(other),
                  f"{len(this)} copies each, alternating rounds; spread over the rounds",
                  f"the other build's median {size / median(other) / 1e6:.1f} MB/s "
                  f"(this {size / median(this) / 1e6:.1f} MB/s)")


def cp_against_summary(report: dict) -> list:
    out = []
    for key in report["median"]:
        direction, streams = key.split()
        out.append(cp_against(report, direction, int(streams)).line(f"{direction} {streams} streams"))
    return out


# --- benches/frameworks (issue 38) -----------------------------------------------------------

def _frameworks_times(report: dict, what: str, method: str) -> dict:
    """{round: seconds} of every transfer of `what` by `method`."""
    return {t["round"]: t["seconds"] for t in report["transfers"] if t["what"] == what and t["method"] == method}


def frameworks_ratio(report: dict, what: str, method: str, baseline: str) -> Figure:
    """`method`'s speed over `baseline`'s for `what` (the same bytes each time): median time of
    the baseline's transfers / median time of the method's; spread over the alternating rounds."""
    mine, theirs = _frameworks_times(report, what, method), _frameworks_times(report, what, baseline)
    rounds = sorted(set(mine) & set(theirs))
    per_round = [theirs[r] / mine[r] for r in rounds]
    size = next(t["bytes"] for t in report["transfers"] if t["what"] == what)
    rate = lambda xs: size / median(xs) / 1e6  # noqa: E731
    return Figure(median(theirs.values()) / median(mine.values()), min(per_round), max(per_round),
                  len(mine) + len(theirs),
                  f"{len(mine)} {what} each, alternating rounds; spread over the rounds",
                  f"{baseline}'s median {rate(theirs.values()):.1f} MB/s ({method} {rate(mine.values()):.1f} MB/s)")


FRAMEWORKS_FIGURES = [
    ("dcp-save", "hipobj", "s3torchconnector"), ("dcp-save", "hipobj", "hipobj-http"),
    ("dcp-load", "hipobj", "s3torchconnector"), ("dcp-load", "hipobj", "hipobj-http"),
    ("safetensors-load", "hipobj", "runai"),
]


def frameworks_summary(report: dict) -> list:
    return [frameworks_ratio(report, *f).line(f"{f[0]} {f[1]} over {f[2]}") for f in FRAMEWORKS_FIGURES]


def protocols_runs(folder: Path | str) -> dict:
    """benches/protocols' rounds: {"v1": [cells of round 1, ...], "v2": [...]}, each round's cells
    by (op, size, streams)."""
    runs: dict = {"v1": [], "v2": []}
    for f in sorted(Path(folder).glob("v*-*.json")):
        cells = {(c["op"], c["size"], c["concurrency"]): c for c in load_json(f)["cells"]}
        runs[f.name.split("-")[0]].append(cells)
    return runs


def http_against_itself(folder: Path | str) -> Figure:
    """The lane's resolution for the auto figure: in the rounds (of either protocol) where auto
    took plain HTTP for every transfer (the run's RDMA transfers are all forced ones), each cell's
    auto MB/s over forced HTTP MB/s compares one path with itself, measured the same way. The
    median over those cell-rounds, spread the lowest and highest; n, cell-rounds."""
    ratios = []
    for f in sorted(Path(folder).glob("v*-*.json")):
        run = load_json(f)
        if set(run["transport"]["rdma_by_reason"]) != {"forced"}:
            continue
        ratios += [c["auto"]["mb_per_s"] / c["http"]["mb_per_s"] for c in run["cells"] if c.get("auto")]
    if not ratios:
        raise ValueError(f"{folder}: no round where auto took HTTP for every transfer")
    under = sum(r < 0.95 for r in ratios)
    return Figure(median(ratios), min(ratios), max(ratios), len(ratios),
                  f"cell-rounds in which auto took HTTP every time; {under} of {len(ratios)} under 0.95",
                  "forced HTTP of the same cell and round (the same path)")


def transport_auto(folder: Path | str, proto: str) -> Figure:
    """Issue 39: `--transport auto` against the faster of forced RDMA and forced HTTP of the same
    round, per cell (op, size, streams): the median over the rounds of auto MB/s / max(RDMA MB/s,
    HTTP MB/s). The figure is the median over the cells, its spread the lowest and the highest
    cell; n, auto's timed operations."""
    rounds = protocols_runs(folder)[proto]
    per_cell = {}
    for key in rounds[0]:
        ratios = [r[key]["auto"]["mb_per_s"] / max(r[key]["rdma"]["mb_per_s"], r[key]["http"]["mb_per_s"])
                  for r in rounds if key in r and r[key].get("auto")]
        per_cell[key] = median(ratios)
    ops = sum(r[k]["auto"]["operations"] for r in rounds for k in r if r[k].get("auto"))
    low = min(per_cell, key=per_cell.get)
    below = sorted(f"{k[0]} {k[1]} x{k[2]} {v:.2f}" for k, v in per_cell.items() if v < 0.95)
    return Figure(median(per_cell.values()), min(per_cell.values()), max(per_cell.values()), ops,
                  f"{len(per_cell)} cells x {len(rounds)} rounds ({proto}); lowest {low[0]} {low[1]} x{low[2]}; "
                  f"cells under 0.95: {len(below)} ({', '.join(below) or 'none'})",
                  "the faster of forced RDMA and forced HTTP in the same round and cell")


def protocols_v2_over_v1(folder: Path | str, op: str, size: int, streams: int) -> Figure:
    """hipobj-rc-v2 MB/s over v1 MB/s for one cell: the ratio of the medians over the rounds
    (v1 and v2 alternate round by round), spread over the rounds; n, both sides' operations."""
    runs = protocols_runs(folder)
    key = (op, size, streams)
    v1 = [r[key]["rdma"] for r in runs["v1"]]
    v2 = [r[key]["rdma"] for r in runs["v2"]]
    per_round = [b["mb_per_s"] / a["mb_per_s"] for a, b in zip(v1, v2)]
    return Figure(median([x["mb_per_s"] for x in v2]) / median([x["mb_per_s"] for x in v1]),
                  min(per_round), max(per_round), sum(x["operations"] for x in v1 + v2),
                  f"{len(per_round)} rounds of each, alternating", "v1 (one round trip, paired connections)")


def protocols_summary(folder: Path | str) -> list:
    lines = [transport_auto(folder, p).line(f"auto over the faster path, {p}") for p in ("v1", "v2")]
    try:
        lines.append(http_against_itself(folder).line("HTTP against itself (the lane's resolution)"))
    except ValueError as e:
        lines.append(f"no HTTP-against-itself figure: {e}")
    cells = protocols_runs(folder)["v1"][0]
    for size in (s for s in (4096, 65536) if ("put", s, 1) in cells):
        lines.append(protocols_v2_over_v1(folder, "put", size, 1).line(f"v2 over v1, PUT {size} B x1"))
    return lines


# --- outcomes (exit codes, pass counts) ------------------------------------------------------

def exit_time(log: str, pattern: str) -> Figure:
    """An exit status and its seconds from a line matching `pattern` (groups: status, seconds)."""
    m = [m for m in map(re.compile(pattern).search, log.splitlines()) if m][-1]
    return Figure(float(m.group(2)), None, None, 1, f"exit {m.group(1)}", "none", digits=0,
                  outcome={"status": m.group(1)})


def make_test_stages(log: str) -> Figure:
    """`make test`'s own stage table (scripts/test): its total seconds, and exit 0 only when the
    table lists every stage of the run as ok."""
    lines = log.splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("=== make test: stage times"))
    rows = [line.split() for line in lines[start + 1:] if line.startswith("  ")]
    stages = [r for r in rows if r[0] != "total"]
    total = next(int(r[1]) for r in rows if r[0] == "total")
    status = "0" if stages and all(r[-1] == "ok" for r in stages) else "1"
    return Figure(float(total), None, None, 1, f"{len(stages)} stages", "none", digits=0,
                  outcome={"status": status})


def fault_table(log: str) -> list:
    """The rows of the last fault-lane table in a log, as dicts."""
    lines = [line for line in log.splitlines() if line.startswith("| ")]
    start = max(i for i, line in enumerate(lines) if line.startswith("| fault |"))
    head = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != len(head):
            break
        rows.append(dict(zip(head, cells)))
    return rows


def fault_lane(log: str, column: str) -> Figure:
    """The fault lane: `column` summed over the phases (`phases`: the phases that passed); count:
    the operations started in all the phases."""
    rows = fault_table(log)
    started = sum(int(r["started"]) for r in rows)
    if column == "phases":
        value = sum(r["verdict"] == "pass" for r in rows)
        sample = f"{value} of {len(rows)} phases passed"
    else:
        value = sum(int(r[column]) for r in rows)
        sample = f"{column} over {len(rows)} phases"
    return Figure(value, None, None, started, sample, "none", digits=0,
                  outcome={"phases": len(rows)})


def demo_under_load(summary: str, what: str) -> Figure:
    """benches/demo-under-load's summary.txt: `passed` (runs with exit 0), `failed` or `retried`
    (the bench's operations, summed over the runs); count: the timed operations of all runs."""
    runs = [re.search(r"run \d+: exit (\d+), .*?(\d+) timed operations, retried (\d+), failed (\d+)", line)
            for line in summary.splitlines() if line.startswith("run ")]
    runs = [m for m in runs if m]
    timed = sum(int(m.group(2)) for m in runs)
    value = {"passed": sum(m.group(1) == "0" for m in runs),
             "retried": sum(int(m.group(3)) for m in runs),
             "failed": sum(int(m.group(4)) for m in runs)}[what]
    return Figure(value, None, None, timed, f"{len(runs)} runs", "none", digits=0,
                  outcome={"runs": len(runs)})


# --- benches/nixl (issue 51) ------------------------------------------------------------------

def nixl_ratio(report: dict, what: str, column: str = "HIPOBJ") -> Figure:
    """A HIPOBJ column's speed over NIXL's OBJ plugin's for `what` (e.g. "read-256k": the same
    blocks each time, so blocks/s and MB/s have the same ratio): median time of OBJ's transfer
    sets / median time of the column's; spread over the alternating rounds; both rates in the
    baseline text."""
    mine, theirs = _frameworks_times(report, what, column), _frameworks_times(report, what, "OBJ")
    rounds = sorted(set(mine) & set(theirs))
    per_round = [theirs[r] / mine[r] for r in rounds]
    one = next(t for t in report["transfers"] if t["what"] == what)
    rates = lambda xs: f"{one['blocks'] / median(xs):.0f} blocks/s, {one['bytes'] / median(xs) / 1e6:.1f} MB/s"  # noqa: E731
    return Figure(median(theirs.values()) / median(mine.values()), min(per_round), max(per_round),
                  len(mine) + len(theirs),
                  f"{len(mine)} sets of {one['blocks']} blocks each, alternating rounds; spread over the rounds",
                  f"OBJ plugin's median {rates(theirs.values())} ({column} {rates(mine.values())})")


def nixl_summary(report: dict) -> list:
    whats = sorted({t["what"] for t in report["transfers"]}, key=lambda w: (int(w.split("-")[1][:-1]), w))
    columns = report.get("context", {}).get("columns", ["OBJ", "HIPOBJ"])
    return [nixl_ratio(report, w, c).line(f"{w} {c} over OBJ") for w in whats for c in columns if c != "OBJ"]


def load_json(path: Path | str) -> dict:
    return json.loads(text(path))


# --- the benches' summaries ------------------------------------------------------------------

SUMMARIES = {
    "server-datapath": lambda path: datapath_summary(text(path)),
    "engine": lambda path: engine_summary(load_json(path)),
    "cp-against": lambda path: cp_against_summary(load_json(path)),
    "checksum-cost": lambda path: checksum_cost_summary(text(path)),
    "frameworks": lambda path: frameworks_summary(load_json(path)),
    "nixl": lambda path: nixl_summary(load_json(path)),
    "protocols": protocols_summary,
    "cpu-per-gib": lambda path: cpu_summary(text(path)),
}


def main(argv: list) -> int:
    """`bench_summary.py BENCH OUTPUT`: the FIGURE lines of one bench's output (log or JSON)."""
    if len(argv) != 3 or argv[1] not in SUMMARIES:
        print(f"usage: bench_summary.py {{{'|'.join(SUMMARIES)}}} OUTPUT", file=sys.stderr)
        return 2
    for line in SUMMARIES[argv[1]](argv[2]):
        print(line)
    return 0



# --- benches/rails (issue 40: several NICs) ------------------------------------------------------

def rails_rows(log: str) -> dict:
    """{kind: [MB/s of each round]} from the `row ROUND KIND SECONDS MBPS [DETAIL]` lines (a
    perftest run that failed, `MBPS` "failed", is left out: `rails_failed` counts them)."""
    rows: dict = {}
    for line in log.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) >= 5 and parts[0] == "row" and parts[4] != "failed":
            rows.setdefault(parts[2], []).append(float(parts[4]))
    if not rows:
        raise ValueError("no `row` lines: not a benches/rails log")
    return rows


def rails_failed(log: str) -> int:
    """Rows of a benches/rails log whose perftest run failed."""
    return sum(1 for line in log.splitlines() if line.startswith("row ") and line.split()[4:5] == ["failed"])


def rails_ratio(log: str, ours: str, base: str) -> Figure:
    """The ratio of medians `ours` / `base` (MB/s), the spread of the per-round ratios."""
    rows = rails_rows(log)
    a, b = rows[ours], rows[base]
    per_round = [x / y for x, y in zip(a, b)]
    failed = rails_failed(log)
    return Figure(median(a) / median(b), min(per_round), max(per_round), len(a),
                  f"{len(a)} copies of each, alternating in one boot (spread: per-round ratios)",
                  f"{base} ({median(b):.1f} MB/s median)",
                  excluded=f"{failed} perftest runs that failed" if failed else "none")


def rails_summary(log: str) -> list:
    """The lines benches/rails prints: each kind's median and range, then the ratios."""
    rows = rails_rows(log)
    out = [f"{k}: median {median(v):.1f} MB/s ({min(v):.1f}-{max(v):.1f}, n={len(v)})"
           for k, v in sorted(rows.items())]
    for ours, base in [("cp-get-2rails", "cp-get-1rail"), ("cp-put-2rails", "cp-put-1rail"),
                       ("cp-get-2rails", "write-bw-2pairs"), ("cp-put-2rails", "read-bw-2pairs"),
                       ("write-bw-2pairs", "write-bw-1pair"), ("read-bw-2pairs", "read-bw-1pair")]:
        if ours in rows and base in rows:
            out.append(rails_ratio(log, ours, base).line(f"{ours} / {base}"))
    return out


# --- benches/cpu-per-gib (issue 39: our CPU time per GiB moved) ------------------------------

GIB = 1 << 30

#: The tags benches/cpu_per_gib.py gives each profile sample: every tag one of whose prefixes
#: begins a function name on the sample's kernel call chain; "user" for a sample in user space
#: (no kernel chain), "kernel" for a kernel chain that matches none. Some tags classify the sample
#: (cpu_class); "file", "fault" and "idle" only say where the time went.
CPU_TAGS = (
    ("umem", ("ib_umem_",)),  # pinning a registration's pages (any NIC's driver does it on the host)
    ("rxe", ("rxe_",)),  # the rdma_rxe driver: ICRC, packets, the payload copies into MRs
    ("tcp", ("tcp_", "__tcp_")),  # the HTTP socket
    ("udp", ("udp", "__udp")),  # the UDP encapsulation rxe sends and receives its packets in
    ("netrx", ("net_rx_action", "__netif_receive_skb", "process_backlog", "netif_rx")),
    ("xmit", ("__dev_queue_xmit", "dev_hard_start_xmit")),
    ("veth", ("veth_",)),  # the virtual wire between the lane's two devices
    ("file", ("vfs_read", "vfs_write", "shmem_")),
    ("fault", ("exc_page_fault", "handle_mm_fault")),
    ("idle", ("do_idle",)),
)

#: The packet stack below the transport: the NIC's when no TCP frame is on the chain.
NIC_STACK_TAGS = frozenset({"udp", "netrx", "xmit", "veth"})
#: The classes of our own code: the client's process, the server's, and TCP work for either that
#: the kernel ran on another task (softirq on an idle CPU, ksoftirqd).
OURS = ("client", "server", "kernel")


def cpu_tags(kernel_frames) -> str:
    """The tags (comma-joined, in CPU_TAGS order) of a sample whose kernel call chain, innermost
    first, names `kernel_frames`."""
    frames = list(kernel_frames)
    if not frames:
        return "user"
    tags = [tag for tag, prefixes in CPU_TAGS if any(f.startswith(prefixes) for f in frames)]
    return ",".join(tags) or "kernel"


def perf_script_samples(lines):
    """(pid, comm, nanoseconds, kernel frames innermost first) of each sample in the output of
    `perf script -F comm,pid,tid,period,ip,sym` of a profile recorded with --kernel-callchains
    (a sample in user space has no frames): a head line `COMM PID/TID PERIOD`, then one
    tab-indented `ADDRESS SYMBOL` line per frame, then a blank line."""
    head, frames = None, []
    for line in lines:
        if line.startswith("\t"):
            parts = line.split(None, 1)
            frames.append(parts[1].strip() if len(parts) > 1 else "[unknown]")
        elif line.strip():
            if head:
                yield (*head, frames)
            *comm, ids, period = line.split()
            head, frames = (int(ids.split("/")[0]), " ".join(comm), int(period)), []
    if head:
        yield (*head, frames)


def cpu_class(role: str, tags: str) -> str:
    """Whose work a sample is. role: "client" or "server" (our two processes), "idle" (pid 0) or
    "other". The rule, in order:
      1. "umem" (registration pinning): the process it ran in (the host's work with any NIC);
      2. "rxe" (the rdma_rxe driver anywhere on the chain): "nic", the work an RDMA NIC does
         itself (packets, ICRC, copies into registered memory);
      3. "tcp" (the HTTP socket): ours, the process it ran in, else "kernel" (ours, run on
         another task);
      4. the packet stack without TCP ("udp", "netrx", "xmit", "veth"): "nic";
      5. anything else: the process it ran in ("client", "server"), or "idle", or "other"."""
    have = set(tags.split(","))
    ours = role if role in ("client", "server") else None
    if "umem" in have:
        return ours or "other"
    if "rxe" in have:
        return "nic"
    if "tcp" in have:
        return ours or "kernel"
    if have & NIC_STACK_TAGS:
        return "nic"
    return ours or ("idle" if role == "idle" else "other")


@dataclass
class CpuTransfer:
    """One profiled copy of a benches/cpu-per-gib log: its numbers and its CPU seconds by class."""

    round: int
    path: str
    op: str
    bytes: int
    seconds: float
    client_proc_s: float  # the client's utime+stime (wait4)
    server_proc_s: float  # the server's utime+stime delta (/proc/PID/stat)
    by_class: dict  # cpu_class -> CPU seconds in the profile

    def per_gib(self, cls: str) -> float:
        return self.by_class.get(cls, 0.0) / (self.bytes / GIB)

    def ours_per_gib(self) -> float:
        return sum(self.per_gib(c) for c in OURS)


def cpu_log(log: str) -> tuple:
    """(transfers, memcpy MB/s of each run) from a benches/cpu-per-gib log: the lines
    `transfer ROUND PATH OP BYTES SECONDS CLIENT_CPU_S SERVER_CPU_S | ...`,
    `prof ROUND PATH OP ROLE COMM TAGS NS SAMPLES` and `rates {digest_rates' JSON}`."""
    heads, prof, memcpy = {}, {}, []
    for line in log.splitlines():
        parts = line.split()
        if line.startswith("transfer ") and len(parts) >= 8:
            key = (int(parts[1]), parts[2], parts[3])
            heads[key] = (int(parts[4]), float(parts[5]), float(parts[6]), float(parts[7]))
        elif line.startswith("prof ") and len(parts) == 9:
            key = (int(parts[1]), parts[2], parts[3])
            cls = cpu_class(parts[4], parts[6])
            by = prof.setdefault(key, {})
            by[cls] = by.get(cls, 0.0) + int(parts[7]) / 1e9
        elif line.startswith("rates {"):
            memcpy.append(float(json.loads(line[len("rates "):])["memcpy_mb_s"]))
    if not heads:
        raise ValueError("no `transfer` lines: not a benches/cpu-per-gib log")
    missing = sorted(k for k in heads if k not in prof)
    if missing:
        raise ValueError(f"transfers without a profile: {missing}")
    if not memcpy:
        raise ValueError("no `rates` line: the log has no memcpy rate")
    transfers = [CpuTransfer(k[0], k[1], k[2], *heads[k], prof[k]) for k in sorted(heads)]
    return transfers, memcpy


def cpu_of(transfers: list, path: str, op: str) -> list:
    found = [t for t in transfers if t.path == path and t.op == op]
    if not found:
        raise ValueError(f"no {path} {op} transfers in the log")
    return found


def cpu_memcpy_equivalents(log: str, path: str, op: str) -> Figure:
    """Our CPU time per GiB moved (client + server + our TCP work elsewhere; the NIC's own work
    left out, cpu_class) times this boot's one-thread memcpy rate: how many memcpy passes over
    the bytes our code's CPU time is worth. Median over the transfers, spread min-max."""
    transfers, memcpy = cpu_log(log)
    mine = cpu_of(transfers, path, op)
    gib_s = median(memcpy) * 1e6 / GIB
    values = [t.ours_per_gib() * gib_s for t in mine]
    nic = median(t.per_gib("nic") for t in mine)
    return Figure(median(values), min(values), max(values), len(mine),
                  f"{len(mine)} copies of {mine[0].bytes >> 20} MiB in {len({t.round for t in mine})} "
                  f"rounds; ours median {median(t.ours_per_gib() for t in mine):.2f} CPU-s/GiB",
                  f"one thread's memcpy of the same boot, {median(memcpy):.0f} MB/s "
                  f"(median of {len(memcpy)} runs)",
                  excluded=f"the NIC's own work, median {nic:.2f} CPU-s/GiB (cpu_class)")


def cpu_cores(memcpy_equivalents: float, nic_gb_s: float, host_memcpy_gb_s: float) -> float:
    """Cores our code needs to move `nic_gb_s` when one core copies `host_memcpy_gb_s`."""
    return nic_gb_s * memcpy_equivalents / host_memcpy_gb_s


def _spread(xs: list) -> str:
    return f"{median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"


#: How docs/perf.md's "Current figures" row names each path's figures (benches/figures).
CPU_LABELS = {"rdma": "RDMA", "rdma-v2": "hipobj-rc-v2", "http": "HTTP"}


def cpu_figures(log: str) -> list:
    """(label, figure) of each path and direction in the log, in the log's order: what the
    docs/perf.md row of the log shows ("RDMA GET", ...)."""
    transfers, _ = cpu_log(log)
    return [(f"{CPU_LABELS.get(path, path)} {op.upper()}", cpu_memcpy_equivalents(log, path, op))
            for path, op in dict.fromkeys((t.path, t.op) for t in transfers)]


def cpu_summary(log: str, host_memcpy_gb_s: float = 10.0) -> list:
    """The lines benches/cpu-per-gib prints: per path and direction the rate, CPU-s per GiB by
    class, the profile against the processes' own counters, the memcpy-equivalents figure and
    the cores it predicts at 25, 50 and 100 GB/s."""
    transfers, memcpy = cpu_log(log)
    out = [f"memcpy (one thread): {_spread(memcpy)} MB/s over {len(memcpy)} runs"]
    for path, op in dict.fromkeys((t.path, t.op) for t in transfers):
        mine = cpu_of(transfers, path, op)
        col = lambda f: _spread([f(t) for t in mine])  # noqa: E731
        out.append(
            f"{path} {op}: n={len(mine)}, {col(lambda t: t.bytes / t.seconds / 1e6)} MB/s; CPU-s/GiB "
            f"client {col(lambda t: t.per_gib('client'))}, server {col(lambda t: t.per_gib('server'))}, "
            f"kernel {col(lambda t: t.per_gib('kernel'))}, ours {col(CpuTransfer.ours_per_gib)}; "
            f"NIC (left out) {col(lambda t: t.per_gib('nic'))}, NIC share of ours+NIC "
            f"{col(lambda t: t.per_gib('nic') / (t.per_gib('nic') + t.ours_per_gib()))}; profile / "
            f"process counters: client {col(lambda t: t.per_gib('client') * t.bytes / GIB / t.client_proc_s)}, "
            f"server {col(lambda t: t.per_gib('server') * t.bytes / GIB / max(t.server_proc_s, 1e-9))}")
        fig = cpu_memcpy_equivalents(log, path, op)
        out.append(fig.line(f"{path} {op} memcpy-equivalents"))
        cores = ", ".join(f"{g} GB/s {cpu_cores(fig.value, g, host_memcpy_gb_s):.1f}" for g in (25, 50, 100))
        out.append(f"  cores at a host memcpy of {host_memcpy_gb_s:g} GB/s per core: {cores}")
    out.append("docs/perf.md row: " + "; ".join(fig.short(label) for label, fig in cpu_figures(log)))
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv))


# --- benches/batch-threads (issue 50: one thread with a batch queue against 16 threads) --------

def batch_rounds(log: str, mode: str, size: int) -> list:
    """[(rate, CPU us per op)] of `mode` ("queue" or "threads") at `size`, in round order, from
    the `round R MODE size S ops N wall_s W ops_per_s O mb_per_s M cpu_us_per_op C` lines; the
    rate is ops/s up to 64 KiB, MB/s above."""
    out = []
    for line in log.splitlines():
        p = line.split()
        if len(p) == 15 and p[0] == "round" and p[2] == mode and int(p[4]) == size:
            rate = float(p[10]) if size <= 64 * 1024 else float(p[12])
            out.append((rate, float(p[14])))
    if not out:
        raise ValueError(f"no {mode} rounds of size {size}: not a benches/batch-threads log")
    return out


def batch_ratio(log: str, size: int, what: str) -> Figure:
    """The queue's median over the threads' (`what`: "rate" or "cpu"), with the spread of the
    per-pair ratios (each queue round against the threads round after it)."""
    i = 0 if what == "rate" else 1
    q = [r[i] for r in batch_rounds(log, "queue", size)]
    t = [r[i] for r in batch_rounds(log, "threads", size)]
    pairs = [a / b for a, b in zip(q, t)]
    unit = ("ops/s" if size <= 64 * 1024 else "MB/s") if what == "rate" else "CPU us per operation"
    return Figure(median(q) / median(t), min(pairs), max(pairs), len(q),
                  f"{len(q)} rounds of each, alternating in one boot (spread: per-pair ratios)",
                  f"16 threads of the synchronous API ({median(t):.1f} {unit} median)")
