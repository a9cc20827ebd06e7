"""Tests for mxnet.amp.training.ndarray_bytes: MXNet's raw NDArray bytes read strictly, never by MXNet's C++ loader."""
import struct
import tracemalloc

import numpy as np
import pytest

import mxnet as mx
from mxnet.amp.base.dtypes import BFLOAT16
from mxnet.amp.training import ndarray_bytes

#: Every dtype MXNet's Python front end has, with values that show byte order and sign.
DTYPES = ("float32", "float64", "float16", "uint8", "int32", "int8", "int64", "bool", "bfloat16")


def _array(dtype, shape=(2, 3)):
    values = (np.arange(np.prod(shape)) % 7 - 3).reshape(shape)
    if dtype == "bfloat16":
        bits = np.float32(values * 0.75).view(np.uint32) >> 16
        return mx.nd.array(bits.astype(np.uint16).view(BFLOAT16), dtype=BFLOAT16)
    return mx.nd.array(values.astype(dtype), dtype=dtype)


def _raw(array):
    return bytes(array.__getstate__()["handle"])


def _header(magic=ndarray_bytes.MAGIC_V2, stype=0, shape=(2, 3), dev=(1, 0), flag=0):
    return struct.pack("<IiI", magic, stype, len(shape)) + struct.pack("<%dq" % len(shape), *shape) + \
        struct.pack("<iii", dev[0], dev[1], flag)


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_reads_exactly_what_mxnet_wrote(dtype):
    array = _array(dtype)
    raw = _raw(array)
    parsed = ndarray_bytes.parse(raw)
    assert parsed.data.shape == (2, 3) and parsed.device == ("cpu", 0) and not parsed.numpy_shape
    assert parsed.data.dtype == np.dtype(array.dtype)
    assert parsed.data.tobytes() == array.asnumpy().tobytes()
    # and an array made from what was read saves the same bytes again
    again = mx.nd.array(parsed.data, dtype=parsed.data.dtype)
    assert _raw(again) == raw


def test_numpy_shape_arrays_scalars_and_zero_sizes():
    with mx.util.np_shape(True):
        for shape in ((), (2, 0), (4,)):
            array = mx.nd.array(np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape))
            parsed = ndarray_bytes.parse(_raw(array))
            assert parsed.numpy_shape and parsed.data.shape == shape
            assert parsed.data.tobytes() == array.asnumpy().tobytes()


def test_device_is_reported():
    raw = _header(shape=(2,), dev=(2, 3)) + b"\0" * 8
    assert ndarray_bytes.parse(raw).device == ("gpu", 3)


@pytest.mark.parametrize("field,raw,match", [
    ("magic", _header(magic=0xF993FAC8) + b"\0" * 24, "magic number 0xF993FAC8"),
    ("storage type", _header(stype=1) + b"\0" * 24, "storage type 1"),
    ("ndim", _header(shape=()) + b"\0" * 4, "0 dimensions; a V2 array has 1 to 32"),
    ("ndim", struct.pack("<IiI", ndarray_bytes.MAGIC_V2, 0, 2 ** 31 - 1), "2147483647 dimensions"),
    ("ndim", struct.pack("<Iii", ndarray_bytes.MAGIC_V3, 0, -1), "-1 dimensions; a V3 array has 0 to 32"),
    ("dimension", _header(shape=(2, 0)), r"shape \(2, 0\); a V2 array's dimensions are >= 1"),
    ("dimension", _header(magic=ndarray_bytes.MAGIC_V3, shape=(2, -3)), "dimensions are >= 0"),
    ("dimension", _header(shape=(2 ** 40, 2 ** 20)) + b"\0" * 4, "holds 4 bytes of data; it needs exactly"),
    ("device type", _header(dev=(4, 0)) + b"\0" * 24, r"device \(type 4, id 0\)"),
    ("device id", _header(dev=(1, -1)) + b"\0" * 24, r"device \(type 1, id -1\)"),
    ("type flag", _header(flag=9) + b"\0" * 24, "type flag 9; MXNet's Python front end knows 0 float32"),
    ("type flag", _header(flag=-1) + b"\0" * 24, "type flag -1"),
    ("data", _header() + b"\0" * 23, "holds 23 bytes of data; it needs exactly 24"),
    ("data", _header() + b"\0" * 25, "holds 25 bytes of data; it needs exactly 24"),
])
def test_each_field_is_checked(field, raw, match):
    with pytest.raises(ValueError, match=match):
        ndarray_bytes.parse(raw, "NDArray 1")


def test_every_truncation_raises_value_error():
    raw = _raw(_array("float32"))
    for size in range(len(raw)):
        with pytest.raises(ValueError, match="NDArray"):
            ndarray_bytes.parse(raw[:size])


def test_falsified_sizes_allocate_nothing():
    tracemalloc.start()
    try:
        for shape in ((2 ** 62,), (2 ** 31, 2 ** 31), (3,) * 32):
            with pytest.raises(ValueError):
                ndarray_bytes.parse(_header(shape=shape) + b"\0" * 8)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, "parsing falsified sizes allocated %d bytes" % peak


def test_raw_must_be_bytes():
    with pytest.raises(TypeError, match="str"):
        ndarray_bytes.parse("\x00" * 40)
