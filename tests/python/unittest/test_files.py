"""Files written whole or not at all (mxnet.amp.base.files): permissions as a plain open() gives them, and the
temporaries of killed writers cleaned up."""
import os
import stat
import subprocess
import sys

import mxnet as mx
import pytest
from mxnet import amp, autograd, gluon

from mxnet.amp.base import files


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def umask():
    def set_mask(mask):
        os.umask(mask)
    old = os.umask(0o022)
    yield set_mask
    os.umask(old)


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_new_files_get_the_umask_mode_and_existing_ones_keep_theirs(tmp_path, umask, mask):
    umask(mask)
    path = str(tmp_path / "f")
    files.atomic_write(path, b"one")
    with open(str(tmp_path / "plain"), "wb") as out:
        out.write(b"x")
    assert _mode(path) == _mode(str(tmp_path / "plain")) == 0o666 & ~mask
    os.chmod(path, 0o640)
    files.atomic_write(path, b"two")
    assert _mode(path) == 0o640 and open(path, "rb").read() == b"two"


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = str(tmp_path / "f")
    files.atomic_write(path, b"old")
    with pytest.raises(RuntimeError, match="boom"):
        with files.atomic_output(path) as tmp:
            with open(tmp, "wb") as out:
                out.write(b"half")
            raise RuntimeError("boom")
    assert open(path, "rb").read() == b"old" and os.listdir(str(tmp_path)) == ["f"]


def test_temporaries_of_dead_writers_are_removed_and_live_ones_kept(tmp_path):
    path = str(tmp_path / "f")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    mine = files.temporary_beside(path)
    os.remove(mine)
    dead_tmp = mine.replace(".%d." % os.getpid(), ".%s." % dead.stdout.strip())
    open(dead_tmp, "wb").close()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live_tmp = dead_tmp.replace(".%s." % dead.stdout.strip(), ".%d." % live.pid)
        open(live_tmp, "wb").close()
        other = str(tmp_path / (".g.%s" % os.path.basename(dead_tmp).split(".", 2)[2]))  # another file's
        open(other, "wb").close()
        assert files.stale_temporaries(path) == [dead_tmp]
        files.atomic_write(path, b"new")
        left = sorted(os.listdir(str(tmp_path)))
        assert left == sorted(["f", os.path.basename(live_tmp), os.path.basename(other)]), left
    finally:
        live.kill()
        live.wait()


def test_trainer_states_and_converted_models_are_readable_by_the_group(tmp_path, umask):
    umask(0o022)
    amp.init("bfloat16")
    net = gluon.nn.Dense(2, in_units=3)
    net.initialize()
    trainer = gluon.Trainer(net.collect_params(), "sgd")
    amp.init_trainer(trainer)
    with autograd.record():
        net(mx.nd.ones((1, 3))).sum().backward()
    trainer.step(1)
    trainer.save_states(str(tmp_path / "states"))
    amp.reset()
    low = amp.convert_hybrid_block(net, mx.nd.ones((1, 3)), "float16", cast_params_offline=True)
    amp.export_onnx(low, None, [(1, 3)], str(tmp_path / "m.onnx"))
    for name in ("states", "m.onnx"):
        assert _mode(str(tmp_path / name)) == 0o644, name
