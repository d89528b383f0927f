"""Options for the whole test suite."""
import os

# every compile the tests make, in this process or a child, checks each stage's result
# (devplan/wellformed.py), so that a pass breaking the IR fails where it breaks it
os.environ["DEVPLAN_CHECK_STAGES"] = "1"


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true",
                     help="rewrite tests/golden/ from what devplan produces now, instead of comparing")
