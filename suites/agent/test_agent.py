"""Agent suite, checkout entry: ``pytest suites/agent --k3-endpoint URL``.

The tests live in the package (``pytest_k3accept/suites/agent/test_agent.py``) so that an
installed plugin runs the same suite with ``pytest --pyargs pytest_k3accept.suites.agent``.
Keep this directory without ``__init__.py`` (see docs/suites.md).
"""

from pytest_k3accept.suites.agent.test_agent import *  # noqa: F401,F403
