"""The wire between the grader and its worker: honest answers round-trip exactly; crafted answers
(huge, deep, slow, small on the wire but huge in memory) are refused before any tensor is built."""

from __future__ import annotations

import json
import os

import pytest
import torch

from autograder.protocol import wire


def _frame(header, tail: bytes = b"") -> bytes:
    text = header if isinstance(header, (bytes, str)) else json.dumps(header)
    data = text.encode() if isinstance(text, str) else text
    return len(data).to_bytes(4, "little") + data + tail


def _tensor(dtype: str, shape: list) -> dict:
    return {"d": {"status": "ok", "output": {"T": [dtype, shape]}}}


@pytest.fixture
def nothing_built(monkeypatch):
    """Make building a tensor fail loudly: a refusal must come before any tensor exists."""
    def refuse(*args, **kwargs):
        raise AssertionError("a tensor was built from a crafted answer")
    monkeypatch.setattr(torch, "frombuffer", refuse)
    monkeypatch.setattr(torch, "empty", refuse)


# ---- honest answers ----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", sorted(wire.DTYPES))
@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 0, 5), (2, 3, 4)])
def test_every_dtype_and_shape_round_trips_bit_exactly(dtype, shape):
    generator = torch.Generator().manual_seed(0)
    values = torch.randn(shape, generator=generator, dtype=torch.float64) * 50
    tensor = values.to(wire.DTYPES[dtype]) if dtype != "bool" else values > 0
    got = wire.decode(wire.encode({"output": tensor}))["output"]
    assert type(got) is torch.Tensor and got.dtype == tensor.dtype and got.shape == tensor.shape
    assert got.is_contiguous() and got.storage_offset() == 0
    assert torch.equal(got.view(torch.uint8) if got.dim() else got, tensor.view(torch.uint8)
                       if tensor.dim() else tensor)


def test_plain_values_round_trip_with_their_types():
    message = {"status": "ok", "n": -(2**63), "big": 2**64, "x": 0.1, "inf": float("inf"),
               "flags": [True, False, None], "pair": (1, "two", (3.0,)), "text": "é ∑ \x1b[31m",
               "nested": {"a": {"b": [{"c": ()}]}}, "empty": {}}
    got = wire.decode(wire.encode(message))
    assert got == message
    assert type(got["pair"]) is tuple and type(got["pair"][2]) is tuple and type(got["x"]) is float
    nan = wire.decode(wire.encode({"nan": float("nan")}))["nan"]
    assert nan != nan


def test_the_encoder_sends_plain_contiguous_copies():
    class Agreeable(torch.Tensor):
        def __eq__(self, other):
            return True

    base = torch.arange(12.0).reshape(3, 4)
    message = {"transposed": base.t(), "expanded": torch.ones(3).expand(1000, 3),
               "subclass": base.as_subclass(Agreeable), "grad": base.clone().requires_grad_(),
               "complex": torch.zeros(2, dtype=torch.complex64), "object": object()}
    got = wire.decode(wire.encode(message))
    assert torch.equal(got["transposed"], base.t()) and got["transposed"].is_contiguous()
    assert torch.equal(got["expanded"], torch.ones(1000, 3))
    assert type(got["subclass"]) is torch.Tensor and not got["grad"].requires_grad
    assert got["complex"] == {"__unsupported__": "a tensor of dtype complex64"}
    long = wire.decode(wire.encode({"message": "é" * (wire.MAX_STRING + 1)}))["message"]
    assert long.startswith("é" * 100) and long.endswith(" more characters]")
    assert got["object"] == {"__unsupported__": "object"}


# ---- crafted answers ---------------------------------------------------------------------------
CRAFTED = {
    "not a dict": _frame([1, 2]),
    "truncated": b"\x01\x00",
    "header longer than the frame": (100).to_bytes(4, "little") + b"{}",
    "header over the cap": (wire.MAX_HEADER_BYTES + 1).to_bytes(4, "little") + b"{}",
    "not UTF-8": _frame(b'{"d": {"a": "\xff\xfe"}}'),
    "not JSON": _frame("{'d': 1}"),
    "deep JSON": _frame("[" * 200_000 + "]" * 200_000),
    "deep values": _frame({"d": {"x": json.loads("[" * 40 + "]" * 40)}}),
    "deep dicts": _frame(json.loads('{"d": {"a": ' * 30 + "1" + "}}" * 30)),
    "huge integer": _frame('{"d": {"n": ' + "9" * 1_000_000 + "}}"),
    "huge float": _frame('{"d": {"x": 1.' + "5" * 1_000_000 + "}}"),
    "huge string": _frame({"d": {"s": "x" * (wire.MAX_STRING + 1)}}),
    "huge key": _frame({"d": {"k" * (wire.MAX_STRING + 1): 1}}),
    "many values": _frame({"d": {"v": [0] * (wire.MAX_VALUES + 1)}}),
    "many keys": _frame({"d": {str(i): 0 for i in range(wire.MAX_VALUES + 1)}}),
    "unknown tag": _frame({"pickle": "cos\nsystem\n"}),
    "two tags": _frame({"d": {}, "t": []}),
    "dict body not an object": _frame({"d": [1, 2]}),
    "dtype not allowed": _frame(_tensor("complex64", [1]), b"\0" * 8),
    "dtype object": _frame(_tensor("object", [1]), b"\0" * 8),
    "dtype not a string": _frame(_tensor(["float32"], [1]), b"\0" * 4),
    "descriptor with strides": _frame({"T": ["float32", [4], [0]]}, b"\0" * 4),
    "shape not a list": _frame({"d": {"x": {"T": ["float32", 4]}}}, b"\0" * 16),
    "negative dimension": _frame(_tensor("float32", [-1]), b"\0" * 4),
    "float dimension": _frame(_tensor("float32", [2.0]), b"\0" * 8),
    "bool dimension": _frame(_tensor("float32", [True]), b"\0" * 4),
    "too many dimensions": _frame(_tensor("float32", [1] * (wire.MAX_NDIM + 1)), b"\0" * 4),
    "zero-size with a huge shape": _frame(_tensor("float32", [0, 10**12])),
    "small on the wire, huge in memory": _frame(_tensor("float64", [2**24, 2**24]), b"\0" * 8),
    "expanded: one element for many": _frame(_tensor("float32", [10**6]), b"\0" * 4),
    "shape product overflowing int64": _frame(_tensor("uint8", [2**24] * 8), b"\0" * 64),
    "bytes after the last tensor": _frame(_tensor("float32", [1]), b"\0" * 8),
    "many tensors": _frame({"d": {"t": [{"T": ["float32", [0]]}] * (wire.MAX_TENSORS + 1)}}),
    "frame over the cap": b"\0" * (wire.MAX_FRAME_BYTES + 1),
}


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_crafted_answers_are_refused_before_anything_is_built(name, nothing_built):
    with pytest.raises(wire.WireError):
        wire.decode(CRAFTED[name])


def test_bool_bytes_other_than_0_and_1_are_refused():
    with pytest.raises(wire.WireError, match="bool"):
        wire.decode(_frame(_tensor("bool", [2]), b"\x01\x07"))


def test_decoding_has_a_deadline():
    honest = wire.encode({"values": list(range(5000))})
    assert len(wire.decode(honest)["values"]) == 5000
    with pytest.raises(wire.WireError, match="longer than"):
        wire.decode(honest, seconds=-1.0)


@pytest.mark.slow
def test_every_answer_of_a_full_grading_is_far_inside_the_caps(monkeypatch):
    """Grade the reference through the real worker, measuring each answer as the grader decodes
    it: full marks, and every answer at most a tenth of each cap (measured: frames up to ~0.7 MB,
    headers ~6 kB, ~800 values)."""
    from autograder.api import grade

    sizes, decode = [], wire.decode

    def measured(payload: bytes, *args):
        header = payload[4:4 + int.from_bytes(payload[:4], "little")]
        sizes.append((len(payload), len(header), header.count(b",") + header.count(b"[")))
        return decode(payload, *args)

    monkeypatch.setattr(wire, "decode", measured)
    graded = grade("course", seed=5)
    assert graded["score"] == graded["max_score"] > 0 and len(sizes) > 50
    frame, header, values = (max(column) for column in zip(*sizes))
    assert frame * 10 < wire.MAX_FRAME_BYTES and header * 10 < wire.MAX_HEADER_BYTES
    assert values * 10 < wire.MAX_VALUES


# ---- framing -----------------------------------------------------------------------------------
@pytest.fixture
def pipe():
    read_fd, write_fd = os.pipe()
    yield read_fd, write_fd
    for fd in (read_fd, write_fd):
        try:
            os.close(fd)
        except OSError:
            pass


def test_frames_round_trip(pipe):
    read_fd, write_fd = pipe
    wire.write_frame(write_fd, b"hello")
    wire.write_frame(write_fd, b"")
    assert wire.read_frame(read_fd, None) == b"hello" and wire.read_frame(read_fd, None) == b""


def test_an_oversized_length_is_refused_before_reading_the_payload(pipe):
    read_fd, write_fd = pipe
    os.write(write_fd, (2**62).to_bytes(8, "little"))
    with pytest.raises(wire.WireError, match="limit"):
        wire.read_frame(read_fd, None)


def test_a_silent_or_dead_writer_is_told_apart(pipe):
    import time

    read_fd, write_fd = pipe
    os.write(write_fd, (10).to_bytes(8, "little") + b"abc")  # a partial frame, then silence
    with pytest.raises(wire.Timeout):
        wire.read_frame(read_fd, time.monotonic() + 0.2)
    os.close(write_fd)
    with pytest.raises(wire.Closed):
        wire.read_frame(read_fd, time.monotonic() + 5)


def test_a_reader_that_stops_reading_cannot_block_the_writer(pipe):
    import time

    read_fd, write_fd = pipe
    os.set_blocking(write_fd, False)
    with pytest.raises(wire.Timeout):  # far more than a pipe's buffer, and nobody reads
        wire.write_frame(write_fd, b"\0" * (4 * 2**20), time.monotonic() + 0.2)
