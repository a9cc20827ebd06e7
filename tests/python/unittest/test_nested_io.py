"""A converted block takes the arguments the original took, nested lists included, and gives its outputs
nested the same way; so does its export/import. The model is shaped like GluonNLP 0.10's StandardRNN language
model: ``net(tokens, [h, c])`` returns ``(logits, [h, c])``.
"""
import mxnet as mx
import numpy as np
import pytest
from mxnet import amp, gluon
from mxnet.amp.inference.converted_block import ConvertedBlock, flatten_arrays, nest

T, N, UNITS, VOCAB = 5, 2, 16, 20


class LanguageModel(gluon.HybridBlock):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.embed = gluon.nn.Embedding(VOCAB, UNITS)
            self.lstm = gluon.rnn.LSTM(UNITS, input_size=UNITS)
            self.out = gluon.nn.Dense(VOCAB, flatten=False)

    def hybrid_forward(self, F, tokens, state):
        h, state = self.lstm(self.embed(tokens), state)
        return self.out(h), state


def _model():
    net = LanguageModel()
    net.initialize(mx.init.Xavier())
    net.hybridize()
    rng = np.random.RandomState(0)
    tokens = mx.nd.array(rng.randint(0, VOCAB, (T, N)))
    state = [mx.nd.array(rng.uniform(-0.5, 0.5, (1, N, UNITS))) for _ in range(2)]
    return net, tokens, state


def _assert_close(got, want, tol):
    (logits, (h, c)), (ref_logits, (ref_h, ref_c)) = got, want
    for a, b in ((logits, ref_logits), (h, ref_h), (c, ref_c)):
        a = mx.nd.amp_cast(a, dtype="float32").asnumpy()
        assert a.shape == b.shape
        assert np.abs(a - b.asnumpy()).max() <= tol * np.abs(b.asnumpy()).max()


@pytest.mark.parametrize("dtype,tol", [("bfloat16", 2.0 ** -8 * 8), ("float16", 2.0 ** -11 * 8)])
def test_nested_state_as_example_and_at_call_time(dtype, tol, tmp_path):
    net, tokens, state = _model()
    want = net(tokens, state)
    low = amp.convert_hybrid_block(net, [tokens, state], target_dtype=dtype, cast_params_offline=True)
    assert isinstance(low, ConvertedBlock)
    got = low(tokens, state)  # as the original is called: the state is a list
    assert isinstance(got, list) and isinstance(got[1], list) and len(got[1]) == 2
    _assert_close(got, want, tol)
    with pytest.raises(ValueError, match="argument structure"):
        low(tokens, *state)  # the flat call is a different structure, as for the original block
    path = str(tmp_path / "lm")
    low.export(path)
    back = ConvertedBlock.imports(path + "-symbol.json", ["data0", "data1", "data2"], path + "-0000.params")
    _assert_close(back(tokens, state), want, tol)
    flat = gluon.SymbolBlock.imports(path + "-symbol.json", ["data0", "data1", "data2"], path + "-0000.params")
    assert len(flat(tokens, *state)) == 3  # plain SymbolBlock.imports: flat, as MXNet's


def test_contrib_form_keeps_the_nesting_of_the_cached_graph():
    net, tokens, state = _model()
    want = net(tokens, state)  # hybridized and run: the cached graph
    low = amp.convert_hybrid_block(net, target_dtype="bfloat16")
    _assert_close(low(tokens, state), want, 2.0 ** -8 * 8)


def test_flatten_and_nest_are_inverse_and_refuse_other_leaves():
    a, b, c = mx.nd.ones(1), mx.nd.ones(2), mx.nd.ones(3)
    flat, fmt = flatten_arrays([a, [b, c]])
    assert flat == [a, b, c] and fmt == [0, [0, 0]]
    assert nest(["x", "y", "z"], fmt) == ["x", ["y", "z"]]
    with pytest.raises(ValueError, match="1 items left over"):
        nest(["x", "y", "z", "w"], fmt)
    with pytest.raises(TypeError, match="expected an NDArray"):
        flatten_arrays([a, [b, "c"]])
    with pytest.raises(TypeError, match="a \\(nested\\) list of NDArrays, one per argument"):
        amp.convert_hybrid_block(_model()[0], [a, ["not an array"]], target_dtype="bfloat16")


def test_an_example_of_another_structure_is_refused_with_the_count():
    net, tokens, state = _model()
    amp.convert_hybrid_block(net, [tokens, state], target_dtype="bfloat16")  # the block's graph: 3 inputs
    with pytest.raises(ValueError, match="graph has 3 input\\(s\\) \\(data0, data1, data2\\) but the data "
                                         "example gives 1 array"):
        amp.convert_hybrid_block(net, tokens, target_dtype="bfloat16")
