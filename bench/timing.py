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
