"""scripts/llama_cpp.sh picks a configuration of the llama.cpp reference that is correct on the CPU at hand:
native without AMX, the CPU's AVX/AVX-512 flags with AMX off where the CPU has AMX (llama.cpp 0.3.36's AMX
matmul crashes on some Xeons). Checked with --print on CPU descriptions (CKC_CPUINFO), so the AMX branch is
tested on machines without AMX too."""
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAPPHIRE = ("fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma bmi2 avx2 avx_vnni avx512f avx512dq avx512cd avx512bw "
            "avx512vl avx512vbmi avx512_vnni avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8")
ZEN3 = "fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma bmi2 avx2"


def configure(tmp_path, flags, **env):
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nmodel name\t: test CPU\nflags\t\t: {flags}\n")
    out = subprocess.run([os.path.join(ROOT, "scripts", "llama_cpp.sh"), "--print"], capture_output=True, text=True,
                         env=dict(os.environ, CKC_CPUINFO=str(info), **env))
    return out


def test_a_cpu_with_amx_gets_the_avx512_build_without_amx(tmp_path):
    out = configure(tmp_path, SAPPHIRE)
    assert out.returncode == 0, out.stderr
    assert "config: noamx-" in out.stdout
    args = out.stdout.split("cmake:", 1)[1].split()
    for want in ["-DGGML_NATIVE=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF",
                 "-DGGML_AVX512=ON", "-DGGML_AVX512_VNNI=ON", "-DGGML_AVX512_BF16=ON", "-DGGML_AVX512_VBMI=ON",
                 "-DGGML_AVX2=ON", "-DGGML_AVX_VNNI=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON"]:
        assert want in args, (want, args)


def test_a_cpu_without_amx_gets_the_native_build(tmp_path):
    out = configure(tmp_path, ZEN3)
    assert out.returncode == 0 and "config: native-" in out.stdout and "-DGGML_NATIVE=ON" in out.stdout


def test_forced_configurations_and_their_cache_keys(tmp_path):
    # an AVX2-only CPU forced to the explicit-flags build: AVX-512 off; another CPU's native build has another key
    out = configure(tmp_path, ZEN3, CKC_LLAMA_CPP_CONFIG="noamx")
    assert "-DGGML_AVX512=OFF" in out.stdout and "-DGGML_AVX2=ON" in out.stdout
    native_a = configure(tmp_path, ZEN3).stdout.split()[1]
    native_b = configure(tmp_path, ZEN3 + " avx512f").stdout.split()[1]
    assert native_a != native_b, "a native build's cache key must change with the CPU"
    bad = configure(tmp_path, ZEN3, CKC_LLAMA_CPP_CONFIG="fast")
    assert bad.returncode == 2 and "native, noamx, avx512, avx2-vnni or avx2" in bad.stderr


@pytest.mark.parametrize("level, on, off", [
    ("avx512", ["-DGGML_AVX512=ON", "-DGGML_AVX512_VNNI=ON", "-DGGML_AVX_VNNI=ON"],
     ["-DGGML_AVX512_VBMI=OFF", "-DGGML_AVX512_BF16=OFF", "-DGGML_AMX_INT8=OFF"]),
    ("avx2-vnni", ["-DGGML_AVX2=ON", "-DGGML_AVX_VNNI=ON", "-DGGML_FMA=ON"],
     ["-DGGML_AVX512=OFF", "-DGGML_AVX512_VNNI=OFF", "-DGGML_AVX512_VBMI=OFF"]),
    ("avx2", ["-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON"],
     ["-DGGML_AVX_VNNI=OFF", "-DGGML_AVX512=OFF", "-DGGML_AVX512_VNNI=OFF"]),
])
def test_a_level_below_the_cpu_caps_its_flags(tmp_path, level, on, off):
    # (bench_llm --kernels: llama.cpp at the instruction set another CPU has, measured on this one)
    out = configure(tmp_path, SAPPHIRE, CKC_LLAMA_CPP_CONFIG=level)
    assert out.returncode == 0 and f"config: {level}-" in out.stdout, out.stderr
    args = out.stdout.split("cmake:", 1)[1].split()
    for want in on + off + ["-DGGML_NATIVE=OFF"]:
        assert want in args, (want, args)
    # a flag the CPU lacks stays off at any level
    args = configure(tmp_path, ZEN3, CKC_LLAMA_CPP_CONFIG=level).stdout.split("cmake:", 1)[1].split()
    assert "-DGGML_AVX_VNNI=OFF" in args and "-DGGML_AVX512=OFF" in args


@pytest.mark.parametrize("arg", ["--help", "-h"])
def test_help(arg):
    out = subprocess.run([os.path.join(ROOT, "scripts", "llama_cpp.sh"), arg], capture_output=True, text=True)
    assert out.returncode == 0 and "noamx" in out.stdout and "--rebuild" in out.stdout and "--lib" in out.stdout
