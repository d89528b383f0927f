"""Options for the whole test suite."""

import argparse
import os

# every compile the tests make, in this process or a child, checks each stage's result
# (devplan/wellformed.py), so that a pass breaking the IR fails where it breaks it
os.environ["DEVPLAN_CHECK_STAGES"] = "1"


def pytest_addoption(parser):
    # one flag name everywhere: devplan's plugin's --devplan-update-golden rewrites tests/golden/ too;
    # the suite's old name stays, hidden, for muscle memory and old instructions
    parser.addoption("--update-golden", action="store_true", dest="devplan_update_golden", help=argparse.SUPPRESS)
