"""The model tier's fixtures: AMP off and legacy mode around every test; each architecture built and saved
once per session."""
import mxnet as mx
import pytest
from mxnet import amp

import zoo


@pytest.fixture(autouse=True)
def clean_amp():
    """AMP off before and after the test, numpy mode reset after it."""
    amp.reset()
    mx.npx.reset_np()
    yield
    amp.reset()
    mx.npx.reset_np()


@pytest.fixture(scope="session")
def saved(tmp_path_factory):
    """``saved(model)`` -> ``(net, prefix, input names)``: the network built and saved once per session."""
    cache = {}
    folder = tmp_path_factory.mktemp("zoo")

    def get(model):
        if model not in cache:
            net = model.build()
            prefix = str(folder / ("%s-%s" % (model.name, model.export)))
            cache[model] = (net, prefix, model.save(net, prefix))
            mx.npx.reset_np()
        if model.export == "numpy":
            mx.npx.set_np()
        return cache[model]
    return get
