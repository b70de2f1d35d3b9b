#!/usr/bin/env python3
"""Summarise ceph/s3-tests junit results per group for one or more servers, check the baseline.

Used by scripts/s3-conformance; reads only the standard library.
"""
import argparse
import re
import sys
import xml.etree.ElementTree as ET
from collections import OrderedDict


def load_groups(path):
    groups = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, _, regex = line.partition("|")
            groups.append((name.strip(), re.compile(regex.strip())))
    return groups


def load_excluded(path):
    """case name -> reason"""
    out = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, _, reason = line.partition(" ")
            out[name] = reason.strip()
    return out


def load_results(path):
    """case name (with parameters) -> 'passed' | 'failed' | 'error' | 'skipped'"""
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name")
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = "failed" if child.tag == "failure" else child.tag
                break
        # A case erroring in teardown after passing appears twice; the worst outcome wins.
        if out.get(name) in ("failed", "error"):
            continue
        out[name] = outcome
    return out


def base_name(case):
    return case.split("[", 1)[0]


def group_of(case, groups):
    for name, regex in groups:
        if regex.search(base_name(case)):
            return name
    return "other"


def read_baseline(path):
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("hipobj-server passed "):
                    return int(line.split()[2])
    except FileNotFoundError:
        return None
    return None


def print_differences(a, ra, b, rb):
    """Cases that pass on one server and not on the other (skips and cases run on one only apart)."""
    diff = sorted(
        c for c in set(ra) & set(rb)
        if "skipped" not in (ra[c], rb[c]) and (ra[c] == "passed") != (rb[c] == "passed")
    )
    only = sorted(set(ra) ^ set(rb))
    print(f"\ncases whose outcome differs between {a} and {b}: {len(diff)}")
    for c in diff:
        print(f"  DIFF {c}: {a} {ra[c]}, {b} {rb[c]}")
    if only:
        print(f"cases reported by one of them only: {len(only)}")
        for c in only:
            print(f"  ONLY {c}: {a} {ra.get(c, '-')}, {b} {rb.get(c, '-')}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--result", action="append", required=True, help="NAME=junit.xml")
    ap.add_argument("--groups", required=True)
    ap.add_argument("--excluded", required=True)
    ap.add_argument("--baseline", required=True)
    ap.add_argument("--elapsed", type=int, default=0)
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--narrowed", action="store_true")
    ap.add_argument("--differences", metavar="A,B",
                    help="list the cases whose outcome differs between results A and B")
    args = ap.parse_args()

    groups = load_groups(args.groups)
    excluded = load_excluded(args.excluded)
    servers = OrderedDict()
    for spec in args.result:
        name, _, path = spec.partition("=")
        servers[name] = load_results(path)

    names = [g for g, _ in groups] + ["other"]
    width = max(len(n) for n in names) + 2
    header = "group".ljust(width) + "".join(s.rjust(22) for s in servers)
    print(header)
    print("-" * len(header))
    totals = {s: [0, 0] for s in servers}
    for g in names:
        row = g.ljust(width)
        for s, res in servers.items():
            cases = [c for c in res if group_of(c, groups) == g and res[c] != "skipped"]
            passed = sum(1 for c in cases if res[c] == "passed")
            row += f"{passed:>5} / {len(cases):<4} passed".rjust(22)
        print(row)
    for s, res in servers.items():
        counted = [c for c in res if res[c] != "skipped"]
        totals[s] = [sum(1 for c in counted if res[c] == "passed"), len(counted)]
    print("-" * len(header))
    print("TOTAL".ljust(width) + "".join(f"{p:>5} / {t:<4} passed".rjust(22) for p, t in totals.values()))
    for s, res in servers.items():
        p, t = totals[s]
        skipped = sum(1 for c in res if res[c] == "skipped")
        print(f"{s}: passed {p}, failed {t - p}, skipped {skipped}")

    ours = servers.get("hipobj-server", {})
    gaps = sorted(
        c for c in ours
        if group_of(c, groups) != "other" and ours[c] in ("failed", "error")
        and base_name(c) not in excluded
    )
    excl_failing = sorted(
        c for c in ours
        if group_of(c, groups) != "other" and ours[c] in ("failed", "error")
        and base_name(c) in excluded
    )
    print(f"\nlisted groups, hipobj-server: {len(excl_failing)} failing cases excluded "
          f"(tests/s3/excluded.txt), {len(gaps)} failing cases not excluded:")
    for c in gaps:
        print(f"  GAP {group_of(c, groups)}: {c}")
    if args.differences:
        a, _, b = args.differences.partition(",")
        print_differences(a, servers.get(a, {}), b, servers.get(b, {}))
    if args.elapsed:
        print(f"\nrun time {args.elapsed} s")

    if args.narrowed:
        print("narrowed selection: baseline not checked")
        return 0
    passed = totals.get("hipobj-server", [0, 0])[0]
    baseline = read_baseline(args.baseline)
    if args.record:
        with open(args.baseline, "w") as f:
            f.write("# Cases of ceph/s3-tests test_s3.py that hipobj-server passes; scripts/s3-conformance\n")
            f.write("# fails when a run passes fewer. Re-record with scripts/s3-conformance --record.\n")
            for s, (p, t) in totals.items():
                f.write(f"{s} passed {p} of {t}\n")
        print(f"recorded: hipobj-server passed {passed} (was {baseline})")
        return 0
    if baseline is None:
        print(f"no baseline in {args.baseline}; record one with --record", file=sys.stderr)
        return 1
    if passed < baseline:
        print(f"FAIL: hipobj-server passed {passed} < baseline {baseline}", file=sys.stderr)
        return 1
    print(f"ok: hipobj-server passed {passed} >= baseline {baseline}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
