"""Builds ``coreai_torch._C``: the launch op, the CPU and CUDA backends and, on macOS, MPS.

``pip install --no-build-isolation .`` (torch must already be installed, so the
extension is compiled against the torch that will load it).
"""

import sys
from pathlib import Path

import torch
from setuptools import find_packages, setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = Path(__file__).parent.resolve()
CSRC = ROOT / "csrc"
IS_MACOS = sys.platform == "darwin"

# csrc/cuda/ loads the CUDA driver at run time: it builds without a CUDA toolkit.
# csrc/ groups its files by role (docs/internals.md): the contract, the
# specialization store and launch, the Python-facing entry, the compile
# pipeline, the Metal-source passes and the targets.
PARTS = ("contract", "specializations", "python", "jit", "source", "cpu", "cuda")
sources = sorted(str(p.relative_to(ROOT)) for part in PARTS for p in CSRC.glob(f"{part}/*.cpp"))
# torch 2.13 headers are C++20.
extra_compile_args = ["-std=c++20", "-O2", "-fvisibility=hidden"]
extra_link_args = []
# The source tree's msl/ headers, for editable installs (an installed wheel finds
# its own copy next to _C, see csrc/cpu/jit.cpp).
define_macros = [
    ("COREAI_TORCH_SOURCE_MSL_DIR", f'"{CSRC / "msl"}"'),
    # std::string crosses into libtorch (operator arguments): use torch's
    # libstdc++ ABI whatever the compiler's default is (some GCC builds
    # default to the old one; torch's extension builder no longer says).
    ("_GLIBCXX_USE_CXX11_ABI", str(int(torch._C._GLIBCXX_USE_CXX11_ABI))),
]

if not IS_MACOS:
    # at::parallel_for is header code that runs serially unless compiled with
    # OpenMP; linking libgomp.so.1 reuses the copy torch has already loaded.
    extra_compile_args += ["-fopenmp"]
    extra_link_args += ["-fopenmp"]

if IS_MACOS:
    sources += sorted(str(p.relative_to(ROOT)) for p in CSRC.glob("mps/*.mm"))
    extra_compile_args += ["-fobjc-arc"]
    extra_link_args += ["-framework", "Metal", "-framework", "Foundation"]
    define_macros.append(("COREAI_TORCH_WITH_MPS", "1"))

setup(
    packages=[*find_packages(include=["coreai_torch", "coreai_torch.*"]), "coreai_torch.msl"],
    package_dir={"coreai_torch.msl": "csrc/msl"},
    package_data={"coreai_torch.msl": ["*", "*/*"]},
    ext_modules=[
        CppExtension(
            "coreai_torch._C",
            sources,
            include_dirs=[str(CSRC)],
            define_macros=define_macros,
            extra_compile_args=extra_compile_args,
            extra_link_args=extra_link_args,
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
