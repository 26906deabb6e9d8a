"""Shared pytest configuration: Hypothesis profiles.

Profiles: ``ci`` (bounded examples, no deadline, derandomized so a CI run is reproducible
from the commit alone, prints a reproduction blob on failure) is what ``scripts/test.sh``
selects; ``dev`` is a quicker local loop with fresh random examples each run; ``thorough``
runs many more random examples (use it to hunt for bugs). Select with HYPOTHESIS_PROFILE.

The ``extended`` tier: tests marked ``@pytest.mark.extended`` repeat what others cover at a cost
the README's test command cannot carry (a Verilator build of their own, another option combination
of a long engine run); they are skipped, naming the tier, unless ``--extended`` is given
(``./scripts/test.sh --extended``).

Shared builds: a module whose tests share a Verilator build of their own is one
``xdist_group`` (``pytestmark``), which ``scripts/test.sh`` (``--dist loadgroup``) runs on one
worker; spread over both, one worker sat waiting on the build's lock for the other's build (about
570 worker-seconds of the fresh-cache suite on 2026-12-08).

Also: Ctrl-C is delivered as KeyboardInterrupt even when the suite was started with SIGINT
ignored (a background job of a non-interactive shell inherits that), so the tests of
interruption test the code, not how the suite was launched.
"""
import os
import signal

from hypothesis import HealthCheck, settings, Verbosity

_common = dict(deadline=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("ci", max_examples=25, derandomize=True, **_common)
settings.register_profile("dev", max_examples=10, **_common)
settings.register_profile("thorough", max_examples=500, **_common)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_addoption(parser):
    parser.addoption("--extended", action="store_true",
                     help="also run the extended tier (tests marked 'extended'; see tests/conftest.py)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--extended"):
        return
    import pytest
    skip = pytest.mark.skip(reason="extended tier: run with --extended")
    for item in items:
        if "extended" in item.keywords:
            item.add_marker(skip)
