"""Platform suite, checkout entry: ``pytest suites/platform --k3-endpoint URL``.

The tests live in the package (``pytest_k3accept/suites/platform/test_platform.py``) so that an
installed plugin runs the same suite with ``pytest --pyargs pytest_k3accept.suites.platform``.
Keep this directory without ``__init__.py`` (see docs/suites.md).
"""

from pytest_k3accept.suites.platform.test_platform import *  # noqa: F401,F403
