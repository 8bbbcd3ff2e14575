"""The synthetic request set on an endpoint that cannot build it (no vLLM ``/tokenize``)."""

from __future__ import annotations

import pytest
class _Gateway:
    """A client whose /tokenize a gateway answers 404, or in another shape."""

    base_url = "http://gateway:8080"

    def __init__(self, shape: str) -> None:
        self.shape = shape

    async def tokenize(self, **_: object) -> list[int]:
        import httpx

        if self.shape == "404":
            req = httpx.Request("POST", f"{self.base_url}/tokenize")
            raise httpx.HTTPStatusError("404", request=req,
                                        response=httpx.Response(404, request=req))
        raise KeyError("tokens")


@pytest.mark.parametrize("shape, said", [("404", "answered HTTP 404"),
                                         ("other", "answered in another shape")])
def test_an_endpoint_without_tokenize_is_one_clear_line(shape: str, said: str) -> None:
    import asyncio

    from pytest_k3accept.observe.load.profile import LoadProfile
    from pytest_k3accept.observe.load.synthetic import SyntheticError, generate

    with pytest.raises(SyntheticError) as err:
        asyncio.run(generate(_Gateway(shape), LoadProfile(requests=2, warmup=0)))
    text = str(err.value)
    assert "http://gateway:8080/tokenize" in text and said in text and "request_set" in text
