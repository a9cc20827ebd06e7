"""The ground floor: facts and plumbing every other room shares, with no policy of their own. MXNet's dtype
objects and codes, the names of the library's ops, MXNet's operator registry, the record of every patch, files
written whole or not at all, and where a warning points.

Internal: only :data:`mxnet.amp.__all__` is the API.
"""
