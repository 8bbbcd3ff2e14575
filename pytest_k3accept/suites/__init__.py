"""The ready acceptance suites, one per audience: ``poc``, ``platform``, ``agent``,
``production``. Every expectation comes from the deployment preset (``--k3-preset``) and the
load profile (``--k3-profile``); nothing in a suite file is meant to be edited.

Run from an installed package::

    pytest --pyargs pytest_k3accept.suites.poc --k3-endpoint http://host:8000

or from a checkout (``suites/<name>/`` holds thin entry files)::

    pytest suites/poc --k3-endpoint http://host:8000

See docs/suites.md.
"""
