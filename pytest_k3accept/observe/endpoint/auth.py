"""The request headers that carry the API key (shared by discovery and the client)."""

from __future__ import annotations


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The ``Authorization`` header for a key, or nothing."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}
