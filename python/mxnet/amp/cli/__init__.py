"""The commands of ``python -m mxnet.amp`` (one module each: ``demo``, ``lists``, ``doctor``, ``hardware``,
``convert``), the operator probe and the demo's plots.

Internal: the commands are the interface.
"""
