"""Production suite, checkout entry: ``pytest suites/production --k3-endpoint URL``.

The tests live in the package (``pytest_k3accept/suites/production/test_production.py``) so that an
installed plugin runs the same suite with ``pytest --pyargs pytest_k3accept.suites.production``.
Keep this directory without ``__init__.py`` (see docs/suites.md).
"""

from pytest_k3accept.suites.production.test_production import *  # noqa: F401,F403
