"""POC suite, checkout entry: ``pytest suites/poc --k3-endpoint URL``.

The tests live in the package (``pytest_k3accept/suites/poc/test_poc.py``) so that an
installed plugin runs the same suite with ``pytest --pyargs pytest_k3accept.suites.poc``.
Keep this directory without ``__init__.py`` (see docs/suites.md).
"""

from pytest_k3accept.suites.poc.test_poc import *  # noqa: F401,F403
