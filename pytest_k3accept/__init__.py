"""pytest-k3accept: acceptance tests for a live LLM deployment (Kimi K3 on vLLM).

The plugin registers through the ``pytest11`` entry point (``pytest_k3accept.plugin``) and is
inert until a test uses one of its ``k3_*`` fixtures or markers. The public, importable API:
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
