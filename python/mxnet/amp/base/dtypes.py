"""The dtype facts every layer shares: MXNet's bfloat16 dtype object, dtype names, type codes and float ranks.

NumPy only: no MXNet import, so the probe's child processes and the pure modules can use it too.
"""
from typing import Any, Optional

import numpy as np

__all__ = ["BFLOAT16", "TARGET_DTYPES", "FLOAT_RANK", "TYPE_CODES", "DTYPE_OF_CODE", "mx_dtype", "dtype_name"]

#: MXNet's own bfloat16 dtype object (what ``NDArray.dtype`` reports for bf16 arrays).
BFLOAT16 = np.dtype([("bfloat16", np.uint16)])

#: The dtypes the library's casts take, by name.
TARGET_DTYPES = ("float32", "float16", "bfloat16")

#: Float dtypes by width: a widest-type cast picks the highest rank (float16 with bfloat16: float32).
FLOAT_RANK = {"float16": 1, "bfloat16": 1, "float32": 2, "float64": 3}

#: MXNet's type code of each dtype name, as a variable's ``__dtype__`` attribute stores it.
TYPE_CODES = {"float32": "0", "float64": "1", "float16": "2", "uint8": "3", "int32": "4", "int8": "5",
              "int64": "6", "bool": "7", "bfloat16": "12"}

#: The dtype name of each type code (the inverse of :data:`TYPE_CODES`).
DTYPE_OF_CODE = {code: name for name, code in TYPE_CODES.items()}


def mx_dtype(name: str) -> np.dtype:
    """Return the MXNet dtype object for a dtype name ('float16', 'bfloat16', 'float32', 'int32', ...)."""
    return BFLOAT16 if name == "bfloat16" else np.dtype(name)


def dtype_name(dtype: Any) -> Optional[str]:
    """Return 'float32', 'bfloat16', 'int32', ... for a NumPy/MXNet dtype (None stays None)."""
    if dtype is None:
        return None
    dtype = np.dtype(dtype)
    return "bfloat16" if dtype.names == ("bfloat16",) else dtype.name
