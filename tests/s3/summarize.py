#!/usr/bin/env python3
"""Summarise ceph/s3-tests junit results per group for one or more servers, check the baseline.

Used by scripts/s3-conformance; reads only the standard library.

Every collected case of hipobj-server lands in exactly one bucket of the issue-11 account:
passed, failed-and-excluded (by the reason in tests/s3/excluded.txt), failed-and-not-excluded
(a GAP), or skipped; cases outside the issue's groups are counted apart. A baseline file
records the pass count and every case's outcome per server; a run fails when hipobj-server
passes fewer cases than recorded.
"""
import argparse
import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter, OrderedDict

OURS = "hipobj-server"
# The only reasons issue 11 allows for leaving a case of its groups failing.
ALLOWED_REASONS = ("second identity", "versioning", "encryption")


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
    """case base name -> reason text"""
    out = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, _, reason = line.partition(" ")
            out[name] = reason.strip()
    return out


def reason_kind(reason):
    """The kind of an exclusion: the text before its first ':'."""
    return reason.split(":", 1)[0].strip()


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


def failed(outcome):
    return outcome in ("failed", "error")


def read_baseline(path):
    """(hipobj-server's recorded pass count or None, {case: outcome} recorded for it)"""
    count, cases = None, {}
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(f"{OURS} passed "):
                    count = int(line.split()[2])
                elif line.startswith("case "):
                    fields = line.split()
                    if len(fields) >= 3:
                        cases[fields[1]] = fields[2]
    except FileNotFoundError:
        pass
    return count, cases


def write_baseline(path, servers, totals, note):
    with open(path, "w") as f:
        f.write("# ceph/s3-tests test_s3.py results recorded by scripts/s3-conformance --record; a run\n")
        f.write(f"# fails when {OURS} passes fewer cases than recorded here.\n")
        if note:
            f.write(f"# {note}\n")
        for s, (p, t) in totals.items():
            f.write(f"{s} passed {p} of {t}\n")
        names = list(servers)
        f.write("# case <name> " + " ".join(f"<{n}>" for n in names) + "\n")
        for case in sorted(set().union(*[set(r) for r in servers.values()])):
            outcomes = " ".join(servers[n].get(case, "absent") for n in names)
            f.write(f"case {case} {outcomes}\n")


def print_group_table(servers, groups):
    names = [g for g, _ in groups] + ["other"]
    width = max(len(n) for n in names) + 2
    header = "group".ljust(width) + "".join(s.rjust(22) for s in servers)
    print(header)
    print("-" * len(header))
    for g in names:
        row = g.ljust(width)
        for res in servers.values():
            cases = [c for c in res if group_of(c, groups) == g and res[c] != "skipped"]
            passed = sum(1 for c in cases if res[c] == "passed")
            row += f"{passed:>5} / {len(cases):<4} passed".rjust(22)
        print(row)
    totals = OrderedDict()
    for s, res in servers.items():
        counted = [c for c in res if res[c] != "skipped"]
        totals[s] = (sum(1 for c in counted if res[c] == "passed"), len(counted))
    print("-" * len(header))
    print("TOTAL".ljust(width) + "".join(f"{p:>5} / {t:<4} passed".rjust(22) for p, t in totals.values()))
    for s, res in servers.items():
        p, t = totals[s]
        skipped = sum(1 for c in res if res[c] == "skipped")
        print(f"{s}: {len(res)} cases collected: passed {p}, failed {t - p}, skipped {skipped}")
    return totals


def print_group_account(ours, groups, excluded):
    """The issue-11 account of hipobj-server's cases in the groups; returns the GAP cases."""
    in_groups = {c: o for c, o in ours.items() if group_of(c, groups) != "other"}
    passed = [c for c, o in in_groups.items() if o == "passed"]
    skipped = [c for c, o in in_groups.items() if o == "skipped"]
    failing = [c for c, o in in_groups.items() if failed(o)]
    excl = [c for c in failing if base_name(c) in excluded]
    gaps = sorted(c for c in failing if base_name(c) not in excluded)
    by_kind = Counter(reason_kind(excluded[base_name(c)]) for c in excl)
    print(f"\nissue-11 groups, {OURS}: {len(in_groups)} cases collected "
          f"(parametrised cases count once per parameter set)")
    print(f"  passed                              {len(passed):>4}")
    print(f"  failed, excluded (allowed reasons)  {sum(by_kind[k] for k in ALLOWED_REASONS):>4}")
    for k in ALLOWED_REASONS:
        print(f"      {k:<32}{by_kind[k]:>4}")
    others = sorted(k for k in by_kind if k not in ALLOWED_REASONS)
    print(f"  failed, excluded (other reasons)    {sum(by_kind[k] for k in others):>4}")
    for k in others:
        print(f"      {k:<32}{by_kind[k]:>4}")
    print(f"  failed, not excluded (GAP)          {len(gaps):>4}")
    print(f"  skipped                             {len(skipped):>4}")
    outside = {c: o for c, o in ours.items() if group_of(c, groups) == "other"}
    if outside:
        n_pass = sum(1 for o in outside.values() if o == "passed")
        print(f"  (outside the groups: {len(outside)} cases, {n_pass} passed)")
    for c in gaps:
        print(f"  GAP {group_of(c, groups)}: {c}")
    for c in sorted(excl):
        reason = excluded[base_name(c)]
        if reason_kind(reason) not in ALLOWED_REASONS:
            print(f"  EXCLUDED ({reason_kind(reason)}) {group_of(c, groups)}: {c}")
    for c in sorted(skipped):
        print(f"  SKIPPED {group_of(c, groups)}: {c}")
    # Exclusions no collected case needs any more (every instance passed).
    stale = sorted(
        name for name in excluded
        if any(base_name(c) == name for c in ours)
        and all(ours[c] == "passed" for c in ours if base_name(c) == name)
    )
    for name in stale:
        print(f"  STALE exclusion (every instance passed): {name}")
    return gaps


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
    ap.add_argument("--note", default="", help="a comment line for a recorded baseline")
    ap.add_argument("--narrowed", action="store_true")
    ap.add_argument("--differences", metavar="A,B",
                    help="list the cases whose outcome differs between results A and B")
    ap.add_argument("--ours", default="hipobj-server",
                    help="the result whose count the baseline holds")
    args = ap.parse_args()
    global OURS
    OURS = args.ours

    groups = load_groups(args.groups)
    excluded = load_excluded(args.excluded)
    servers = OrderedDict()
    for spec in args.result:
        name, _, path = spec.partition("=")
        servers[name] = load_results(path)

    totals = print_group_table(servers, groups)
    ours = servers.get(OURS)
    if ours is not None:
        print_group_account(ours, groups, excluded)
    if args.differences:
        a, _, b = args.differences.partition(",")
        print_differences(a, servers.get(a, {}), b, servers.get(b, {}))
    if args.elapsed:
        print(f"\nrun time {args.elapsed} s")

    if args.narrowed or ours is None:
        print("narrowed selection: baseline not checked")
        return 0
    passed = totals[OURS][0]
    baseline, recorded = read_baseline(args.baseline)
    regressed = sorted(c for c, o in recorded.items() if o == "passed" and failed(ours.get(c, "")))
    for c in regressed:
        print(f"  REGRESSED (passed when recorded): {c}")
    if args.record:
        write_baseline(args.baseline, servers, totals, args.note)
        print(f"recorded in {args.baseline}: {OURS} passed {passed} (was {baseline})")
        return 0
    if baseline is None:
        print(f"no baseline in {args.baseline}; record one with --record", file=sys.stderr)
        return 1
    if passed < baseline:
        print(f"FAIL: {OURS} passed {passed} < baseline {baseline}", file=sys.stderr)
        return 1
    print(f"ok: {OURS} passed {passed} >= baseline {baseline}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
