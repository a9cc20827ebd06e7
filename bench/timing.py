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
