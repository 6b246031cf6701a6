"""The wire between the grader and its worker: one framing, and an answer format the grader
controls.

Every message, both ways, is a frame: an 8-byte little-endian length, then that many bytes.

- Grader -> worker: a pickle. The worker is the untrusted side; it may unpickle what it likes.
- Worker -> grader: an answer, which the grader treats as hostile. Not a pickle and not
  `torch.save` (whose storages carry strides, offsets and sizes of the sender's choosing), but

      u32 header length | header: JSON, UTF-8 | tensor bytes, back to back

  The header holds plain values: null, booleans, numbers, strings and lists stay themselves;
  anything else is an object with one key: {"d": {...}} a dict (string keys), {"t": [...]} a tuple,
  {"T": [dtype, shape]} a tensor whose contiguous bytes are the next numel * itemsize bytes.

`decode` checks the frame size, the header size and (by counting separators) its number of values
before parsing it; then every number's length, the nesting depth, each string's length, and each
tensor's dtype (an allow-list), rank, dimensions, element count and byte count, before it builds a
single tensor; each tensor is then made from a private copy of exactly its bytes
(`torch.frombuffer`: contiguous, offset 0, no strides). The C JSON parser is the only part that
runs before these checks, and the caps bound its work (milliseconds); the rest runs against a
deadline. Anything else is a `WireError`.
"""

from __future__ import annotations

import json
import math
import os
import select
import time
from dataclasses import dataclass

import torch

# Caps, sized from the largest honest answers (the reference's answers to every check are a few
# hundred kilobytes at most, headers a few kilobytes) with a wide margin for honest variants.
MAX_FRAME_BYTES = 64 * 2**20  # a whole answer: header and tensor bytes
MAX_HEADER_BYTES = 2 * 2**20  # the JSON part
MAX_DEPTH = 24  # containers inside containers (the probes' answers use at most ~8)
MAX_VALUES = 50_000  # values of any kind in one answer
MAX_STRING = 64 * 2**10  # characters in one string (tracebacks are cut at 1,500)
MAX_NUMBER_CHARS = 40  # digits of one JSON number: int64 needs 20
MAX_TENSORS = 4_096
MAX_NDIM = 8
MAX_DIM = 2**24  # one dimension; a zero-size tensor of shape (0, 10**12) is refused too
DECODE_SECONDS = 5.0  # the time an answer of honest size takes is milliseconds

DTYPES = {str(dtype).removeprefix("torch."): dtype for dtype in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32,
    torch.int16, torch.int8, torch.uint8, torch.bool)}


# what the worker's side calls, bound at import: the stage child runs `seal`ed copies of these
# functions (`autograder.untrusted.seal`), whose globals are these bindings, made before the
# submission loads; what it patches in `os`, `json` or torch afterwards is not what they call
_READ, _WRITE, _SELECT, _NOW = os.read, os.write, select.select, time.monotonic
_AS_PLAIN, _DETACH, _CPU, _CONTIGUOUS, _RESHAPE, _VIEW, _NUMPY = (
    torch._C.TensorBase.as_subclass, torch._C.TensorBase.detach, torch._C.TensorBase.cpu,
    torch._C.TensorBase.contiguous, torch._C.TensorBase.reshape, torch._C.TensorBase.view,
    torch._C.TensorBase.numpy)
_TENSOR, _BYTES, _NO_TORCH_FUNCTION = torch.Tensor, torch.uint8, torch._C.DisableTorchFunction


def _unencodable(x):
    raise TypeError(f"{type(x).__name__} is not plain data")


# json.dumps(..., separators=(",", ":")) in C (json.dumps runs JSONEncoder, a Python class):
# no cycle markers (a tree has none), strings escaped to ASCII, NaN and infinities allowed
# (json.loads reads them back)
_JSON = json.encoder.c_make_encoder(None, _unencodable, json.encoder.encode_basestring_ascii,
                                    None, ":", ",", False, False, True)


class WireError(ValueError):
    """An answer the grader refuses to decode (the worker gets the "garbage" diagnosis)."""


class Timeout(Exception):
    """No whole frame arrived before the deadline."""


class Closed(Exception):
    """The other end closed the pipe (the worker died)."""


# ---- framing ---------------------------------------------------------------------------------
def write_frame(fd: int, payload: bytes, deadline: float | None = None) -> None:
    """Write one frame; with a deadline, `fd` should be non-blocking (a reader that stops reading
    must not hang the writer)."""
    view = memoryview(len(payload).to_bytes(8, "little") + payload)
    while view:
        if deadline is not None:
            remaining = deadline - _NOW()
            if remaining <= 0 or not _SELECT([], [fd], [], remaining)[1]:
                raise Timeout
        try:
            view = view[_WRITE(fd, view[: 1 << 20]):]
        except BlockingIOError:
            continue


def read_frame(fd: int, deadline: float | None, cap: int = MAX_FRAME_BYTES) -> bytes:
    """One frame from `fd` (no deadline: wait for ever); the length is checked against `cap`
    before any of the payload is read."""
    header = _read_exactly(fd, 8, deadline)
    length = int.from_bytes(header, "little")
    if length > cap:
        raise WireError(f"an answer of {length:,} bytes (the limit is {cap:,})")
    return _read_exactly(fd, length, deadline)


def _read_exactly(fd: int, count: int, deadline: float | None) -> bytes:
    data = bytearray()
    while len(data) < count:
        if deadline is not None:
            remaining = deadline - _NOW()
            if remaining <= 0 or not _SELECT([fd], [], [], remaining)[0]:
                raise Timeout
        chunk = _READ(fd, min(count - len(data), 1 << 20))
        if not chunk:
            raise Closed
        data += chunk
    return bytes(data)


# ---- encoding (the worker's side) --------------------------------------------------------------
def encode(value) -> bytes:
    """Plain data (see `autograder.untrusted.probes.to_plain`) -> answer bytes. Other types become a
    marker; a string longer than the grader accepts is cut (an honest but verbose error message)."""
    blobs = []

    def tree(x):
        if x is None or type(x) in (bool, float, int):
            return x
        if isinstance(x, str):
            x = str.__str__(x)
            cut = f" [... {len(x) - MAX_STRING // 2:,} more characters]"
            return x if len(x) <= MAX_STRING else x[:MAX_STRING // 2] + cut
        if isinstance(x, _TENSOR):
            with _NO_TORCH_FUNCTION():
                tensor = _CONTIGUOUS(_CPU(_DETACH(_AS_PLAIN(x, _TENSOR))))
                name = str(tensor.dtype).removeprefix("torch.")
                if name not in DTYPES:
                    return {"d": {"__unsupported__": f"a tensor of dtype {name}"}}
                blobs.append(_NUMPY(_VIEW(_RESHAPE(tensor, -1), _BYTES)).tobytes())
            return {"T": [name, list(tensor.shape)]}
        if isinstance(x, dict):
            return {"d": {str(k): tree(v) for k, v in x.items()}}
        if isinstance(x, list):
            return [tree(v) for v in x]
        if isinstance(x, tuple):
            return {"t": [tree(v) for v in x]}
        for plain in (bool, int, float):
            if isinstance(x, plain):
                return plain(x)
        return {"d": {"__unsupported__": type(x).__name__}}

    header = "".join(_JSON(tree(value), 0)).encode()
    return len(header).to_bytes(4, "little") + header + b"".join(blobs)


# ---- decoding (the grader's side) --------------------------------------------------------------
def _number(kind):
    def parse(text: str):
        if len(text) > MAX_NUMBER_CHARS:
            raise WireError(f"a number of {len(text):,} digits")
        return kind(text)
    return parse


@dataclass(frozen=True)
class _Pending:
    dtype: torch.dtype
    shape: list
    offset: int
    nbytes: int


class _Decoder:
    """Walks a parsed header: checks every value, claims each tensor's bytes, then builds."""

    def __init__(self, tail: memoryview, seconds: float):
        self.tail, self.offset, self.seconds = tail, 0, seconds
        self.deadline = time.monotonic() + seconds
        self.values = self.tensors = 0

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise WireError(f"decoding took longer than {self.seconds:g} s")

    def value(self, x, depth: int):
        self.values += 1
        if self.values > MAX_VALUES:
            raise WireError(f"more than {MAX_VALUES:,} values")
        if self.values % 1024 == 0:
            self.check_time()
        if depth > MAX_DEPTH:
            raise WireError(f"nested deeper than {MAX_DEPTH}")
        if x is None or type(x) in (bool, int, float):
            return x
        if type(x) is str:
            if len(x) > MAX_STRING:
                raise WireError(f"a string of {len(x):,} characters")
            return x
        if type(x) is list:
            return [self.value(v, depth + 1) for v in x]
        if type(x) is not dict or len(x) != 1:
            raise WireError("a value of unknown form")
        (tag, body), = x.items()
        if tag == "d" and type(body) is dict:
            for key in body:
                self.value(key, depth + 1)
            return {key: self.value(v, depth + 1) for key, v in body.items()}
        if tag == "t" and type(body) is list:
            return tuple(self.value(v, depth + 1) for v in body)
        if tag == "T":
            return self.tensor(body)
        raise WireError("a value of unknown form")

    def tensor(self, descriptor) -> _Pending:
        """Check a tensor descriptor and claim its bytes; the tensor is built only once every
        descriptor of the answer has been checked."""
        self.tensors += 1
        if self.tensors > MAX_TENSORS:
            raise WireError(f"more than {MAX_TENSORS:,} tensors")
        if type(descriptor) is not list or len(descriptor) != 2 or type(descriptor[1]) is not list:
            raise WireError("a malformed tensor descriptor")
        name, shape = descriptor
        if type(name) is not str or name not in DTYPES:
            raise WireError(f"a tensor of dtype {str(name)[:40]!r}, not one of {', '.join(DTYPES)}")
        if len(shape) > MAX_NDIM or any(type(d) is not int or not 0 <= d <= MAX_DIM for d in shape):
            raise WireError(f"a tensor of shape {shape[:MAX_NDIM + 1]} (at most {MAX_NDIM} "
                            f"dimensions of at most {MAX_DIM:,})")
        dtype = DTYPES[name]
        nbytes = math.prod(shape) * dtype.itemsize  # Python integers: no overflow
        if nbytes > len(self.tail) - self.offset:
            raise WireError(f"a {name} tensor of shape {tuple(shape)} needs {nbytes:,} bytes, "
                            f"the answer has {len(self.tail) - self.offset:,} left")
        self.offset += nbytes
        return _Pending(dtype, shape, self.offset - nbytes, nbytes)

    def build(self, x):
        """Replace each checked descriptor by its tensor, made from a private copy of its bytes."""
        if type(x) is _Pending:
            if x.nbytes == 0:
                return torch.empty(x.shape, dtype=x.dtype)
            data = bytearray(self.tail[x.offset:x.offset + x.nbytes])
            tensor = torch.frombuffer(data, dtype=x.dtype).reshape(x.shape)
            if x.dtype is torch.bool and bool((tensor.view(torch.uint8) > 1).any()):
                raise WireError("a bool tensor with bytes other than 0 and 1")
            return tensor
        if type(x) is list:
            return [self.build(v) for v in x]
        if type(x) is tuple:
            return tuple(self.build(v) for v in x)
        if type(x) is dict:
            return {k: self.build(v) for k, v in x.items()}
        return x


def decode(payload: bytes, seconds: float = DECODE_SECONDS) -> dict:
    """Answer bytes -> a dict of plain values and plain tensors, or WireError."""
    if len(payload) > MAX_FRAME_BYTES:
        raise WireError(f"an answer of {len(payload):,} bytes (the limit is {MAX_FRAME_BYTES:,})")
    if len(payload) < 4:
        raise WireError("a truncated answer")
    length = int.from_bytes(payload[:4], "little")
    if length > MAX_HEADER_BYTES or 4 + length > len(payload):
        raise WireError(f"a header of {length:,} bytes (the limit is {MAX_HEADER_BYTES:,})")
    decoder = _Decoder(memoryview(payload)[4 + length:], seconds)
    header = payload[4:4 + length]
    if header.count(b",") + header.count(b"[") + header.count(b"{") > MAX_VALUES:
        raise WireError(f"more than {MAX_VALUES:,} values")  # counted before parsing: cheap
    try:
        parsed = json.loads(header.decode("utf-8"), parse_int=_number(int),
                            parse_float=_number(float))
    except WireError:
        raise
    except (ValueError, RecursionError, MemoryError) as exc:
        raise WireError(f"a header that is not JSON ({type(exc).__name__})") from None
    message = decoder.value(parsed, 0)  # at most MAX_DEPTH calls deep
    if decoder.offset != len(decoder.tail):
        raise WireError(f"{len(decoder.tail) - decoder.offset:,} bytes after the last tensor")
    if type(message) is not dict:
        raise WireError(f"an answer that is a {type(message).__name__}, not a dict")
    message = decoder.build(message)
    decoder.check_time()
    return message
