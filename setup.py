"""Installs mxnet/amp/ into the installed mxnet package and builds libmxnet_amp.so with CMake.

Only files under mxnet/amp/ are installed: none of mxnet's own files is added or changed. The C++
library is compiled against lib_api.h / lib_api.cc of an installed mxnet 1.9.1: the one importable by
the build's Python (pip's isolated build environment gets it from pyproject's build requirements), or
the mxnet package directory named by $MXNET_AMP_MXNET_ROOT. Extra CMake arguments can be passed in
$MXNET_AMP_CMAKE_ARGS.

CUDA kernels: built by default where the MXNet of the target environment (the one pip installs into, seen
outside pip's build isolation) is a CUDA build and nvcc is found, for the GPU architectures both that MXNet's
CUDA runtime and nvcc support, with PTX of the newest so that newer GPUs JIT it. ``MXNET_AMP_CUDA=0`` or
``=1`` overrides the choice, ``MXNET_AMP_CUDA_ARCHS="80;86"`` the architectures. One line says what is built.
The installed libraries' RUNPATH holds only $ORIGIN-relative entries, and they need glibc 2.17 and no system libstdc++
(CMake's MXNET_AMP_PORTABLE, on by default: see docs/install.md).
"""
import importlib.util
import json
import os
import shlex
import shutil
import struct
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


#: x86 GPU architectures (compute capability x10) that each CUDA major version's runtime supports: the
#: GPUs an mxnet-cu1xx wheel of that CUDA can run on (CUDA 11.x: Kepler sm_35 through Ampere sm_86).
CUDA_RUNTIME_ARCHS = {11: (35, 37, 50, 52, 53, 60, 61, 70, 75, 80, 86), 12: (50, 52, 60, 61, 70, 75, 80, 86, 89, 90)}

_TARGET_MXNET = (
    "import importlib.util as u, json, os\n"
    "s = u.find_spec('mxnet')\n"
    "d = s.submodule_search_locations[0] if s and s.submodule_search_locations else None\n"
    "print(json.dumps(d and os.path.join(d, 'libmxnet.so')))\n")


def target_libmxnet():
    """libmxnet.so of the environment pip installs into (``-I``: outside the build isolation), or None."""
    try:
        out = subprocess.run([sys.executable, "-I", "-c", _TARGET_MXNET], capture_output=True, text=True,
                             timeout=60, cwd="/")
        path = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None
    return path if path and os.path.isfile(path) else None


def needed_libraries(path):
    """The DT_NEEDED entries of the 64-bit little-endian ELF file at ``path``."""
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2:
            return []
        shoff, = struct.unpack_from("<Q", head, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", head, 0x3A)
        f.seek(shoff)
        sections = [struct.unpack_from("<IIQQQQIIQQ", f.read(shentsize)) for _ in range(shnum)]
        dynamic = [s for s in sections if s[1] == 6]  # SHT_DYNAMIC
        if not dynamic:
            return []
        _, _, _, _, offset, size, link, _, _, _ = dynamic[0]
        strtab = sections[link]
        f.seek(strtab[4])
        strings = f.read(strtab[5])
        f.seek(offset)
        data = f.read(size)
    names = []
    for i in range(0, len(data) - 15, 16):
        tag, value = struct.unpack_from("<qQ", data, i)
        if tag == 0:
            break
        if tag == 1:  # DT_NEEDED
            names.append(strings[value:strings.index(b"\0", value)].decode())
    return names


def cuda_choice():
    """CMake arguments for the CUDA kernels, and the one line that says what is built."""
    forced = os.environ.get("MXNET_AMP_CUDA")
    libmxnet = target_libmxnet()
    cudart = [n for n in (needed_libraries(libmxnet) if libmxnet else []) if n.startswith("libcudart.so.")]
    nvcc = os.environ.get("CUDACXX") or shutil.which("nvcc")
    if forced == "0" or (forced != "1" and not (cudart and nvcc)):
        why = ("MXNET_AMP_CUDA=0" if forced == "0" else "no nvcc found" if cudart else
               "the installed MXNet is not a CUDA build" if libmxnet else "no installed MXNet found")
        return ["-DMXNET_AMP_CUDA=OFF"], "mxnet-amp: CPU kernels only (%s)" % why
    if nvcc is None:
        raise RuntimeError("MXNET_AMP_CUDA=1 but nvcc is not on PATH (or set CUDACXX)")
    archs = os.environ.get("MXNET_AMP_CUDA_ARCHS")
    if not archs:
        listed = subprocess.run([nvcc, "--list-gpu-code"], capture_output=True, text=True).stdout.split()
        supported = {int(code[3:]) for code in listed if code.startswith("sm_") and code[3:].isdigit()}
        major = int(cudart[0].split(".so.")[1].split(".")[0]) if cudart else max(CUDA_RUNTIME_ARCHS)
        fitting = sorted(supported & set(CUDA_RUNTIME_ARCHS.get(major, ())))
        if not fitting:
            raise RuntimeError("nvcc %s supports none of the GPU architectures of MXNet's CUDA %d runtime (%s); "
                               "set MXNET_AMP_CUDA_ARCHS or MXNET_AMP_CUDA=0" % (nvcc, major, sorted(supported)))
        archs = ";".join(["%d-real" % a for a in fitting[:-1]] + ["%d" % fitting[-1]])
    where = "%s (%s)" % (os.path.dirname(libmxnet), cudart[0]) if cudart else "MXNET_AMP_CUDA=1"
    return (["-DMXNET_AMP_CUDA=ON", "-DCMAKE_CUDA_COMPILER=" + nvcc, "-DCMAKE_CUDA_ARCHITECTURES=" + archs],
            "mxnet-amp: CUDA kernels for %s with %s, for MXNet in %s" % (archs.replace("-real", ""), nvcc, where))


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
                     "-DPython3_EXECUTABLE=" + sys.executable, "-DMXNET_AMP_RELOCATABLE=ON"]
        cuda_args, line = cuda_choice()
        configure += cuda_args + shlex.split(os.environ.get("MXNET_AMP_CMAKE_ARGS", ""))
        print(line, flush=True)  # pip shows it with -v; `python -m mxnet.amp hardware` says it afterwards too
        subprocess.check_call(configure)
        subprocess.check_call([cmake, "--build", build_dir, "--target", "mxnet_amp", "--parallel",
                               str(os.cpu_count() or 2)])


setup(
    package_dir={"": "python"},
    packages=find_namespace_packages(where="python", include=["mxnet.amp", "mxnet.amp.*"],
                                     exclude=["mxnet.amp._lib", "*.__pycache__"]),
    package_data={"mxnet.amp.core": ["*.json"], "mxnet.amp.lists": ["*.json"]},
    ext_modules=[Extension("mxnet.amp._lib.libmxnet_amp", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
