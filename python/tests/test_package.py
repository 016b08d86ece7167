"""The package itself: import without torch, exception mapping, descriptors, docstrings."""

import importlib
import subprocess
import sys

import pytest

import rdmakit
from conftest import undocumented
from rdmakit import Errc, Status


def test_import_does_not_import_torch():
    code = "import sys, rdmakit; assert 'torch' not in sys.modules, 'rdmakit imported torch'"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    "errc,status,cls,builtin",
    [
        (Errc.INVALID_ARGUMENT, Status.SUCCESS, rdmakit.InvalidArgumentError, ValueError),
        (Errc.TIMEOUT, Status.SUCCESS, rdmakit.TimeoutError, TimeoutError),
        (Errc.CONNECTION_REFUSED, Status.SUCCESS, rdmakit.ConnectionRefusedError, ConnectionRefusedError),
        (Errc.CONNECTION_BROKEN, Status.SUCCESS, rdmakit.ConnectionBrokenError, ConnectionError),
        (Errc.STALE_DESCRIPTOR, Status.SUCCESS, rdmakit.StaleDescriptorError, rdmakit.Error),
        (Errc.NOT_SUPPORTED, Status.SUCCESS, rdmakit.NotSupportedError, NotImplementedError),
        (Errc.SYSTEM_ERROR, Status.SUCCESS, rdmakit.SystemCallError, OSError),
        (Errc.TRANSPORT_FAILURE, Status.REMOTE_ACCESS, rdmakit.RemoteAccessError, rdmakit.OperationError),
        (Errc.TRANSPORT_FAILURE, Status.FLUSHED, rdmakit.OperationError, rdmakit.Error),
    ],
)
def test_errors_map_to_the_hierarchy(errc, status, cls, builtin):
    with pytest.raises(cls) as caught:
        rdmakit._rdmakit._raise_for_test(errc, status, "the message")
    error = caught.value
    assert type(error) is cls
    assert isinstance(error, builtin) and isinstance(error, rdmakit.Error)
    assert error.errc == errc and error.status == status
    assert "the message" in str(error)


def test_descriptor_bytes_round_trip():
    with rdmakit.Context(transport="tcp") as ctx:
        buffer = bytearray(4096)
        access = rdmakit.Access.LOCAL_WRITE | rdmakit.Access.REMOTE_READ | rdmakit.Access.REMOTE_WRITE
        region = ctx.register(buffer, access)
        data = bytes(region.descriptor)
        assert len(data) == 48 and data == region.descriptor.to_bytes()
        back = rdmakit.RemoteRegion.from_bytes(data)
        assert back == region.descriptor and back.length == 4096 and back.addr == region.address
        assert rdmakit.RemoteRegion.from_hex(region.descriptor.to_hex()) == back
        assert back.access == access
        with pytest.raises(rdmakit.InvalidArgumentError):
            rdmakit.RemoteRegion.from_bytes(b"\0" * 47)
        with pytest.raises(rdmakit.InvalidArgumentError):
            rdmakit.RemoteRegion.from_bytes(bytes(48))


def test_unknown_option_is_named():
    with pytest.raises(rdmakit.InvalidArgumentError, match="colour"):
        rdmakit.Context(transport="tcp", colour="blue")
    with pytest.raises(rdmakit.Error, match="transport"):
        rdmakit.Context(transport="carrier-pigeon")


def test_describe_options_lists_every_option():
    names = {option["name"] for option in rdmakit.describe_options()}
    assert {"transport", "timeout_ms"} <= names


def test_every_described_option_is_a_context_keyword():
    # Each name reaches its setter (a wrong type names the option) rather than "unknown option".
    for name in (option["name"] for option in rdmakit.describe_options()):
        with pytest.raises(rdmakit.InvalidArgumentError, match=f"Context option '{name}': .* has the wrong type"):
            rdmakit.Context(**{name: object()})
    with pytest.raises(rdmakit.InvalidArgumentError, match="option 'timeout' set in code is no option"):
        rdmakit.Context(timeout=5)
    with pytest.raises(rdmakit.InvalidArgumentError, match="did you mean handshake_timeout_ms"):
        rdmakit.Context(transport="tcp", handshake_timeout_m=5)


def test_transport_options_come_from_their_tables():
    by_name = {option["name"]: option for option in rdmakit.describe_options()}
    # tcp is always built; its option is listed under its own layer, with the table's doc and default.
    assert by_name["handshake_timeout_ms"]["layer"] == "tcp"
    assert by_name["handshake_timeout_ms"]["default"] == "2000" and by_name["handshake_timeout_ms"]["doc"]
    assert by_name["timeout_ms"]["layer"] == "core"
    with rdmakit.Context(transport="tcp", handshake_timeout_ms=500, timeout_ms=3000) as ctx:
        config = {option["name"]: option["value"] for option in ctx.config()}
        assert config["handshake_timeout_ms"] == "500" and config["timeout_ms"] == "3000"
    with pytest.raises(rdmakit.InvalidArgumentError, match="handshake_timeout_ms"):
        rdmakit.Context(transport="tcp", handshake_timeout_ms=0)
    if "verbs" in {option["layer"] for option in by_name.values()}:
        # An option of another built transport is ignored by this one, as its variable would be.
        with rdmakit.Context(transport="tcp", device="no-such-device", mtu=1000) as ctx:
            assert "device" not in {option["name"] for option in ctx.config()}


def test_capabilities_list_every_field():
    with rdmakit.Context(transport="tcp") as ctx:
        caps = ctx.capabilities
    assert len(caps) == 16
    assert caps["device_memory_path"] == "staged"  # tcp moves device memory through host memory
    assert caps["message_cost_us"] >= 0 and isinstance(caps["bandwidth_bytes_per_us"], float)
    assert caps["kernel_bypass"] is False and isinstance(caps["max_message_size"], int)
    assert caps["address_prefix"] == ""


@pytest.mark.parametrize("module", ["rdmakit", "rdmakit.xfer", "rdmakit.ckpt"])
def test_every_public_name_has_a_docstring(module):
    # rdmakit.distributed needs torch: test_torch_backend.py checks it.
    missing = undocumented(importlib.import_module(module))
    assert not missing, f"{module}: no docstring: {missing}"


def test_type_stubs_cover_the_extension():
    import ast
    import pathlib

    stub = pathlib.Path(rdmakit.__file__).with_name("_rdmakit.pyi")
    tree = ast.parse(stub.read_text())
    def members(node):
        names = {item.name for item in node.body if isinstance(item, ast.FunctionDef)}
        names |= {item.target.id for item in node.body if isinstance(item, ast.AnnAssign)}
        names |= {t.id for item in node.body if isinstance(item, ast.Assign) for t in item.targets}
        return names

    stubbed = {node.name: members(node) for node in tree.body if isinstance(node, ast.ClassDef)}
    functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    module = rdmakit._rdmakit
    missing = []
    for name, obj in vars(module).items():
        if name.startswith("__"):
            continue
        if isinstance(obj, type):
            if name not in stubbed:
                missing.append(name)
                continue
            if hasattr(obj, "__members__"):
                missing += [f"{name}.{m}" for m in obj.__members__ if m not in stubbed[name]]
                continue
            for attr in vars(obj):
                if not attr.startswith("_") and attr not in stubbed[name]:
                    missing.append(f"{name}.{attr}")
        elif callable(obj) and name not in functions:
            missing.append(name)
    assert not missing, f"not in _rdmakit.pyi: {missing}"
