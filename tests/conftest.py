"""Session-wide test setup: the random seed every test draws from, and the `slow` lane.

Every random input comes from tests.helpers.rng, seeded from OPGEN_TEST_SEED (fixed by default;
`OPGEN_TEST_SEED=random` draws one). Hypothesis is seeded from it too unless --hypothesis-seed
is given. The seed is printed in the pytest header and with every failure, so a failing run can
be repeated exactly: `OPGEN_TEST_SEED=<seed> python -m pytest ...`.
"""

from __future__ import annotations

import os

import pytest

from opgen import plan
from tests.builds import ObjectBuilds
from tests.helpers import SEED

# The tests size their streamed cases from plan.STREAM_BYTES: the kernels stream from there
# (in this process and in the builds it runs) rather than from this machine's last-level cache
# or from a threshold `opgen tune` kept (opgen_stream_threshold; tests/test_c_api.py checks that
# reading)
os.environ["OPGEN_STREAM_BYTES"] = str(plan.STREAM_BYTES)
# and take threads from plan.PARALLEL_THRESHOLD, not from a threshold `opgen tune` kept in the
# cache of the machine that runs them (tests/test_tune.py checks that reading)
os.environ["OPGEN_PARALLEL_THRESHOLD"] = str(plan.PARALLEL_THRESHOLD)


def pytest_configure(config: pytest.Config) -> None:
    try:
        from hypothesis import core
    except ImportError:  # the test extra installs it; without it the property tests fail to import anyway
        return
    if config.getoption("hypothesis_seed", None) is None:
        core.global_force_seed = SEED


def pytest_report_header(config: pytest.Config) -> str:
    return f"OPGEN_TEST_SEED={SEED} (fixed unless set in the environment; 'random' draws one)"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    report = yield
    if report.failed:
        report.sections.append(("random seed", f"repeat with OPGEN_TEST_SEED={SEED}"))
    return report


# Tests that link the same object build (the session's object_builds, tests/builds.py, keyed by
# compiler and flags) or a module's sanitizer build: each group runs in one pytest-xdist worker,
# so that a build is made once, not once per worker, while different builds spread over the
# workers. A test put in the wrong group still passes; its build is only made twice.
CC_PLAIN = "objects-cc-plain"  # tests/test_vendoring.py's STRICT, test_generated.py's "plain"


def shared_build(item: pytest.Item) -> str | None:
    """The xdist group of a test that shares a build, None for the others."""
    module = item.nodeid.partition("::")[0].rpartition("/")[2].removesuffix(".py")
    name = getattr(item, "originalname", item.name)
    callspec = getattr(item, "callspec", None)
    if module == "test_sanitizers":
        return "sanitizers"
    if name == "test_compiles_without_warnings" and callspec is not None:
        return CC_PLAIN if callspec.id == "plain" else f"objects-cc-{callspec.id}"
    if name in ("test_called_from_cpp", "test_readme_example_compiles_and_runs"):
        return CC_PLAIN
    if name == "test_plain_cc_build" and callspec is not None:
        cc, openmp = callspec.params["cc"], callspec.params["openmp"]
        return f"objects-{cc}-{'openmp' if openmp else 'plain'}"
    return None


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's hook, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        group = shared_build(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(scope="session")
def object_builds(tmp_path_factory: pytest.TempPathFactory) -> ObjectBuilds:
    """generated/ compiled once per compiler and flags for every test that links it (tests/builds.py)."""
    return ObjectBuilds(tmp_path_factory.mktemp("objects"))
