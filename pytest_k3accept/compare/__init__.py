"""Before and after: a session judged as a re-measurement of an earlier reproduction record.

``read`` loads and migrates a record of any schema version this release reads; ``diff``
lists the conditions that changed and compares the request sets; ``figures`` puts the
measured figures side by side; ``thresholds`` says what a regression is (the profile's
``[baseline]`` table); ``comparison`` ties them together; ``render`` writes text, Markdown,
HTML and plain data; ``command`` is ``k3accept compare``. Pure logic: no pytest import.
"""

from __future__ import annotations

from .comparison import Comparison, Comparisons, Unavailable, compare
from .read import Record, RecordError, read
from .thresholds import ThresholdError, Thresholds

__all__ = ["Comparison", "Comparisons", "Record", "RecordError", "ThresholdError",
           "Thresholds", "Unavailable", "compare", "read"]
