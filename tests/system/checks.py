"""checks: the system tests' checklist: each check prints ok/FAIL and a failed one is remembered; summary()
prints the count and gives the exit code."""
# SPDX-License-Identifier: Apache-2.0

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def summary():
    print("%d checks failed" % len(failures) if failures else "all checks passed")
    return 1 if failures else 0
