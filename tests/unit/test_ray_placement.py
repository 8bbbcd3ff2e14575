"""Ray placement of a split load run (issue 20 item 4, observe/load/placement/ray.py): the
``cluster`` setting and its validation, the address ``"auto"`` stands for, and the bad input
that never reaches a cluster: Ray not installed (a message naming the extra), nothing
listening at the address (said at once), an address that accepts TCP but never answers
(bounded by ``connect_timeout``). The placement itself runs against a real two-node Ray
cluster in tests/live/test_ray_live.py."""

from __future__ import annotations

import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, cast

import pytest

from pytest_k3accept.observe.load.placement import PlacementError, named
from pytest_k3accept.observe.load.placement import ray as rayplace
from pytest_k3accept.observe.load.profile import LoadProfile, ProfileError
from pytest_k3accept.observe.load.profile import load as load_profile


@pytest.mark.parametrize("value", ["auto", "ray://head:10001", "ray://10.0.0.7", None])
def test_cluster_values_accepted(value: Any) -> None:
    assert LoadProfile().replace("t", cluster=value).cluster == value


@pytest.mark.parametrize("value", ["head:10001", "ray://", "ray://head:0", "ray://head:x",
                                   "ray://head:99999", "local", 7, True])
def test_bad_cluster_names_the_field(value: Any) -> None:
    with pytest.raises(ProfileError) as exc:
        LoadProfile().replace("load/big.toml", cluster=value)
    assert str(exc.value).startswith("load/big.toml: cluster: expected \"auto\" or "
                                     "\"ray://HOST:PORT\"")
    assert repr(value) in str(exc.value)


def test_cluster_from_a_profile_file(tmp_path: Path) -> None:
    path = tmp_path / "big.toml"
    path.write_text('processes = 2\ncluster = "ray://head:10001"\n')
    prof = load_profile(path)
    assert (prof.processes, prof.cluster) == (2, "ray://head:10001")
    assert prof.as_dict()["cluster"] == "ray://head:10001"
    path.write_text('cluster = "head:10001"\n')
    with pytest.raises(ProfileError, match=r"big.toml: cluster: expected"):
        load_profile(path)


def test_auto_is_ray_address_or_the_local_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert rayplace.address_of("auto") == "auto"
    monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")
    assert rayplace.address_of("auto") == "ray://head:10001"
    assert rayplace.address_of("ray://other:1") == "ray://other:1"
    assert rayplace.host_port("ray://head") == ("head", 10001)
    assert rayplace.host_port("ray://head:23") == ("head", 23)
    assert rayplace.host_port("10.0.0.1:6379") is None  # a GCS address: no client probe


def test_named_ray_placement_takes_the_cluster() -> None:
    place = named("ray", cluster="ray://head:10001")
    assert place.name == "ray" and isinstance(place, rayplace.RayPlacement)
    assert place.cluster == "ray://head:10001"


def test_ray_not_installed_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    place = rayplace.RayPlacement("ray://head:10001")
    with pytest.raises(PlacementError) as exc:
        place.capacity()
    text = str(exc.value)
    assert "cluster = 'ray://head:10001'" in text and "Ray is not installed" in text
    assert "pip install 'pytest-k3accept[ray]'" in text


class FakeRay:
    """What :func:`rayplace.connect` reads of ``ray``; ``init`` does what it is told."""

    __version__ = "2.60.0"

    def __init__(self, init: Any) -> None:
        self._init = init
        self.calls: list[str] = []

    def is_initialized(self) -> bool:
        return False

    def init(self, address: str, **kw: Any) -> None:
        self.calls.append(address)
        self._init()


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


def test_unreachable_cluster_is_said_at_once() -> None:
    port = _closed_port()
    fake = FakeRay(lambda: None)
    t0 = time.monotonic()
    with pytest.raises(PlacementError) as exc:
        rayplace.connect(fake, f"ray://127.0.0.1:{port}", timeout=30)
    assert time.monotonic() - t0 < 5
    assert fake.calls == []  # never handed to ray.init
    text = str(exc.value)
    assert text.startswith(f"Ray cluster 'ray://127.0.0.1:{port}' is not reachable: nothing "
                           f"accepts connections at 127.0.0.1:{port} (ConnectionRefusedError")


def test_a_silent_address_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    listener = socket.socket()  # accepts TCP, never speaks Ray's protocol
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    port = listener.getsockname()[1]
    release = threading.Event()
    monkeypatch.setenv("RAY_ADDRESS", f"ray://127.0.0.1:{port}")
    fake = FakeRay(lambda: release.wait(30))  # Ray's client would retry for ~30 s
    t0 = time.monotonic()
    try:
        with pytest.raises(PlacementError) as exc:
            rayplace.connect(fake, "auto", timeout=1.0)
    finally:
        release.set()
        listener.close()
    assert 0.9 < time.monotonic() - t0 < 5
    assert fake.calls == [f"ray://127.0.0.1:{port}"]
    assert str(exc.value).startswith(f"Ray cluster 'auto = ray://127.0.0.1:{port}' did not "
                                     "answer within 1 s")
    assert "Ray 2.60.0 on Python" in str(exc.value)


def test_a_failed_connect_says_what_ray_said(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)

    def refuse() -> None:  # ray.init(address="auto") with no cluster on this machine
        raise ConnectionError("Could not find any running Ray instance. Please specify ...")
    with pytest.raises(PlacementError) as exc:
        rayplace.connect(FakeRay(refuse), "auto", timeout=5)
    assert str(exc.value).startswith("Ray cluster 'auto': connecting failed after ")
    assert "ConnectionError: Could not find any running Ray instance" in str(exc.value)


def test_a_gcs_that_exits_the_driver_is_a_placement_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")  # a GCS address: a driver, no probe

    def gone() -> None:  # what ray.init does after minutes without a GCS
        raise SystemExit(15)
    with pytest.raises(PlacementError, match=r"'auto = 10.0.0.1:6379': connecting failed "
                                             r"after .*SystemExit"):
        rayplace.connect(FakeRay(gone), "auto", timeout=5)


class _Context:
    """Ray's Ray Client context as the placement reads it: a client worker or None, and a
    ``disconnect`` that wakes a ``ray.init`` blocked on its Init answer."""

    def __init__(self) -> None:
        self.client_worker: Any = None
        self.disconnects = 0
        self.shutdown = threading.Event()

    def disconnect(self) -> None:
        self.disconnects += 1
        self.shutdown.set()
        self.client_worker = None


class ClientRay(FakeRay):
    """A ``ray`` whose ``init`` goes through a Ray Client context (``util.client.ray``), as
    Ray 2.60's does: it refuses while the context holds a client worker, sets one before it
    asks the server, and disconnects when what it was told (``steps``, one per call) raises."""

    def __init__(self, *steps: Any) -> None:
        super().__init__(self._step)
        self.steps = list(steps)
        self.ctx = _Context()
        ctx = self.ctx

        class Stub:
            def get_context(self) -> _Context:
                return ctx
        self.util = type("util", (), {"client": type("client", (), {"ray": Stub()})})

    def _step(self) -> None:
        if self.ctx.client_worker is not None:
            raise Exception("ray.init() called, but ray client is already connected")
        self.ctx.shutdown.clear()
        self.ctx.client_worker = object()
        try:
            self.steps.pop(0)(self.ctx)
        except Exception:
            self.ctx.disconnect()
            raise


def _no_answer(ctx: _Context) -> None:
    """The proxier never answers Init: woken only by the client's own shutdown."""
    if ctx.shutdown.wait(30):
        raise ConnectionError("Data channel shut down")


def _init_failure(ctx: _Context) -> None:
    raise ConnectionAbortedError("Initialization failure from server:\nTraceback ...")


def test_a_ray_init_still_waiting_is_closed_so_the_next_connect_works(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    fake = ClientRay(_no_answer, lambda ctx: None)
    t0 = time.monotonic()
    with pytest.raises(PlacementError, match=r"'auto' did not answer within 0.5 s "
                                             r"\(ray.init still waiting; its connection is "
                                             r"being closed\)"):
        rayplace.connect(fake, "auto", timeout=0.5)
    assert time.monotonic() - t0 < 2
    assert rayplace.connect(fake, "auto", timeout=5) is True  # not "already connected"
    assert fake.calls == ["auto", "auto"] and fake.ctx.disconnects >= 1
    assert fake.ctx.client_worker is not None  # the new connection, not closed by the old


def test_a_ray_init_that_never_unwinds_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    release = threading.Event()
    fake = ClientRay(lambda ctx: release.wait(30), lambda ctx: None)  # deaf to its shutdown
    try:
        with pytest.raises(PlacementError, match="did not answer within 0.3 s"):
            rayplace.connect(fake, "auto", timeout=0.3)
        with pytest.raises(PlacementError, match=r"'auto': not connecting: an earlier "
                                                 r"ray.init of this process is still waiting"):
            rayplace.connect(fake, "auto", timeout=0.3)
        assert fake.calls == ["auto"]
    finally:
        release.set()
    assert rayplace.connect(fake, "auto", timeout=5) is True  # it unwound: connects again
    assert fake.calls == ["auto", "auto"] and not rayplace._unfinished


def test_a_half_open_client_left_by_anything_is_closed_first(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    fake = ClientRay(lambda ctx: None)
    fake.ctx.client_worker = object()  # half open, not initialized
    deadline = time.monotonic() + 5
    assert rayplace.connect(fake, "auto", timeout=5) is True
    assert fake.ctx.disconnects == 1 and time.monotonic() < deadline
    assert "half-open Ray Client connection" in caplog.text


def test_the_client_servers_start_failure_is_tried_once_more(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    fake = ClientRay(_init_failure, lambda ctx: None)
    assert rayplace.connect(fake, "auto", timeout=5) is True
    assert fake.calls == ["auto", "auto"] and fake.ctx.disconnects == 1
    assert "could not start this client's server" in caplog.text
    twice = ClientRay(_init_failure, _init_failure)
    with pytest.raises(PlacementError) as exc:
        rayplace.connect(twice, "auto", timeout=5)
    text = str(exc.value)
    assert "ConnectionAbortedError: Initialization failure from server" in text
    assert "a first try failed after " in text and "RAY_CLIENT_SERVER_CHECK_CHANNEL" in text
    assert twice.calls == ["auto", "auto"] and twice.ctx.client_worker is None

    def refused(ctx: _Context) -> None:
        raise ConnectionError("refused")
    other = ClientRay(refused, lambda ctx: None)
    with pytest.raises(PlacementError, match="ConnectionError: refused"):
        rayplace.connect(other, "auto", timeout=5)  # any other failure: no second try
    assert other.calls == ["auto"]


def test_run_load_with_an_unreachable_cluster_says_so_before_sending() -> None:
    import asyncio

    from pytest_k3accept.observe.endpoint.discover import Endpoint
    from pytest_k3accept.observe.load.runner import run_load

    pytest.importorskip("ray")  # the extra (tox -e tests installs it)
    port = _closed_port()
    profile = LoadProfile(processes=2, concurrency=2, requests=4,
                          cluster=f"ray://127.0.0.1:{port}")
    request = {"messages": [{"role": "user", "content": "hi"}]}
    t0 = time.monotonic()
    with pytest.raises(PlacementError, match=rf"nothing accepts connections at "
                                             rf"127.0.0.1:{port}"):
        asyncio.run(run_load(Endpoint("http://127.0.0.1:9", "m"), [request], profile))
    assert time.monotonic() - t0 < 5


def test_a_cluster_places_even_one_process() -> None:
    from pytest_k3accept.observe.endpoint.discover import Endpoint
    from pytest_k3accept.observe.load import split

    class Cluster:
        name = "ray"

        def capacity(self) -> int:
            return 4

    ep, place = Endpoint("http://127.0.0.1:9", "m"), cast(Any, Cluster())
    assert split.workers(ep, LoadProfile(cluster="ray://head:1"), place)[:2] == (1, place)
    assert split.workers(ep, LoadProfile(), place) == (1, None, None)  # no cluster: here
