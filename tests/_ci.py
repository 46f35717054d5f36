"""Optional tools that CI installs: a test that needs one skips where it is missing, except where CI says it
installed it (``TENSORWIRE_CI_INSTALLED``, set by ``.ci/run`` to the tools whose install succeeded), where the same
absence is a failure. So a green CI run proves those tests ran instead of skipping."""

from __future__ import annotations

import os

import pytest

CI_ENV = "TENSORWIRE_CI_INSTALLED"


def installed_by_ci(tool: str) -> bool:
    """Whether ``.ci/run`` installed ``tool`` (``slurm``, ``chromium``, ``helm``) in this run."""
    return tool in os.environ.get(CI_ENV, "").split()


def skip_unless_ci_installed(tool: str, reason: str, module: bool = False) -> None:
    """Skip with ``reason`` (the whole module with ``module``), or fail where CI installed ``tool`` (its absence is
    then a broken install)."""
    if installed_by_ci(tool):
        pytest.fail(f"CI installed {tool} ({CI_ENV}), yet this test cannot find it: {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=module)
