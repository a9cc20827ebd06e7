"""Where a warning should point: at the first caller outside the ``mxnet.amp`` package."""
import os
import sys

__all__ = ["stacklevel_outside_package"]

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def stacklevel_outside_package() -> int:
    """``stacklevel`` for :func:`warnings.warn`, called from inside the package, that points the warning at the
    first frame whose code lies outside ``mxnet/amp/``."""
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE + os.sep):
        frame, level = frame.f_back, level + 1
    return level
