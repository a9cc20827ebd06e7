"""Bit-exact tests of the fused multi-tensor kernels (libmxnet_amp) against NumPy and MXNet references."""
import mxnet as mx
import numpy as np
import pytest

from mxnet.amp.core import library, ops

from mxnet.amp.base.dtypes import BFLOAT16 as BF16

# Bit patterns every conversion test covers: zeros, +-inf, quiet/signalling NaNs with payloads, the
# largest/smallest normals and subnormals of float32, and values around float16's overflow,
# subnormal and rounding boundaries.
SPECIAL_F32_BITS = np.array([
    0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001,
    0xFF800001, 0x7FBFFFFF, 0x7FFFFFFF, 0x7FA00000, 0x7F802000, 0x00000001, 0x80000001,
    0x007FFFFF, 0x807FFFFF, 0x00800000, 0x80800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000,
    0xBF800000, 0x3F808000, 0x3F818000, 0x3F808001, 0x477FE000, 0x477FEFFF, 0x477FF000,
    0x477FF001, 0x47800000, 0xC77FF000, 0x38800000, 0x387FE000, 0x387FF000, 0x33800000,
    0x33000000, 0x33000001, 0x32FFFFFF, 0xB3000001, 0x34000000, 0x33C00000, 0x33A00000,
    0x3A800800, 0x3A801000, 0x3A801800, 0x3F801000, 0x3F803000,
], dtype=np.uint32)


def f32_patterns(n_random=200_000, seed=0):
    """SPECIAL_F32_BITS, random bit patterns and values near every float16 exponent, as float32."""
    rng = np.random.default_rng(seed)
    random_bits = rng.integers(0, 2**32, size=n_random, dtype=np.uint64).astype(np.uint32)
    # Every float16 exponent (float32 exponents 102..143) with ties and near-ties in the low bits.
    exps = np.arange(100, 145, dtype=np.uint32)
    lows = np.array([0, 1, 0xFFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x3000, 0x7FFFFF], dtype=np.uint32)
    near = ((exps[:, None] << 23) | lows[None, :]).ravel()
    bits = np.concatenate([SPECIAL_F32_BITS, random_bits, near, near | 0x80000000])
    return bits.view(np.float32)


def bf16_reference(x):
    """float32 -> bfloat16 bits: round to nearest even, NaN -> (bits >> 16) | 0x40 (as amp_cast)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan_bits = (u >> 16) | 0x40
    return np.where(np.isnan(x), nan_bits, rounded).astype(np.uint16)


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def nd_bf16(bits):
    """An MXNet bfloat16 NDArray holding the given uint16 bit patterns."""
    return mx.nd.array(bits.view(np.uint16).view(BF16), dtype=BF16)


def bits_of(arr):
    out = arr.asnumpy()
    return out.view(np.uint16) if out.dtype in (BF16, np.float16) else out.view(np.uint32)


def test_op_names_registered():
    registered = set(mx.operator.get_all_registered_operators())
    assert set(library.OP_NAMES) <= registered


def test_float32_to_float16_matches_numpy_bitwise():
    x = f32_patterns()
    (out,) = ops.multi_cast([mx.nd.array(x)], "float16")
    np.testing.assert_array_equal(out.asnumpy().view(np.uint16), x.astype(np.float16).view(np.uint16))


def test_float16_to_float32_all_patterns():
    h = np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    (out,) = ops.multi_cast([mx.nd.array(h, dtype="float16")], "float32")
    np.testing.assert_array_equal(out.asnumpy().view(np.uint32), h.astype(np.float32).view(np.uint32))


def test_float32_to_bfloat16_matches_amp_cast_on_normals_inf_nan():
    x = f32_patterns()
    normal_or_special = (x.view(np.uint32) & 0x7F800000) != 0
    x = x[normal_or_special]
    (out,) = ops.multi_cast([mx.nd.array(x)], "bfloat16")
    builtin = mx.nd.amp_cast(mx.nd.array(x), dtype=BF16)
    np.testing.assert_array_equal(bits_of(out), bits_of(builtin))
    np.testing.assert_array_equal(bits_of(out), bf16_reference(x))


def test_float32_to_bfloat16_subnormals_round_to_nearest_even():
    # MXNet's oneDNN amp_cast flushes these to zero; the kernels round them (IEEE, sign kept).
    sub = np.array([0x00000001, 0x80000001, 0x00008000, 0x00018000, 0x00010000, 0x007FFFFF,
                    0x807FFFFF, 0x80000000, 0x00400000], dtype=np.uint32).view(np.float32)
    (out,) = ops.multi_cast([mx.nd.array(sub)], "bfloat16")
    np.testing.assert_array_equal(bits_of(out), bf16_reference(sub))
    assert bits_of(out)[-2] == 0x8000  # -0.0 keeps its sign


def test_bfloat16_to_float32_and_float16_all_patterns():
    bits = np.arange(2**16, dtype=np.uint32).astype(np.uint16)
    x = nd_bf16(bits)
    out32, = ops.multi_cast([x], "float32")
    np.testing.assert_array_equal(out32.asnumpy().view(np.uint32), bf16_to_f32(bits).view(np.uint32))
    out16, = ops.multi_cast([x], "float16")
    np.testing.assert_array_equal(out16.asnumpy().view(np.uint16),
                                  bf16_to_f32(bits).astype(np.float16).view(np.uint16))


def test_float16_to_bfloat16_all_patterns():
    h = np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    (out,) = ops.multi_cast([mx.nd.array(h, dtype="float16")], BF16)
    np.testing.assert_array_equal(bits_of(out), bf16_reference(h.astype(np.float32)))


def test_float64_inputs_go_through_float32_like_amp_cast():
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.standard_normal(1000) * 1e3, [np.inf, -np.inf, np.nan, -0.0, 1e-300]])
    (out16,) = ops.multi_cast([mx.nd.array(x, dtype="float64")], "float16")
    (out32,) = ops.multi_cast([mx.nd.array(x, dtype="float64")], "float32")
    np.testing.assert_array_equal(out16.asnumpy().view(np.uint16),
                                  x.astype(np.float32).astype(np.float16).view(np.uint16))
    np.testing.assert_array_equal(out32.asnumpy(), x.astype(np.float32))


def test_multi_cast_many_tensors_odd_sizes_and_mixed_dtypes():
    rng = np.random.default_rng(2)
    sizes = [1, 2, 3, 7, 15, 16, 17, 31, 33, 63, 65, 127, 129, 1000, 4097, 70001]
    dtypes = ["float32", "float16", "float64"]
    arrays, refs = [], []
    for i, size in enumerate(sizes * 2):
        x = (rng.standard_normal(size) * 100).astype(np.float32)
        dt = dtypes[i % 3]
        arrays.append(mx.nd.array(x.astype(dt), dtype=dt))
        refs.append(x.astype(dt).astype(np.float32).astype(np.float16))
    outs = ops.multi_cast(arrays, np.float16)
    assert len(outs) == len(arrays)
    for out, ref, arr in zip(outs, refs, arrays):
        assert out.shape == arr.shape and out.dtype == np.float16
        np.testing.assert_array_equal(out.asnumpy().view(np.uint16), ref.view(np.uint16))


def test_multi_cast_more_than_1000_tensors():
    arrays = [mx.nd.full((i % 5 + 1,), float(i)) for i in range(1500)]
    outs = ops.multi_cast(arrays, "float16")
    assert len(outs) == 1500
    got = np.concatenate([o.asnumpy() for o in outs])
    ref = np.concatenate([np.full(i % 5 + 1, i, dtype=np.float32) for i in range(1500)])
    np.testing.assert_array_equal(got, ref.astype(np.float16))


def test_multi_cast_views_with_unaligned_offsets():
    base_np = np.arange(1, 203, dtype=np.float32) * 1.001
    base = mx.nd.array(base_np)
    for offset in range(1, 9):
        view = base[offset:offset + 97]  # data pointer offset by 4*offset bytes
        (out,) = ops.multi_cast([view], "bfloat16")
        np.testing.assert_array_equal(bits_of(out), bf16_reference(base_np[offset:offset + 97]))


def test_multi_cast_keeps_shapes_and_numpy_mode_arrays():
    x = mx.np.array(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    y = mx.nd.ones((5, 1))
    ox, oy = ops.multi_cast([x, y], "float16")  # outputs take the kind of the first array
    assert isinstance(ox, mx.np.ndarray) and isinstance(oy, mx.np.ndarray)
    (oy_legacy,) = ops.multi_cast([y], "float16")
    assert not isinstance(oy_legacy, mx.np.ndarray)
    assert ox.shape == (2, 3, 4) and oy.shape == (5, 1)
    np.testing.assert_array_equal(ox.asnumpy(), np.arange(24).reshape(2, 3, 4).astype(np.float16))


def test_multi_cast_into_preallocated_outputs():
    x = [mx.nd.array([1.5, -2.0]), mx.nd.array([[3.0]])]
    out = [mx.nd.zeros((2,), dtype="float16"), mx.nd.zeros((1, 1), dtype="float16")]
    result = ops.multi_cast(x, "float16", out=out)
    assert result[0] is out[0] and result[1] is out[1]
    np.testing.assert_array_equal(out[0].asnumpy(), np.array([1.5, -2.0], np.float16))
    np.testing.assert_array_equal(out[1].asnumpy(), np.array([[3.0]], np.float16))
    wide = [mx.nd.zeros((2,)), mx.nd.zeros((1, 1))]
    result = ops.widest_cast([out[0], x[1]], out=wide)  # float16 + float32 -> float32
    assert result[0] is wide[0] and result[1] is wide[1]
    np.testing.assert_array_equal(wide[0].asnumpy(), [1.5, -2.0])
    with pytest.raises(ValueError, match="out has 1 arrays but arrays has 2"):
        ops.multi_cast(x, "float16", out=out[:1])


def test_zero_size_tensors():
    with mx.util.np_shape(True):  # legacy shape semantics read 0 as "unknown"
        empty = mx.np.zeros((0, 3), dtype="float32")
        one = mx.np.array([2.5], dtype="float32")
        e_out, o_out = ops.multi_cast([empty, one], "float16")
        (w_out,) = ops.widest_cast([empty])
        assert e_out.shape == (0, 3) and e_out.dtype == np.float16 and w_out.shape == (0, 3)
        np.testing.assert_array_equal(o_out.asnumpy(), np.array([2.5], np.float16))
        flag, sumsq = ops.unscale_and_check([empty, one], 0.5, sum_squares=True)
        assert flag.asnumpy()[0] == 1.0 and one.asnumpy()[0] == 1.25
        assert sumsq.asnumpy()[0] == 1.5625
        flag = ops.unscale_and_check([empty], 0.5)
        assert flag.asnumpy()[0] == 1.0


@pytest.mark.parametrize("dtypes, widest", [
    (("float16", "float32"), "float32"),
    (("float16", "float16"), "float16"),
    (("bfloat16", "bfloat16"), "bfloat16"),
    (("float16", "bfloat16"), "float32"),
    (("bfloat16", "float64", "float16"), "float64"),
])
def test_widest_cast_picks_widest_type(dtypes, widest):
    values = np.array([1.5, -2.25, 3.0], dtype=np.float32)
    arrays = [nd_bf16(bf16_reference(values)) if d == "bfloat16" else mx.nd.array(values, dtype=d)
              for d in dtypes]
    outs = ops.widest_cast(arrays)
    expected = BF16 if widest == "bfloat16" else np.dtype(widest)
    for out in outs:
        assert np.dtype(out.dtype) == expected
        got = bf16_to_f32(bits_of(out)) if widest == "bfloat16" else out.asnumpy()
        np.testing.assert_array_equal(got.astype(np.float32), values)


def test_widest_cast_matches_builtin_amp_multicast():
    # bfloat16: the builtin's oneDNN path rejects float16 on CPU ("unknown type for MKLDNN").
    rng = np.random.default_rng(3)
    a = nd_bf16(bf16_reference(rng.standard_normal(15).astype(np.float32))).reshape((3, 5))
    b = mx.nd.array(rng.standard_normal(7), dtype="float32")
    ours = ops.widest_cast([a, b])
    builtin = mx.nd.amp_multicast(a, b, num_outputs=2)
    for o, r in zip(ours, builtin):
        assert o.dtype == r.dtype and o.shape == r.shape
        np.testing.assert_array_equal(o.asnumpy(), r.asnumpy())


@pytest.mark.parametrize("func", ["multi_cast", "widest_cast", "unscale_and_check"])
def test_empty_list_is_a_clear_error(func):
    args = {"multi_cast": ("float16",), "widest_cast": (), "unscale_and_check": (0.5,)}[func]
    with pytest.raises(ValueError, match="empty"):
        getattr(ops, func)([], *args)


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="float32, float16, bfloat16"):
        ops.multi_cast([mx.nd.ones(2)], "int8")
    with pytest.raises(TypeError, match=r"arrays\[1\]"):
        ops.multi_cast([mx.nd.ones(2), np.ones(2)], "float16")
    with pytest.raises(TypeError, match="single"):
        ops.widest_cast(mx.nd.ones(2))
    with pytest.raises(TypeError, match="inv_scale"):
        ops.unscale_and_check([mx.nd.ones(2)], "0.5")
    with pytest.raises(mx.MXNetError, match="input 1 has dtype int32"):
        ops.multi_cast([mx.nd.ones(2), mx.nd.ones(2, dtype="int32")], "float16").__repr__()
    with pytest.raises(mx.MXNetError, match="num_args"):
        mx.nd.amp_multi_cast(mx.nd.ones(2), dtype="float16")


def test_cast_backward_casts_gradients_back():
    x = mx.nd.array([1.0, 2.0, 3.0])
    x.attach_grad()
    with mx.autograd.record():
        y = mx.nd.amp_multi_cast(x, num_args=1, dtype="float16")
        loss = (y.astype("float32") * mx.nd.array([1.0, 0.5, 0.25])).sum()
    loss.backward()
    assert x.grad.dtype == np.float32
    np.testing.assert_array_equal(x.grad.asnumpy(), [1.0, 0.5, 0.25])


# ---- amp_round (float32 kept, values rounded to low precision) ----------------------------------

@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_amp_round_equals_cast_and_back(dtype):
    x = f32_patterns(n_random=100_000, seed=8)
    got = mx.nd.amp_round(mx.nd.array(x), dtype=dtype).asnumpy()
    assert got.dtype == np.float32
    if dtype == "float16":
        ref = x.astype(np.float16).astype(np.float32)
    else:
        ref = bf16_to_f32(bf16_reference(x))
    np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))


def test_amp_round_rejects_bad_dtypes():
    with pytest.raises(mx.MXNetError, match="float16 or bfloat16"):
        mx.nd.amp_round(mx.nd.ones(2), dtype="float32").asnumpy()
    with pytest.raises(mx.MXNetError, match="input 0 must be float32"):
        mx.nd.amp_round(mx.nd.ones(2, dtype="float16"), dtype="bfloat16").asnumpy()


# ---- fused unscale + finite check -----------------------------------------------------------------

def unscale_reference(x, inv_scale):
    """Unscaled values in x's dtype (float32 math) and whether all are finite."""
    if x.dtype == BF16:
        out = bf16_reference(bf16_to_f32(x.view(np.uint16)) * np.float32(inv_scale))
        return out, bool(np.all((out & 0x7F80) != 0x7F80))
    if x.dtype == np.float64:
        out = x * np.float64(np.float32(inv_scale))
    else:
        out = (x.astype(np.float32) * np.float32(inv_scale)).astype(x.dtype)
    return out, bool(np.all(np.isfinite(out)))


def make_grads(dtype, sizes, seed):
    rng = np.random.default_rng(seed)
    out = []
    for size in sizes:
        x = (rng.standard_normal(size) * 1000).astype(np.float32)
        out.append(bf16_reference(x).view(BF16) if dtype == "bfloat16" else x.astype(dtype))
    return out


def to_nd(x):
    return nd_bf16(x.view(np.uint16)) if x.dtype == BF16 else mx.nd.array(x, dtype=x.dtype)


def raw(arr):
    out = arr.asnumpy()
    return out.view(np.uint16).view(BF16) if out.dtype == BF16 else out


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
@pytest.mark.parametrize("inv_scale", [1.0 / 65536, 0.375, 1.0])
def test_unscale_matches_numpy_bitwise(dtype, inv_scale):
    grads = make_grads(dtype, [1, 3, 17, 1000, 200_003], seed=4)
    arrays = [to_nd(g) for g in grads]
    flag = ops.unscale_and_check(arrays, inv_scale)
    assert flag.shape == (1,) and flag.dtype == np.float32 and flag.asnumpy()[0] == 1.0
    for arr, g in zip(arrays, grads):
        ref, _ = unscale_reference(g, inv_scale)
        np.testing.assert_array_equal(raw(arr).view(np.uint8), np.asarray(ref).view(np.uint8))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
@pytest.mark.parametrize("where", [(0, 0), (2, 999), (4, 150_000), (4, 200_002)])
def test_unscale_flags_any_non_finite(dtype, bad, where):
    grads = make_grads("float32", [1, 3, 1000, 17, 200_003], seed=5)
    grads[where[0]][where[1]] = bad
    grads = [bf16_reference(g).view(BF16) if dtype == "bfloat16" else g.astype(dtype) for g in grads]
    arrays = [to_nd(g) for g in grads]
    assert ops.unscale_and_check(arrays, 0.5).asnumpy()[0] == 0.0
    # The pure check (inv_scale == 1) sees it too and writes nothing.
    before = [raw(a).copy() for a in arrays]
    assert ops.unscale_and_check(arrays, 1.0).asnumpy()[0] == 0.0
    for a, b in zip(arrays, before):
        np.testing.assert_array_equal(raw(a).view(np.uint8), b.view(np.uint8))


def test_unscale_handles_signed_zero_and_subnormals():
    x = np.array([-0.0, 0.0, 1e-45, -1e-45, 1e-40, 1.1754942e-38, 3e38], dtype=np.float32)
    arr = mx.nd.array(x)
    flag = ops.unscale_and_check([arr], 0.5)
    assert flag.asnumpy()[0] == 1.0
    np.testing.assert_array_equal(arr.asnumpy().view(np.uint32), (x * np.float32(0.5)).view(np.uint32))


def test_unscale_overflowing_the_storage_type_is_non_finite():
    h = mx.nd.array(np.array([60000.0, 1.0], np.float16), dtype="float16")
    assert ops.unscale_and_check([h], 2.0).asnumpy()[0] == 0.0
    np.testing.assert_array_equal(h.asnumpy(), np.array([np.inf, 2.0], np.float16))
    f = mx.nd.array(np.array([3e38, 1.0], np.float32))
    assert ops.unscale_and_check([f], 4.0).asnumpy()[0] == 0.0


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_unscale_sum_squares(dtype):
    grads = make_grads(dtype, [5, 1, 70_000, 300_001], seed=6)
    arrays = [to_nd(g) for g in grads]
    flag, sumsq = ops.unscale_and_check(arrays, 1.0 / 1024, sum_squares=True)
    assert flag.asnumpy()[0] == 1.0 and sumsq.shape == (1,) and sumsq.dtype == np.float32
    refs = [unscale_reference(g, 1.0 / 1024)[0] for g in grads]
    values = [bf16_to_f32(r) if dtype == "bfloat16" else r for r in refs]
    expected = sum(float(np.sum(np.square(v.astype(np.float64)))) for v in values)
    np.testing.assert_allclose(sumsq.asnumpy()[0], expected, rtol=1e-6)
    # Deterministic: the same inputs give the same bits.
    again = [to_nd(g) for g in grads]
    _, sumsq2 = ops.unscale_and_check(again, 1.0 / 1024, sum_squares=True)
    assert sumsq2.asnumpy()[0] == sumsq.asnumpy()[0]


def test_unscale_mixed_dtypes_many_tensors_and_views():
    rng = np.random.default_rng(7)
    base_np = rng.standard_normal(2000).astype(np.float32)
    base = mx.nd.array(base_np)
    views = [base[13 * i + 1:13 * i + 14] for i in range(150)]
    halves = [mx.nd.array(rng.standard_normal(9), dtype="float16") for _ in range(1000)]
    halves_np = [h.asnumpy() for h in halves]
    flag, sumsq = ops.unscale_and_check(views + halves, 0.25, sum_squares=True)
    assert flag.asnumpy()[0] == 1.0
    ref_views = base_np.copy()
    ref_views[1:13 * 150 + 1] *= np.float32(0.25)
    np.testing.assert_array_equal(base.asnumpy(), ref_views)
    for h, h_np in zip(halves, halves_np):
        np.testing.assert_array_equal(h.asnumpy(), (h_np.astype(np.float32) * 0.25).astype(np.float16))
    expected = np.sum(np.square(ref_views[1:13 * 150 + 1].astype(np.float64))) + sum(
        np.sum(np.square((h.astype(np.float32) * 0.25).astype(np.float16).astype(np.float64)))
        for h in halves_np)
    np.testing.assert_allclose(sumsq.asnumpy()[0], expected, rtol=1e-6)


def test_unscale_numpy_mode_arrays():
    x = mx.np.array([2.0, 4.0])
    flag = ops.unscale_and_check([x], 0.5)
    assert isinstance(flag, mx.np.ndarray) and float(flag[0]) == 1.0
    np.testing.assert_array_equal(x.asnumpy(), [1.0, 2.0])
