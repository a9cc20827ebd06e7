"""Installs mxnet/amp/ into the installed mxnet package and builds libmxnet_amp.so with CMake.

Only files under mxnet/amp/ are installed: none of mxnet's own files is added or changed. The C++
library is compiled against lib_api.h / lib_api.cc of an installed mxnet 1.9.1: the one importable by
the build's Python (pip's isolated build environment gets it from pyproject's build requirements), or
the mxnet package directory named by $MXNET_AMP_MXNET_ROOT. Extra CMake arguments (for example
-DMXNET_AMP_CUDA=ON) can be passed in $MXNET_AMP_CMAKE_ARGS.
"""
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, find_namespace_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
LIBRARY = "libmxnet_amp.so"


def mxnet_root():
    root = os.environ.get("MXNET_AMP_MXNET_ROOT")
    if root:
        return root
    spec = importlib.util.find_spec("mxnet")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("building mxnet-amp needs mxnet==1.9.1 importable by %s (for lib_api.h and "
                           "lib_api.cc), or MXNET_AMP_MXNET_ROOT=<site-packages>/mxnet" % sys.executable)
    return spec.submodule_search_locations[0]


class CMakeBuild(build_ext):
    """Builds the one CMake target mxnet_amp into mxnet/amp/_lib/ of the build tree."""

    def get_ext_filename(self, ext_name):
        return os.path.join(*ext_name.split(".")[:-1], LIBRARY)

    def build_extension(self, ext):
        cmake = shutil.which("cmake")
        if cmake is None:
            raise RuntimeError("cmake not found on PATH (pip installs it from pyproject's build requirements)")
        out_dir = os.path.dirname(os.path.abspath(self.get_ext_fullpath(ext.name)))
        build_dir = os.path.join(os.path.abspath(self.build_temp), "cmake")
        configure = [cmake, "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                     "-DMXNET_ROOT=" + mxnet_root(), "-DMXNET_AMP_OUTPUT_DIR=" + out_dir,
                     "-DPython3_EXECUTABLE=" + sys.executable]
        configure += shlex.split(os.environ.get("MXNET_AMP_CMAKE_ARGS", ""))
        subprocess.check_call(configure)
        subprocess.check_call([cmake, "--build", build_dir, "--target", "mxnet_amp", "--parallel",
                               str(os.cpu_count() or 2)])


setup(
    package_dir={"": "python"},
    packages=find_namespace_packages(where="python", include=["mxnet.amp", "mxnet.amp.*"],
                                     exclude=["mxnet.amp._lib", "*.__pycache__"]),
    package_data={"mxnet.amp.lists": ["*.json"]},
    ext_modules=[Extension("mxnet.amp._lib.libmxnet_amp", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
