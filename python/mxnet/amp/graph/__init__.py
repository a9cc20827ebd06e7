"""Symbol-graph passes shared by ``amp.init`` and conversion: the per-node plan, the rewrite loop, the casts it
builds, post-op fusion, BatchNorm folding, oneDNN fusion, channels-last layout and the precision map.

Internal: only :data:`mxnet.amp.__all__` is the API.
"""
