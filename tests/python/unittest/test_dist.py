"""dist_sync test: 1 scheduler, 1 server and 2 workers on 127.0.0.1; an overflow on one worker skips everywhere."""
import json
import os
import socket
import subprocess
import sys

import numpy as np

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dist_worker.py")
TIMEOUT = 90


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start(role, port, out):
    env = dict(os.environ, DMLC_ROLE=role, DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(port),
               DMLC_NUM_SERVER="1", DMLC_NUM_WORKER="2", DMLC_NODE_HOST="127.0.0.1", OMP_NUM_THREADS="1")
    log = open(os.path.join(out, role + ".log"), "ab")
    return subprocess.Popen([sys.executable, WORKER, out], env=env, stdout=log, stderr=subprocess.STDOUT)


def _reference(results, lr=0.1, batch=10):
    """NumPy SGD on the summed gradients of both workers, skipping the steps any worker poisoned."""
    w, b = np.full((3, 4), 0.25), np.zeros((3,))  # Dense biases start at zero
    poisoned = {step for r in results for step, ok in enumerate(r["applied"]) if not ok}
    for step in range(len(results[0]["applied"])):
        if step in poisoned:
            continue
        gw = sum(np.array(r["target"][step]).T @ np.array(r["data"][step]) for r in results)
        gb = sum(np.array(r["target"][step]).sum(0) for r in results)
        w, b = w - lr * gw / batch, b - lr * gb / batch
    return w, b


def test_overflow_on_one_worker_skips_on_all(tmp_path):
    out = str(tmp_path)
    port = _free_port()
    procs = [_start("scheduler", port, out), _start("server", port, out)]
    try:
        workers = [_start("worker", port, out) for _ in range(2)]
        procs += workers
        for proc in workers:
            assert proc.wait(timeout=TIMEOUT) == 0, open(os.path.join(out, "worker.log")).read()[-3000:]
        for proc in procs[:2]:
            proc.wait(timeout=30)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    results = sorted((json.load(open(os.path.join(out, "worker%d.json" % rank))) for rank in (0, 1)),
                     key=lambda r: r["rank"])
    # worker 1 poisons steps 1 and 2, worker 0 step 4: every worker skips all three
    assert results[0]["applied"] == results[1]["applied"] == [True, False, False, True, False, True]
    assert results[0]["update_on_kvstore"] is False
    assert results[0]["scaler"] == results[1]["scaler"]
    # 256 -> 128 -> 64 (two overflows) -> 32 (third); growth needs 2 finite steps in a row, which never happens
    assert results[0]["scaler"]["skipped_steps"] == 3 and results[0]["scaler"]["scale"] == 2.0 ** 5
    w, b = _reference(results)
    for result in results:
        np.testing.assert_allclose(result["weight"], w, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(result["bias"], b, rtol=1e-5, atol=1e-6)
