"""Options for the whole test suite."""


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true",
                     help="rewrite tests/golden/ from what devplan produces now, instead of comparing")
