"""Target load: request sets, load profiles, the bounded runner, statistics, SLOs, headroom.

Modules: :mod:`.requestset` (JSONL / agent-set files), :mod:`.synthetic` (exact-length
requests measured with the server's ``/tokenize``), :mod:`.profile` (:class:`LoadProfile`),
:mod:`.runner` (:func:`run_load` -> :class:`LoadResult`), :mod:`.monitor` (``/metrics``
during a run), :mod:`.stats` (percentiles, summaries), :mod:`.slo` (limits and breaches),
:mod:`.headroom` (the headroom decision). Importing this package opens no socket and imports
no HTTP library.
"""

from __future__ import annotations

from .headroom import Verdict, decide, failover_factor
from .profile import HeadroomSpec, LoadProfile, ProfileError
from .profile import load as load_profile
from .requestset import ChatRequest, RequestSet, RequestSetError
from .requestset import load as load_request_set
from .runner import LoadResult, Progress, run_load
from .slo import SLO, Breach, SLOError
from .slo import check as check_slos

__all__ = [
    "Breach", "ChatRequest", "HeadroomSpec", "LoadProfile", "LoadResult", "ProfileError",
    "Progress", "RequestSet", "RequestSetError", "SLO", "SLOError", "Verdict", "check_slos",
    "decide", "failover_factor", "load_profile", "load_request_set", "run_load",
]
