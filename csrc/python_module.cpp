// The Python extension module coreai_torch._C. Importing it loads this
// library, whose static initialisers register the coreai_torch operators
// (csrc/ops.cpp); the functions here are test and benchmark hooks, and the eager fast
// path of a kernel call (fast_call.cpp).
#ifndef COREAI_TORCH_NO_PYTHON

#include <torch/extension.h>

#include "cpu/compiler.h"
#include "cpu/fiber.h"
#include "cpu/jit.h"
#include "cpu/source_scan.h"
#include "cuda/jit.h"
#include "cuda/toolchain.h"
#include "fast_call.h"

PYBIND11_MODULE(_C, m) {
  m.doc() = "coreai_torch native library: registers torch.ops.coreai_torch";
  m.def("_fiber_switch_ns", &coreai_torch::cpu::fiber_switch_nanoseconds,
        pybind11::arg("round_trips"),
        "Measured cost of one fiber context switch, in nanoseconds.");
  m.def(
      "_rewrite_threadgroup",
      [](const std::string& s) { return coreai_torch::cpu::rewrite_threadgroup(s); },
      "The CPU backend's threadgroup rewrite of a Metal source.");
  m.def(
      "_rewrite_half_literals",
      [](const std::string& s) { return coreai_torch::cpu::rewrite_half_literals(s); },
      "The CPU backend's rewrite of Metal half literals (1.5h) to C++ (1.5f16).");
  m.def(
      "_reject_c_style_vector_casts",
      [](const std::string& s) { return coreai_torch::cpu::reject_c_style_vector_casts(s); },
      "The CPU backend's renaming of C-style vector casts into a compile error.");
  m.def(
      "_needs_fibers", [](const std::string& s) { return coreai_torch::cpu::needs_fibers(s); },
      "Whether the CPU backend runs this Metal source in fiber mode.");
  m.def("_cpu_cache_directory", &coreai_torch::cpu::cache_directory);
  m.def(
      "_cpu_compiler",
      [] {
        return coreai_torch::cpu::find_compiler("(none)", coreai_torch::cpu::cache_directory())
            .program;
      },
      "The C++ compiler the CPU backend compiles kernels with.");
  m.def("_msl_directory", &coreai_torch::cpu::msl_directory);
  m.def(
      "_cuda_libdevice", [] { return coreai_torch::cuda::find_libdevice(nullptr); },
      "The libdevice.10.bc the CUDA backend compiles with; empty if none is found.");
  m.def(
      "_cuda_compile_command",
      [](const std::string& arch) {
        const auto& tc = coreai_torch::cuda::toolchain("(compile command)");
        std::vector<std::string> argv{tc.clang};
        for (const std::string& flag : coreai_torch::cuda::device_compile_flags(
                 tc, arch, false, coreai_torch::cpu::msl_directory())) {
          argv.push_back(flag);
        }
        return argv;
      },
      pybind11::arg("arch"),
      "The CUDA backend's compiler and flags for GPU architecture `arch` (before -o and the "
      "input), for test programs over the same headers.");
  m.def(
      "_cuda_ptx",
      [](int64_t handle, const std::string& arch) {
        const coreai_torch::KernelRecord& record = coreai_torch::kernel_record(handle);
        pybind11::gil_scoped_release no_gil;  // callers compile many kernels from threads
        return coreai_torch::cuda::ptx_for(record, arch, false);
      },
      pybind11::arg("handle"), pybind11::arg("arch"),
      "The PTX the CUDA backend compiles a registered kernel to for GPU architecture `arch` "
      "(sm_XY); needs no GPU.");
  coreai_torch::add_fast_call(m);
}

#endif  // COREAI_TORCH_NO_PYTHON
