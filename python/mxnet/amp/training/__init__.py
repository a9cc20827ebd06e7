"""Training: ``init_trainer``, ``scale_loss`` and ``unscale`` (:mod:`.trainer`), the step (:mod:`.step`), the loss
scaler (pure rule, host and device copies), the fused optimizer updates, gradient buffers, checkpoints and the
Module API.

Internal: only :data:`mxnet.amp.__all__` is the API.
"""
