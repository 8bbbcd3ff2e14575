"""Target load: request sets, load profiles, the bounded runner and its statistics.

Modules: :mod:`.requestset` (JSONL / agent-set files), :mod:`.synthetic` (exact-length
requests measured with the server's ``/tokenize``), :mod:`.profile` (:class:`LoadProfile`),
:mod:`.runner` (:func:`run_load` -> :class:`LoadResult`), :mod:`.monitor` (``/metrics``
during a run), :mod:`.stats` (percentiles, summaries). SLOs and the headroom decision are checks:
:mod:`pytest_k3accept.checks.slo`, :mod:`pytest_k3accept.checks.headroom`. Importing this package opens no socket and imports
no HTTP library.
"""

from __future__ import annotations

from .profile import HeadroomSpec, LoadProfile, ProfileError
from .profile import load as load_profile
from .requestset import ChatRequest, RequestSet, RequestSetError
from .requestset import load as load_request_set
from .result import LoadResult, Progress
from .runner import run_load

__all__ = [
    "ChatRequest", "HeadroomSpec", "LoadProfile", "LoadResult", "ProfileError", "Progress",
    "RequestSet", "RequestSetError", "load_profile", "load_request_set", "run_load",
]
