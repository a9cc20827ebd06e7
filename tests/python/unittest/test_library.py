"""Loading of libmxnet_amp by mxnet.amp.core.library: once, quietly, from $MXNET_AMP_LIBRARY when set."""
import importlib
import json
import os
import shutil
import subprocess
import sys

import mxnet as mx
import numpy as np
import pytest

from mxnet.amp.core import library, ops


def run_python(code, **env):
    full_env = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=full_env, cwd="/", timeout=120)


def test_library_path_is_real_and_ops_registered():
    assert os.path.isabs(library.LIBRARY_PATH) and os.path.isfile(library.LIBRARY_PATH)
    assert library.LIBRARY_PATH == os.path.realpath(library.LIBRARY_PATH)
    registered = set(mx.operator.get_all_registered_operators())
    for name in library.OP_NAMES:
        assert name in registered
        assert callable(getattr(mx.nd, name)) and callable(getattr(mx.sym, name))
    assert library.cpu_isa() in ("avx512", "avx2", "baseline")


def test_reload_does_not_load_again(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("MXLoadLib called a second time")

    monkeypatch.setattr(mx.base._LIB, "MXLoadLib", fail)
    path = library.LIBRARY_PATH
    importlib.reload(library)
    assert library.LIBRARY_PATH == path


def test_import_is_quiet():
    result = run_python("import mxnet.amp")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "" and result.stderr == ""


def test_loading_leaves_mxnets_operator_functions_as_they_are():
    """The library's ops get functions of their own; MXNet's are not regenerated (mx.library.load would replace
    every one, undoing a patch made before, as mxnet.contrib.amp.init's)."""
    code = (
        "import json, types, mxnet as mx\n"
        "modules = [mx.nd, mx.nd.op, mx.nd._internal, mx.sym, mx.sym.op, mx.sym._internal]\n"
        "def functions():\n"
        "    return {(m.__name__, k): id(v) for m in modules for k, v in vars(m).items()\n"
        "            if isinstance(v, types.FunctionType)}\n"
        "patched = lambda *a, **k: 'patched'\n"
        "mx.nd.FullyConnected = patched\n"
        "before = functions()\n"
        "from mxnet import amp\n"
        "from mxnet.amp.core import library\n"
        "after = functions()\n"
        "changed = sorted('%s.%s' % k for k in before if after.get(k) != before[k])\n"
        "added = sorted({k[1] for k in set(after) - set(before)})\n"
        "works = mx.nd.amp_fully_connected(mx.nd.ones((2, 3)), mx.nd.ones((4, 3)), num_hidden=4, no_bias=True)\n"
        "print(json.dumps({'changed': changed, 'added': added, 'ops': list(library.OP_NAMES),\n"
        "                  'patched': mx.nd.FullyConnected is patched, 'sum': float(works.sum().asscalar()),\n"
        "                  'module': mx.sym.amp_layer_norm.__module__}))\n"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got["changed"] == [] and got["patched"] is True
    assert set(got["ops"]) <= set(got["added"])  # each op of the library, in mx.nd, mx.sym and their .op
    assert all(name.startswith(("amp_", "_backward_amp_")) for name in got["added"]), got["added"]
    assert got["sum"] == 24.0 and got["module"] == "mxnet.symbol"


def test_missing_library_names_path_and_build_command():
    result = run_python("import mxnet.amp", MXNET_AMP_LIBRARY="/nonexistent/libmxnet_amp.so")
    assert result.returncode != 0
    assert "ImportError" in result.stderr
    assert "/nonexistent/libmxnet_amp.so" in result.stderr
    assert "tools/build_dev.sh" in result.stderr and "pip install ." in result.stderr


def test_env_var_selects_library_and_copies_are_not_loaded_twice(tmp_path):
    copy = tmp_path / "libmxnet_amp.so"
    shutil.copy(library.LIBRARY_PATH, copy)
    link = tmp_path / "link.so"
    link.symlink_to(copy)
    code = (
        "import mxnet as mx\n"
        "from mxnet.amp.core import library, ops\n"
        "print(library.LIBRARY_PATH)\n"
        "loads = []\n"
        "mx.base._LIB.MXLoadLib = lambda *a: loads.append(a)\n"
        "import importlib, os\n"
        "os.environ['MXNET_AMP_LIBRARY'] = %r\n"
        "importlib.reload(library)\n"
        "print(len(loads))\n"
        "print(ops.multi_cast([mx.nd.ones(2)], 'float16')[0].asnumpy().tolist())\n"
    ) % library.LIBRARY_PATH
    result = run_python(code, MXNET_AMP_LIBRARY=str(link))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split("\n")
    assert lines[0] == str(copy)  # the real path behind the symlink
    assert lines[1] == "0"  # ops already registered: another copy is not loaded
    assert lines[2] == "[1.0, 1.0]"


@pytest.mark.parametrize("op", ["amp_multi_cast", "amp_multi_widest_cast"])
def test_cast_ops_work_in_symbol_graphs(op):
    # a float32 and a float16 input: amp_multi_cast(float16) rounds the first, the widest cast widens the second
    a, b = mx.sym.var("a"), mx.sym.var("b")
    attrs = {"dtype": "float16"} if op == "amp_multi_cast" else {}
    sym = getattr(mx.sym, op)(a, b, num_args=2, **attrs)
    values_a = np.array([1.0 + 2.0 ** -13, 2.0, 70000.0], dtype=np.float32)  # below half an fp16 ulp; overflow
    values_b = np.array([3.0, 0.1], dtype=np.float16)
    args = {"a": mx.nd.array(values_a), "b": mx.nd.array(values_b, dtype=np.float16)}
    outputs = sym.bind(mx.cpu(), args).forward()
    want_dtype = np.float16 if op == "amp_multi_cast" else np.float32
    assert [o.dtype for o in outputs] == [want_dtype, want_dtype]
    np.testing.assert_array_equal(outputs[0].asnumpy(), values_a.astype(want_dtype))
    np.testing.assert_array_equal(outputs[1].asnumpy(), values_b.astype(want_dtype))
    if op == "amp_multi_cast":
        assert outputs[0].asnumpy().tolist() == [1.0, 2.0, float("inf")]


def test_unscale_op_mutates_its_inputs_in_symbol_graphs():
    # Mutable inputs are auxiliary states of a symbol.
    a, b = mx.sym.var("a"), mx.sym.var("b")
    sym = mx.sym.amp_multi_unscale_check(a, b, num_args=2, inv_scale=0.5)
    assert sym.list_auxiliary_states() == ["a", "b"]
    aux = {"a": mx.nd.array([1.0, 2.0]), "b": mx.nd.array([3.0])}
    (flag,) = sym.bind(mx.cpu(), {}, aux_states=aux).forward()
    assert flag.asnumpy().tolist() == [1.0]
    assert aux["a"].asnumpy().tolist() == [0.5, 1.0] and aux["b"].asnumpy().tolist() == [1.5]


def test_unscale_and_check_rejects_an_array_given_twice():
    import mxnet as mx
    g = mx.nd.ones(4)
    with pytest.raises(ValueError, match=r"arrays\[1\] is arrays\[0\] again"):
        ops.unscale_and_check([g, g], 0.5)
    assert (g.asnumpy() == 1).all()


def test_other_mxnet_versions_are_refused_naming_what_is_installed():
    code = ("import mxnet\nmxnet.__version__ = '1.8.0'\n"
            "try:\n    import mxnet.amp\nexcept ImportError as err:\n    print(err)\n")
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    message = result.stdout.strip()
    assert message.startswith("mxnet.amp supports MXNet 1.9.1 only (the mxnet or mxnet-cu1xx 1.9.1 wheels")
    dist = "mxnet-cu117" if mx.runtime.Features().is_enabled("CUDA") else "mxnet"
    assert "installed: MXNet 1.8.0 (%s 1.9.1) at %s" % (dist, os.path.dirname(mx.__file__)) in message, message


def test_installed_libraries_carry_only_origin_relative_runpaths():
    # read from the installed files: a build-time path (pip's isolated build directory under /tmp) would be
    # gone after the install and writable by any local user
    lib_dir = os.path.dirname(library.LIBRARY_PATH)
    libs = sorted(f for f in os.listdir(lib_dir) if f.endswith(".so"))
    assert "libmxnet_amp.so" in libs
    for name in libs:
        dynamic = subprocess.run(["readelf", "-d", os.path.join(lib_dir, name)], capture_output=True, text=True,
                                 check=True).stdout
        for line in dynamic.splitlines():
            if "(RUNPATH)" in line or "(RPATH)" in line:
                entries = line.split("[", 1)[1].rstrip("]").split(":")
                assert all(e.startswith("$ORIGIN") for e in entries), (name, entries)


#: The newest glibc symbol version the installed libraries may need: 2.17, as MXNet 1.9.1's wheel (manylinux2014).
#: Portable builds (CMake's MXNET_AMP_PORTABLE, the default; src/operator/amp/compat/glibc_compat.cc).
PORTABLE_GLIBC = (2, 17)


def _version_needs(path):
    """{needed file: [version names]} of an ELF file's version needs section, as ``readelf -V`` prints it."""
    needs, current = {}, None
    for line in subprocess.run(["readelf", "-V", "--wide", path], capture_output=True, text=True,
                               check=True).stdout.splitlines():
        if "File: " in line:
            current = needs.setdefault(line.split("File: ", 1)[1].split()[0], [])
        elif "Name: " in line and current is not None:
            current.append(line.split("Name: ", 1)[1].split()[0])
    return needs


def _newest(names, prefix):
    versions = [tuple(int(p) for p in n[len(prefix):].split(".")) for n in names if n.startswith(prefix)]
    return max(versions, default=None)


def test_installed_libraries_load_where_mxnets_wheel_does():
    """glibc 2.17 at most, and no newer libstdc++ than MXNet's own libmxnet.so needs (none: it is linked in)."""
    mxnet_needs = _version_needs(os.path.join(os.path.dirname(mx.__file__), "libmxnet.so"))
    mxnet_glibcxx = _newest(mxnet_needs.get("libstdc++.so.6", []), "GLIBCXX_3.4.") or (0,)
    lib_dir = os.path.dirname(library.LIBRARY_PATH)
    libs = sorted(f for f in os.listdir(lib_dir) if f.endswith(".so"))
    assert "libmxnet_amp.so" in libs
    for name in libs:
        needs = _version_needs(os.path.join(lib_dir, name))
        assert needs.get("libc.so.6"), (name, needs)  # the parse found the section
        glibc = _newest([v for versions in needs.values() for v in versions], "GLIBC_")
        assert glibc <= PORTABLE_GLIBC, (name, "needs GLIBC_%s" % ".".join(map(str, glibc)), needs)
        glibcxx = _newest(needs.get("libstdc++.so.6", []), "GLIBCXX_3.4.")
        assert glibcxx is None or glibcxx <= mxnet_glibcxx, (name, glibcxx, mxnet_glibcxx)
