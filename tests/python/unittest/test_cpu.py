"""CPU class detection (mxnet.amp.cpu) and what the policy makes of it, with mocked ``/proc/cpuinfo`` files.

Every class is tested on every machine: the flags come from cpuinfo files written here, the way a Skylake-SP,
a Cooper Lake or a Sapphire Rapids lists them (abridged to the flags that matter plus some that do not).
"""
import pytest

from mxnet.amp import cpu
from mxnet.amp.policy import native_support

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
