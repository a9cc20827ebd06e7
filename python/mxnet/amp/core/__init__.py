"""The machine and the rules: the C++ library and its ops, MXNet's registry, CPU classes and advice, dtypes,
the frozen :class:`~mxnet.amp.Policy`, and the record of every patch (:mod:`.patches`).

Internal: only :data:`mxnet.amp.__all__` is the API. Each module's ``__all__`` lists what the other subpackages
use.
"""
