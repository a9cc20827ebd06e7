"""``amp.init`` / ``amp.reset`` / ``amp.disable``: how the policy reaches running code, imperative calls
(:mod:`.imperative`) and graphs (:mod:`.graphs`), and how it is taken back (:mod:`.switch`).

Internal: only :data:`mxnet.amp.__all__` is the API.
"""
