#!/usr/bin/env python3
"""Reads callgrind's output of each door and compares it with the recorded counts.

    counts.py compare DIR RECORD   exit 1 when a door's instructions (or allocations) per request
                                   grew by more than the threshold over RECORD
    counts.py record DIR RECORD    writes DIR's counts to RECORD

DIR holds DOOR.RUN.out (callgrind's file) and DOOR.requests (requests measured). With several
runs of a door, its count is their median and the spread (max - min) / median is printed.
Instructions are callgrind's Ir; allocations are the calls to malloc, calloc, realloc and the
aligned allocators, both counted only inside the measured phase of the server thread.
"""
import os
import re
import sys
import tomllib

THRESHOLD = 0.05
ALLOC = {"malloc", "calloc", "realloc", "posix_memalign", "aligned_alloc", "memalign"}


def read_out(path):
    """(instructions, allocation calls) of one callgrind output file."""
    names = {}
    instructions = None
    allocs = 0
    callee = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("cfn="):
                m = re.match(r"cfn=(?:\((\d+)\))?\s*(.*)", line.rstrip("\n"))
                ident, name = m.group(1), m.group(2)
                if ident is not None and name:
                    names[ident] = name
                callee = names.get(ident, name) if ident is not None else name
            elif line.startswith("fn="):
                m = re.match(r"fn=(?:\((\d+)\))?\s*(.*)", line.rstrip("\n"))
                if m.group(1) is not None and m.group(2):
                    names[m.group(1)] = m.group(2)
            elif line.startswith("calls="):
                if callee is not None and callee.split("'")[0] in ALLOC:
                    allocs += int(line.split("=", 1)[1].split()[0])
                callee = None
            elif line.startswith("summary:") or line.startswith("totals:"):
                instructions = int(line.split(":", 1)[1].split()[0])
    if instructions is None:
        raise SystemExit(f"{path}: no summary line (did the run end?)")
    return instructions, allocs


def measured(directory):
    """{door: (instructions per request, allocations per request, spread)}."""
    runs = {}
    for name in sorted(os.listdir(directory)):
        m = re.fullmatch(r"(\w+)\.(\d+)\.out", name)
        if not m:
            continue
        door = m.group(1)
        with open(os.path.join(directory, f"{door}.requests")) as f:
            requests = int(f.read().strip())
        ir, allocs = read_out(os.path.join(directory, name))
        runs.setdefault(door, []).append((ir / requests, allocs / requests))
    result = {}
    for door, values in runs.items():
        irs = sorted(v[0] for v in values)
        allocs = sorted(v[1] for v in values)
        mid = irs[len(irs) // 2] if len(irs) % 2 else (irs[len(irs) // 2 - 1] + irs[len(irs) // 2]) / 2
        spread = (irs[-1] - irs[0]) / mid if mid else 0.0
        result[door] = (round(mid), round(allocs[len(allocs) // 2], 1), spread, len(values))
    return result


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("compare", "record"):
        raise SystemExit(__doc__)
    mode, directory, record = sys.argv[1:]
    now = measured(directory)
    if mode == "record":
        lines = [
            "# Instructions and allocations per request through each door of a node, counted by",
            "# callgrind on the server thread only (crates/doors). Compared by",
            "# bench/doors/check.sh in CI: a door more than 5% above its figure fails. Update",
            "# with `bash bench/doors/check.sh --record` and say why in the commit message.",
            "",
        ]
        for door, (ir, allocs, _, _) in now.items():
            lines += [f"[{door}]", f"instructions = {ir}", f"allocations = {allocs}", ""]
        with open(record, "w") as f:
            f.write("\n".join(lines))
        print(f"recorded {len(now)} doors in {record}")
        return
    with open(record, "rb") as f:
        recorded = tomllib.load(f)
    failed = []
    fmt = "{:<16} {:>14} {:>14} {:>8} {:>10} {:>10} {:>8}  {}"
    print(fmt.format("door", "instructions", "recorded", "change", "allocs", "recorded", "spread", "verdict"))
    for door, (ir, allocs, spread, runs) in now.items():
        old = recorded.get(door)
        if old is None:
            print(fmt.format(door, ir, "-", "-", allocs, "-", "-", "NOT RECORDED"))
            failed.append(door)
            continue
        change = ir / old["instructions"] - 1
        alloc_growth = allocs - old["allocations"]
        verdict = "ok"
        if change > THRESHOLD:
            verdict = f"FAIL: more than {THRESHOLD:.0%} above the record"
        elif alloc_growth > 0.5 and alloc_growth > THRESHOLD * old["allocations"]:
            verdict = "FAIL: more allocations than the record"
        elif change < -THRESHOLD:
            verdict = "ok (below the record: --record to keep the win)"
        if verdict.startswith("FAIL"):
            failed.append(door)
        print(fmt.format(door, ir, old["instructions"], f"{change:+.1%}", allocs, old["allocations"],
                         f"{spread:.2%}" if runs > 1 else "-", verdict))
    for door in recorded:
        if door not in now:
            print(f"{door}: recorded but not measured")
    if failed:
        print(f"\ndoors above their record: {', '.join(failed)}. A deliberate change updates "
              "bench/doors/counts.toml (bash bench/doors/check.sh --record) and says why.")
        sys.exit(1)


if __name__ == "__main__":
    main()
