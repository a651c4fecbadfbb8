#!/usr/bin/env python3
"""What a ctest run of specdec's Criterion tests did, file by file: how many tests passed,
failed and skipped, and why each skipped.

usage: python3 scripts/test_report.py BUILD_DIR TEST_NAME...

Each test executable writes BUILD_DIR/criterion/NAME.json (CMakeLists.txt passes --json).
A test that needs a data file skips through tests/testutil.c's tu_need_path with the
message "absent: PATH (why)"; when PATH exists, that skip is a failure (the data is there
and the test did not run: it looked in the wrong place, or its condition is wrong), and so
is a test file that wrote no report. Other skips (no GPU, no python with torch) are
reported with their reason. Prints one line per file that skipped anything, then the
totals; exits 1 on a failure found here (ctest reports failing tests itself).
"""
import json
import os
import re
import sys

ABSENT = re.compile(r"^absent: (.*) \((.*)\)$", re.S)


def main(argv):
    if len(argv) < 3:
        print("usage: python3 scripts/test_report.py BUILD_DIR TEST_NAME...", file=sys.stderr)
        return 2
    build, names = argv[1], argv[2:]
    totals = {"tests": 0, "passed": 0, "skipped": 0, "failed": 0}
    problems = []
    lines = []
    for name in names:
        path = os.path.join(build, "criterion", name + ".json")
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                report = json.load(f)
        except (OSError, ValueError) as e:
            problems.append(f"{name}: no test report ({path}: {e})")
            continue
        n_pass = n_skip = n_fail = 0
        reasons = {}  # reason -> [count, files], in first-seen order
        for suite in report.get("test_suites", []):
            for t in suite.get("tests", []):
                status = t.get("status", "")
                if status == "PASSED":
                    n_pass += 1
                    continue
                if status != "SKIPPED":
                    n_fail += 1
                    continue
                n_skip += 1
                msgs = t.get("messages") or [""]
                msg = next((m for m in msgs if m.startswith("absent: ")), msgs[-1])
                m = ABSENT.match(msg)
                if m and os.path.exists(m.group(1)):
                    problems.append(f"{name}: {suite.get('name')}::{t.get('name')} skipped "
                                    f"for an absent {m.group(1)}, which is present: it must run")
                # absent files: grouped by why and folder, the file names listed
                key = (m.group(2), os.path.dirname(m.group(1))) if m else msg
                r = reasons.setdefault(key, [0, []])
                r[0] += 1
                if m and os.path.basename(m.group(1)) not in r[1]:
                    r[1].append(os.path.basename(m.group(1)))
        n = n_pass + n_skip + n_fail
        totals["tests"] += n
        totals["passed"] += n_pass
        totals["skipped"] += n_skip
        totals["failed"] += n_fail
        if n_skip:
            parts = []
            for key, (count, files) in reasons.items():
                tests = f" [{count} tests]" if count > 1 else ""
                if isinstance(key, tuple):
                    where = os.path.join(key[1], files[0] if len(files) == 1 else
                                         "{" + ", ".join(files) + "}")
                    parts.append(f"absent ({key[0]}){tests}: {where}")
                else:
                    parts.append(f"{key}{tests}")
            why = "; ".join(parts)
            lines.append(f"  {name}: {n} tests, {n_pass + n_fail} ran, {n_skip} skipped: {why}")
    print(f"{len(names)} test files, {totals['tests']} tests: {totals['passed']} passed, "
          f"{totals['failed']} failed, {totals['skipped']} skipped")
    for line in lines:
        print(line)
    for p in problems:
        print(f"FAIL {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
