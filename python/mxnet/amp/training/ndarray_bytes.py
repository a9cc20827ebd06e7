"""MXNet's raw NDArray bytes (``NDArray.__getstate__()['handle']``) read strictly, with NumPy only.

A pickled ``NDArray`` carries the bytes of ``MXNDArraySaveRawBytes``; ``NDArray.__setstate__`` hands them to
MXNet's C++ loader, which trusts the sizes it reads (a falsified dimension or rank allocates what it says, and
a bad field can abort the process). :func:`parse` reads the same bytes in Python instead, checks every field and
the exact data length before making one array, and never passes them to MXNet. The layout MXNet 1.9.1 writes
for a dense array (little-endian)::

    magic      uint32   0xF993FAC9 (V2: legacy shapes) or 0xF993FACA (V3: written under numpy shape semantics)
    stype      int32    0 (dense; row_sparse and csr arrays are not read here)
    ndim       int32    followed by ndim int64 dimensions
    dev_type   int32    1 cpu, 2 gpu, 3 cpu_pinned, 5 cpu_shared; followed by dev_id int32
    type_flag  int32    a key of MXNet's own dtype table (float32 0 ... bool 7, bfloat16 12)
    data       prod(shape) * itemsize bytes, C order

Legacy (V2) shapes have at least one dimension and no zero-sized one (MXNet reads those as "no array"); numpy
(V3) shapes may be scalars ``()`` or hold zeros.
"""
from dataclasses import dataclass
import struct
from typing import Optional, Union

import numpy as np

from mxnet.ndarray import ndarray as _mx_ndarray

from ..base import dtypes

__all__ = ["MAGIC_V2", "MAGIC_V3", "parse"]

MAGIC_V2 = 0xF993FAC9
MAGIC_V3 = 0xF993FACA
#: ``Context.devtype2str`` of MXNet 1.9.1: the device types a saved array may name.
DEVICE_TYPES = {1: "cpu", 2: "gpu", 3: "cpu_pinned", 5: "cpu_shared"}
#: NumPy's limit on dimensions; MXNet's kernels stop well below it.
MAX_NDIM = 32
_INT32 = struct.Struct("<i")
_UINT32 = struct.Struct("<I")
_INT64 = struct.Struct("<q")


@dataclass(frozen=True)
class RawArray:
    """One array read from raw bytes.

    Attributes
    ----------
    data : numpy.ndarray
        The values with the saved shape and dtype (MXNet's bfloat16 is NumPy's ``[('bfloat16', '<u2')]``); a
        view of the bytes given to :func:`parse`.
    device : tuple of (str, int)
        The device the array was saved from, e.g. ``('gpu', 1)``.
    numpy_shape : bool
        Whether it was written under numpy shape semantics (V3).
    """

    data: np.ndarray
    device: tuple
    numpy_shape: bool


def dtype_of_flag(flag: int) -> Optional[np.dtype]:
    """The NumPy dtype MXNet's Python front end uses for ``type_flag``, or None when it has none.

    Parameters
    ----------
    flag : int

    Returns
    -------
    numpy.dtype or None
    """
    dtype = _mx_ndarray._DTYPE_MX_TO_NP.get(flag) if flag >= 0 else None
    return None if dtype is None else np.dtype(dtype)


def dtype_name(flag: int) -> str:
    """MXNet's name for a type flag ('float32', 'bfloat16', ...), for messages."""
    dtype = dtype_of_flag(flag)
    return "unknown" if dtype is None else dtypes.dtype_name(dtype)


class _Reader:
    def __init__(self, raw, what):
        self.raw, self.what, self.pos = raw, what, 0

    def take(self, fmt, field):
        if self.pos + fmt.size > len(self.raw):
            raise ValueError("%s is truncated: its bytes end inside the %s field (byte %d of %d)"
                             % (self.what, field, self.pos, len(self.raw)))
        value = fmt.unpack_from(self.raw, self.pos)[0]
        self.pos += fmt.size
        return value


def parse(raw: Union[bytes, bytearray], what: str = "NDArray") -> RawArray:
    """Read the bytes one dense NDArray pickles, checking every field; nothing is given to MXNet.

    Parameters
    ----------
    raw : bytes or bytearray
        ``NDArray.__getstate__()['handle']``.
    what : str
        Names the array in error messages (e.g. ``"'run.states': NDArray 3"``).

    Returns
    -------
    RawArray

    Raises
    ------
    TypeError
        ``raw`` is not bytes or a bytearray.
    ValueError
        An unknown magic number, storage type, device type or dtype flag; a rank or dimension out of range; data
        shorter or longer than the shape says. The message names the field and the valid choices.
    """
    if not isinstance(raw, (bytes, bytearray)):
        raise TypeError("%s: raw NDArray bytes must be bytes or a bytearray, got %s" % (what, type(raw).__name__))
    reader = _Reader(raw, what)
    magic = reader.take(_UINT32, "magic")
    if magic not in (MAGIC_V2, MAGIC_V3):
        raise ValueError("%s has magic number 0x%08X; MXNet 1.9.1 writes 0x%08X (V2) or 0x%08X (V3)"
                         % (what, magic, MAGIC_V2, MAGIC_V3))
    numpy_shape = magic == MAGIC_V3
    stype = reader.take(_INT32, "storage type")
    if stype != 0:
        raise ValueError("%s has storage type %d; only dense arrays (0) are read (row_sparse 1 and csr 2 are not)"
                         % (what, stype))
    ndim = reader.take(_INT32, "ndim")
    if not (0 if numpy_shape else 1) <= ndim <= MAX_NDIM:
        raise ValueError("%s has %d dimensions; a %s array has %s to %d" % (
            what, ndim, "V3" if numpy_shape else "V2", "0" if numpy_shape else "1", MAX_NDIM))
    shape = tuple(reader.take(_INT64, "dimension %d" % axis) for axis in range(ndim))
    smallest = 0 if numpy_shape else 1
    if any(dim < smallest for dim in shape):
        raise ValueError("%s has shape %s; a %s array's dimensions are >= %d"
                         % (what, shape, "V3" if numpy_shape else "V2", smallest))
    dev_type = reader.take(_INT32, "device type")
    dev_id = reader.take(_INT32, "device id")
    if dev_type not in DEVICE_TYPES or dev_id < 0:
        raise ValueError("%s was saved from device (type %d, id %d); device types: %s, ids >= 0"
                         % (what, dev_type, dev_id, ", ".join("%d %s" % item for item in sorted(DEVICE_TYPES.items()))))
    flag = reader.take(_INT32, "type flag")
    dtype = dtype_of_flag(flag)
    if dtype is None:
        raise ValueError("%s has type flag %d; MXNet's Python front end knows %s" % (
            what, flag, ", ".join("%d %s" % (key, dtype_name(key)) for key in sorted(_mx_ndarray._DTYPE_MX_TO_NP)
                                  if key >= 0)))
    count = 1
    for dim in shape:
        count *= dim
    size = len(raw) - reader.pos
    if count * dtype.itemsize != size:
        raise ValueError("%s of shape %s and dtype %s holds %d bytes of data; it needs exactly %d"
                         % (what, shape, dtype_name(flag), size, count * dtype.itemsize))
    data = np.frombuffer(raw, dtype=dtype, count=count, offset=reader.pos).reshape(shape)
    return RawArray(data, (DEVICE_TYPES[dev_type], dev_id), numpy_shape)
