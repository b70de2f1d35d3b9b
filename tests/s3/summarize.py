#!/usr/bin/env python3
"""Summarise ceph/s3-tests junit results per group for one or more servers, check the baseline.

Used by scripts/s3-conformance; reads only the standard library.

Every collected case of hipobj-server lands in exactly one bucket of the issue-11 account:
passed, failed-and-excluded (by the reason in tests/s3/excluded.txt), failed-and-not-excluded
(a GAP), or skipped; cases outside the issue's groups are counted apart. A baseline file
records the pass count and every case's outcome per server. The gate is per case: a run fails
when a case that passed when the baseline was recorded does not pass now, unless the allow-list
beside the baseline (`allow<suffix>.txt` for `baseline<suffix>.txt`: `case_id  reason` per line)
names it with its reason. A case that passes now and did not then is reported as a new pass (the
run stays green; recording the baseline again makes it part of the gate).
"""
import argparse
import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter, OrderedDict

OURS = "hipobj-server"
# The only reasons issue 11 allows for leaving a case of its groups failing.
ALLOWED_REASONS = ("second identity", "versioning", "encryption")


def list_entries(path, sep):
    """(line number, the text before the first `sep`, the rest) of each line of a list file that is
    neither blank nor a `#` comment, both parts stripped."""
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if line and not line.startswith("#"):
                first, _, rest = line.partition(sep)
                yield number, first.strip(), rest.strip()


def load_groups(path):
    return [(name, re.compile(regex)) for _, name, regex in list_entries(path, "|")]


def load_excluded(path):
    """case base name -> reason text"""
    return {name: reason for _, name, reason in list_entries(path, " ")}


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
    """(hipobj-server's recorded pass count or None, {case: outcome} recorded for it)

    The outcome column is the one the `# case <name> <server>...` header line names for OURS
    (the first column when there is no header)."""
    count, cases, column = None, {}, 2
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(f"{OURS} passed "):
                    count = int(line.split()[2])
                elif line.startswith("# case <name> "):
                    names = [n.strip("<>") for n in line.split()[3:]]
                    column = 2 + names.index(OURS) if OURS in names else 2
                elif line.startswith("case "):
                    fields = line.split()
                    if len(fields) > column:
                        cases[fields[1]] = fields[column]
    except FileNotFoundError:
        pass
    return count, cases


def default_allow_list(baseline):
    """tests/s3/baseline-groups.txt -> tests/s3/allow-groups.txt (and so for every baseline)."""
    folder, _, name = baseline.rpartition("/")
    allow = "allow" + name[len("baseline"):] if name.startswith("baseline") else "allow-" + name
    return f"{folder}/{allow}" if folder else allow


def load_allowed(path):
    """case id -> reason, from the allow-list beside the baseline; (entries, lines without reason)"""
    allowed, bad = {}, []
    try:
        for number, case, reason in list_entries(path, " "):
            if reason:
                allowed[case] = reason
            else:
                bad.append(f"{path}:{number}: {case} has no reason")
    except FileNotFoundError:
        pass
    return allowed, bad


def check_cases(recorded, ours, allowed):
    """(regressed and not allowed, regressed but allowed, new passes, stale allow-list entries)

    Regressed: passed when recorded and does not pass now (failed, error, skipped, or no longer
    collected); the outcome now is given with each case."""
    regressed = sorted(
        (c, ours.get(c, "not collected"))
        for c, o in recorded.items() if o == "passed" and ours.get(c) != "passed"
    )
    blocking = [(c, o) for c, o in regressed if c not in allowed]
    excused = [(c, o) for c, o in regressed if c in allowed]
    new_passes = sorted(c for c, o in ours.items() if o == "passed" and recorded.get(c) != "passed")
    regressed_names = {c for c, _ in regressed}
    stale = sorted(c for c in allowed if c not in regressed_names)
    return blocking, excused, new_passes, stale


def write_baseline(path, servers, totals, note):
    with open(path, "w") as f:
        f.write("# ceph/s3-tests test_s3.py results recorded by scripts/s3-conformance --record; a run\n")
        f.write(f"# fails when a case {OURS} passed here does not pass (allow-list beside this file).\n")
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
    ap.add_argument("--allow", help="the allow-list (default: allow<suffix>.txt beside "
                    "baseline<suffix>.txt)")
    ap.add_argument("--record-command", default="scripts/s3-conformance ... --record",
                    help="the command that records this baseline (printed with new passes)")
    ap.add_argument("--ours", default="hipobj-server",
                    help="the result whose count the baseline holds")
    args = ap.parse_args()
    global OURS
    OURS = args.ours

    if args.allow is None:
        args.allow = default_allow_list(args.baseline)
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
    if args.record:
        write_baseline(args.baseline, servers, totals, args.note)
        print(f"recorded in {args.baseline}: {OURS} passed {passed} (was {baseline})")
        return 0
    if baseline is None:
        print(f"no baseline in {args.baseline}; record one with --record", file=sys.stderr)
        return 1
    return gate(ours, recorded, args)


def gate(ours, recorded, args):
    """The per-case gate against the baseline and its allow-list; the exit status."""
    allowed, bad = load_allowed(args.allow)
    blocking, excused, new_passes, stale = check_cases(recorded, ours, allowed)
    recorded_passes = sum(1 for o in recorded.values() if o == "passed")
    print(f"\nper-case gate: {recorded_passes} cases passed in {args.baseline}; "
          f"{len(blocking)} of them fail now, {len(excused)} more fail as {args.allow} allows; "
          f"{len(new_passes)} new passes")
    for c, now in excused:
        print(f"  ALLOWED {c}: {now} ({allowed[c]})")
    for c in stale:
        print(f"  STALE allow-list entry (the case passes now or did not pass in the baseline): {c}")
    for c in new_passes:
        print(f"  NEW PASS {c}: {recorded.get(c, 'not in the baseline')} when recorded")
    if new_passes:
        print(f"  (green; to make them part of the gate, record the baseline again: {args.record_command})")
    for line in bad:
        print(f"FAIL: allow-list entry without a reason: {line}", file=sys.stderr)
    for c, now in blocking:
        print(f"FAIL: REGRESSED {c}: passed in the baseline, {now} now "
              f"(fix it, or list it with its reason in {args.allow})", file=sys.stderr)
    if blocking or bad:
        print(f"FAIL: {OURS}: {len(blocking)} case(s) that passed in {args.baseline} do not pass now",
              file=sys.stderr)
        return 1
    print(f"ok: every case {OURS} passed in {args.baseline} passes now or is allowed "
          f"({ours_passed(ours)} passed now)")
    return 0


def ours_passed(ours):
    return sum(1 for o in ours.values() if o == "passed")


if __name__ == "__main__":
    sys.exit(main())
