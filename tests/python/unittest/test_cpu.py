"""CPU class detection (mxnet.amp.cpu) and what the policy makes of it, with mocked ``/proc/cpuinfo`` files.

Every class is tested on every machine: the flags come from cpuinfo files written here, the way a Skylake-SP,
a Cooper Lake or a Sapphire Rapids lists them (abridged to the flags that matter plus some that do not).
"""
import pytest

from mxnet.amp.core import cpu
from mxnet.amp.core.support import native_support

from amp_testing import CPUS, cpuinfo_of_class as _cpuinfo, hardware_report_of_class


@pytest.fixture
def mocked(tmp_path, monkeypatch):
    """Point the detection at a mocked cpuinfo of one class; returns the function that does it."""
    monkeypatch.delenv("MXNET_AMP_EMULATE", raising=False)

    def use(cls):
        monkeypatch.setenv(cpu.CPUINFO_ENV, _cpuinfo(tmp_path, cls))
    return use


@pytest.mark.parametrize("cls", sorted(CPUS))
def test_each_class_is_detected_from_its_flags(tmp_path, cls):
    flags = cpu.read_flags(_cpuinfo(tmp_path, cls))
    assert flags == frozenset(CPUS[cls][1].split())
    assert cpu.classify(flags).name == cls


def test_classes_are_ordered_data():
    assert [c.name for c in cpu.CLASSES] == ["a", "b", "c", "d"]
    for lower, higher in zip(cpu.CLASSES, cpu.CLASSES[1:]):
        assert lower.requires < higher.requires
    assert cpu.CLASSES[1].requires == cpu.AVX512_CORE == {"avx512f", "avx512bw", "avx512vl", "avx512dq"}


def test_partial_avx512_is_class_a():
    # Xeon Phi (Knights Landing) has avx512f but neither BW nor VL: oneDNN's avx512_core needs all four
    assert cpu.classify(CPUS["a"][1].split() + ["avx512f", "avx512cd", "avx512er", "avx512pf"]).name == "a"
    assert cpu.classify(cpu.AVX512_CORE - {"avx512dq"}).name == "a"
    assert cpu.classify(()).name == "a"


def test_unreadable_or_flagless_cpuinfo_is_the_lowest_class(tmp_path):
    assert cpu.read_flags(str(tmp_path / "missing")) == frozenset()
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd evtstrm aes\nCPU implementer\t: 0x41\n")
    assert cpu.read_flags(str(arm)) == frozenset()
    assert cpu.classify(cpu.read_flags(str(arm))).name == "a"


def test_first_processor_counts(tmp_path):
    path = tmp_path / "mixed"
    base, avx512 = CPUS["a"][1], " ".join(sorted(cpu.AVX512_CORE))
    path.write_text("processor\t: 0\nflags\t\t: %s\n\nprocessor\t: 1\nflags\t\t: %s %s\n" % (base, base, avx512))
    assert cpu.classify(cpu.read_flags(str(path))).name == "a"


@pytest.mark.parametrize("cls,native", [("a", False), ("b", True), ("c", True), ("d", True)])
def test_native_support_follows_the_mocked_class(mocked, cls, native):
    mocked(cls)
    assert cpu.cpu_class().name == cls and cpu.model_name() == CPUS[cls][0]
    assert native_support("bfloat16", "cpu") is native
    assert native_support("float16", "cpu") is False  # MXNet's CPU float16 kernels are incomplete everywhere
    assert native_support("float16", "gpu") is True and native_support("bfloat16", "gpu") is False


@pytest.mark.parametrize("cls", sorted(CPUS))
def test_emulate_overrides_win_over_the_flags(mocked, monkeypatch, cls):
    mocked(cls)
    monkeypatch.setenv("MXNET_AMP_EMULATE", "1")
    assert native_support("bfloat16", "cpu") is False and native_support("float16", "gpu") is False
    monkeypatch.setenv("MXNET_AMP_EMULATE", "0")
    assert native_support("bfloat16", "cpu") is True


def test_real_machine_without_override(monkeypatch):
    monkeypatch.delenv(cpu.CPUINFO_ENV, raising=False)
    assert cpu.flags() == cpu.read_flags("/proc/cpuinfo")
    assert cpu.cpu_class().requires <= cpu.flags()


@pytest.mark.parametrize("cls", ["a", "d"])
def test_hardware_report_names_the_mocked_class(tmp_path, cls):
    text = hardware_report_of_class(tmp_path, cls)
    first = text.splitlines()[0]
    klass = next(c for c in cpu.CLASSES if c.name == cls)
    assert first.startswith("CPU: %s, class (%s) %s;" % (CPUS[cls][0], cls, klass.title)), first
    assert ("amx_bf16 yes" in first) == (cls == "d") and ("avx512f yes" in first) == (cls != "a")
    assert ("bfloat16 on CPU: emulated" in text) == (cls == "a"), text


@pytest.fixture
def clean_caps(monkeypatch):
    """No ISA cap or class override from the environment the tests run in."""
    for name in cpu.ISA_CAP_ENVS + (cpu.CLASS_ENV,):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("env,cap,expected", [
    ("DNNL_MAX_CPU_ISA", "AVX512_CORE_VNNI", "b"), ("ONEDNN_MAX_CPU_ISA", "avx2", "a"),
    ("DNNL_MAX_CPU_ISA", "AVX512_CORE_BF16", "c"), ("ONEDNN_MAX_CPU_ISA", "AVX512_CORE", "b"),
    ("DNNL_MAX_CPU_ISA", "ALL", "d"), ("DNNL_MAX_CPU_ISA", "NO_SUCH_ISA", "d")])
def test_onednn_isa_caps_lower_the_class(mocked, clean_caps, monkeypatch, env, cap, expected):
    mocked("d")
    monkeypatch.setenv(env, cap)
    assert cpu.hardware_class().name == "d" and cpu.cpu_class().name == expected
    assert native_support("bfloat16", "cpu") is (expected != "a")  # capped to AVX2, MXNet has no bf16 kernels
    assert (cpu.stand_in() is None) == (expected == "d")


def test_a_cap_above_the_cpu_changes_nothing(mocked, clean_caps, monkeypatch):
    mocked("b")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_AMX")
    assert cpu.cpu_class().name == "b" and cpu.stand_in() is None


def test_the_class_override_lowers_and_never_raises(mocked, clean_caps, monkeypatch):
    mocked("c")
    monkeypatch.setenv(cpu.CLASS_ENV, "b")
    assert cpu.cpu_class().name == "b"
    assert cpu.stand_in() == "class (b) stand-in on a class (c) CPU (MXNET_AMP_CPU_CLASS=b)"
    monkeypatch.setenv(cpu.CLASS_ENV, "d")
    with pytest.raises(ValueError, match=r"MXNET_AMP_CPU_CLASS='d': this CPU is class \(c\) AVX512-BF16, and a "
                                         r"stand-in can only lower the class .*expected one of 'a', 'b', 'c'"):
        cpu.cpu_class()
    monkeypatch.setenv(cpu.CLASS_ENV, "B")
    with pytest.raises(ValueError, match=r"MXNET_AMP_CPU_CLASS='B' is not a CPU class: expected one of 'a', 'b', "
                                         r"'c', 'd'"):
        cpu.cpu_class()


def test_stand_in_env_names_the_caps_of_each_lower_class(mocked, clean_caps):
    mocked("d")
    assert cpu.stand_in_env("d") == {}
    for name, isa in cpu.STAND_IN_ISA.items():
        assert cpu.stand_in_env(name) == {"MXNET_AMP_CPU_CLASS": name, "DNNL_MAX_CPU_ISA": isa,
                                          "ONEDNN_MAX_CPU_ISA": isa}
        assert cpu.ISA_CAPS[isa] == name  # the cap alone already lowers the class to the stand-in's
    mocked("b")
    with pytest.raises(ValueError, match=r"cannot stand in for class \(c\) on this class \(b\) CPU: .*expected one "
                                         r"of 'a', 'b'$"):
        cpu.stand_in_env("c")
    with pytest.raises(ValueError, match="stand-in class='e' is not a CPU class"):
        cpu.stand_in_env("e")


_STAND_IN_CHILD = """
import json
import mxnet as mx
from mxnet.amp.core import cpu, library
from mxnet.amp.base.dtypes import BFLOAT16
from mxnet.amp.core.support import native_support, plans_native
x = mx.nd.amp_cast(mx.nd.ones((4, 8)), dtype=BFLOAT16)
try:
    mx.nd.FullyConnected(x, x, num_hidden=4, no_bias=True).wait_to_read()
    mxnet_bf16 = True
except mx.base.MXNetError:
    mxnet_bf16 = False
print(json.dumps({"class": cpu.cpu_class().name, "stand_in": cpu.stand_in(),
                  "native": native_support("bfloat16", "cpu"),
                  "planned": plans_native("bfloat16", "cpu"), "mxnet_bf16": mxnet_bf16, "onednn": library.onednn()[1]}))
"""


@pytest.mark.parametrize("name", ["a", "b"])
def test_a_stand_in_changes_what_the_kernels_run(clean_caps, name):
    """The stand-in's caps reach both oneDNNs: class (a) leaves MXNet no bfloat16 primitive, class (b) keeps it,
    and the library's oneDNN 3 runs at most the capped ISA. Runs on the real CPU (never above it)."""
    import json
    import os
    import subprocess
    import sys
    real = cpu.classify(cpu.read_flags("/proc/cpuinfo"))
    if cpu.CLASSES.index(real) <= cpu.CLASSES.index(cpu.by_name(name)):
        pytest.skip("needs a CPU above class (%s) to stand in for it; this one is class (%s)" % (name, real.name))
    env = {k: v for k, v in os.environ.items() if k not in cpu.ISA_CAP_ENVS + (cpu.CLASS_ENV, cpu.CPUINFO_ENV,
                                                                               "MXNET_AMP_EMULATE")}
    env.update(cpu.stand_in_env(name))
    proc = subprocess.run([sys.executable, "-c", _STAND_IN_CHILD], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["class"] == name and got["stand_in"].startswith("class (%s) stand-in on a class (%s) CPU" % (
        name, real.name))
    assert got["mxnet_bf16"] is got["native"] is (name == "b") and got["planned"] is False
    assert got["onednn"].endswith("cpu isa %s" % {"a": "avx2", "b": "avx512_core_vnni"}[name]), got["onednn"]
