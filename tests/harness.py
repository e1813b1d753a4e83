"""tests/harness.py: the Python tests' check lines and their count, as tests/harness.h gives the C tests theirs.

    check = Checks("help")          # each line "PASS help/NAME: DETAIL" or "FAIL ..."
    check(ok, "name", "detail")
    return check.finish()           # prints "N passed, N failed[SUFFIX]"; the exit status, 1 when any failed
"""


class Checks:
    def __init__(self, suite):
        self.suite, self.passed, self.failed = suite, 0, 0

    def __call__(self, ok, name, detail=""):
        print(f"{'PASS' if ok else 'FAIL'} {self.suite}/{name}{': ' + detail if detail else ''}")
        self.passed, self.failed = self.passed + bool(ok), self.failed + (not ok)

    def finish(self, suffix=""):
        print(f"{self.passed} passed, {self.failed} failed{suffix}")
        return 1 if self.failed else 0
