"""Timing helpers shared by the benchmark scripts (run them as ``python bench/NAME.py``)."""
import statistics
import time


def timed(func, repeat, warmup=1):
    """Median wall time of ``func()`` over ``repeat`` runs after ``warmup`` runs; func waits for its results."""
    for _ in range(warmup):
        func()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def split(total, count):
    """``count`` sizes that add up to ``total`` (the last one takes the remainder)."""
    sizes = [total // count] * count
    sizes[-1] += total - sum(sizes)
    return sizes


def copy_seconds(total, repeat):
    """Time to copy ``total`` float32 values: the faster of MXNet ``copyto`` and ``numpy.copyto``."""
    import mxnet as mx
    import numpy as np
    src_np = np.ones(total, dtype=np.float32)
    dst_np = np.empty_like(src_np)
    src, dst = mx.nd.array(src_np), mx.nd.empty(total)

    def mx_copy():
        src.copyto(dst)
        dst.wait_to_read()

    return min(timed(mx_copy, repeat), timed(lambda: np.copyto(dst_np, src_np), repeat))


def best_of(variants, repeat, inner=3):
    """Seconds per call of each variant (best of ``repeat`` rounds of ``inner`` calls), variants alternating."""
    for func in variants.values():
        func()
    best = dict.fromkeys(variants, float("inf"))
    for _ in range(repeat):
        for name, func in variants.items():
            start = time.perf_counter()
            for _ in range(inner):
                func()
            best[name] = min(best[name], (time.perf_counter() - start) / inner)
    return best
