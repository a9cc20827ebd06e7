"""The machine and the rules: the C++ library and its ops, CPU classes and advice, what runs natively here, the
frozen :class:`~mxnet.amp.Policy`, and upstream's keyword spellings.

Internal: only :data:`mxnet.amp.__all__` is the API. Each module's ``__all__`` lists what the other rooms use.
"""
