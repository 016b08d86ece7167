"""Fixtures of the rdmakit pytest suite: contexts per transport and connected pairs."""

import inspect
import threading

import pytest

import rdmakit

TRANSPORTS = ["tcp", "shm"]


def connect_pair(client_ctx, server_ctx, **kwargs):
    """A connected (client, server) pair; connect() runs in a thread because it waits for accept()."""
    listener = server_ctx.listen()
    result = {}

    def connect():
        try:
            result["conn"] = client_ctx.connect(listener.address, **kwargs.get("client", {}))
        except Exception as error:  # surfaced below, in the test's thread
            result["error"] = error

    thread = threading.Thread(target=connect)
    thread.start()
    try:
        server = listener.accept(timeout=10, **kwargs.get("server", {}))
    finally:
        thread.join()
    if "error" in result:
        raise result["error"]
    listener.close()
    return result["conn"], server


@pytest.fixture(params=TRANSPORTS)
def transport(request):
    return request.param


@pytest.fixture
def ctx(transport):
    with rdmakit.Context(transport=transport, timeout_ms=2000, rnr_timeout_ms=300) as context:
        yield context


@pytest.fixture
def peer_ctx(transport):
    with rdmakit.Context(transport=transport, timeout_ms=2000, rnr_timeout_ms=300) as context:
        yield context


@pytest.fixture
def pair(ctx, peer_ctx):
    client, server = connect_pair(ctx, peer_ctx)
    with client, server:
        yield client, server


def undocumented(module):
    """The public names of `module` (its __all__), and their public methods and properties, that have no
    docstring. Constants (instances of str, int, enum members) are documented where they are defined."""
    missing = []
    for name in module.__all__:
        obj = getattr(module, name)
        if not (callable(obj) or inspect.ismodule(obj)):
            continue
        if not (getattr(obj, "__doc__", None) or "").strip():
            missing.append(name)
        if isinstance(obj, type) and not hasattr(obj, "__members__"):  # enums: pybind11's own members
            for attr, member in vars(obj).items():
                if attr.startswith("_") or not callable(member) and not isinstance(member, property):
                    continue
                if not (getattr(member, "__doc__", None) or "").strip():
                    missing.append(f"{name}.{attr}")
    return missing
