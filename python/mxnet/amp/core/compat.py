"""Upstream spellings: keyword names and call forms of ``mxnet.contrib.amp`` (1.9.1) that this package renamed.

Code written for ``mxnet.contrib.amp`` keeps running: each old name is accepted with a ``DeprecationWarning``
that names its replacement, and means exactly what the new name means.

===================================  =====================================
``mxnet.contrib.amp`` 1.9.1          ``mxnet.amp``
===================================  =====================================
``data_names``                       ``input_names``
``cast_optional_params``             ``cast_params_offline``
===================================  =====================================
"""
import warnings

__all__ = ["renamed_keywords"]

#: Old keyword name -> the name that replaced it.
RENAMED = {"data_names": "input_names", "cast_optional_params": "cast_params_offline"}


def renamed_keywords(func_name, given, current, stacklevel=3):
    """Return ``current`` (the new names' values) updated from the old names found in ``given``.

    Parameters
    ----------
    func_name : str
        The public function, named in the warning and in errors.
    given : dict
        The old-name keyword arguments the caller passed (names not in :data:`RENAMED` are refused).
    current : dict
        The new names' values as passed (or defaulted) by the caller.
    stacklevel : int
        Passed to :func:`warnings.warn` so that the warning points at the caller.

    Raises
    ------
    TypeError
        An unknown keyword, or an old name given together with its new name set to another value.
    """
    out = dict(current)
    for old, value in given.items():
        new = RENAMED.get(old)
        if new is None or new not in current:
            raise TypeError("%s() got an unexpected keyword argument %r" % (func_name, old))
        warnings.warn("%s: %r is deprecated (mxnet.contrib.amp's name); use %r, which means the same"
                      % (func_name, old, new), DeprecationWarning, stacklevel=stacklevel)
        if out[new] not in (None, False) and out[new] != value:
            raise TypeError("%s() got both %r=%r and its deprecated name %r=%r" % (func_name, new, out[new],
                                                                                   old, value))
        out[new] = value
    return out
