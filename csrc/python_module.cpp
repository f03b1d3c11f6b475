// The Python extension module coreai_torch._C. Importing it loads this
// library, whose static initialisers register the coreai_torch operators
// (csrc/ops.cpp). It holds the contract's facts (_C.contract), a kernel's
// specialization table and eager calls (specialization_table.cpp), the per-kernel
// ops' Autograd kernel (autograd_kernel.cpp), and test and benchmark hooks.
#ifndef COREAI_TORCH_NO_PYTHON

#include <torch/extension.h>

#include "cpu/compiler.h"
#include "cpu/fiber.h"
#include "cpu/jit.h"
#include "cpu/source_scan.h"
#include "autograd_kernel.h"
#include "python_contract.h"
#include "specialization_table.h"

PYBIND11_MODULE(_C, m) {
  m.doc() = "coreai_torch native library: registers torch.ops.coreai_torch";
  m.def("_fiber_switch_ns", &coreai_torch::cpu::fiber_switch_nanoseconds,
        pybind11::arg("round_trips"),
        "Measured cost of one fiber context switch, in nanoseconds.");
  m.def(
      "_metal_to_cpp",
      [](const std::string& s) { return coreai_torch::cpu::metal_to_cpp(s); },
      "The C++ the CPU backend compiles for a Metal source (all text passes).");
  m.def(
      "_rewrite_address_spaces",
      [](const std::string& s) { return coreai_torch::cpu::rewrite_address_spaces(s); },
      "The CPU backend's address-space pass over a Metal source.");
  m.def(
      "_drop_address_space_variants",
      [](const std::string& s) { return coreai_torch::cpu::drop_address_space_variants(s); },
      "The CPU backend's pass keeping one version of address-space-qualified member functions.");
  m.def(
      "_drop_metal_namespace_reopening",
      [](const std::string& s) { return coreai_torch::cpu::drop_metal_namespace_reopening(s); },
      "The CPU backend's pass that merges `namespace metal { ... }` into the kernel's namespace.");
  m.def(
      "_rewrite_conversions",
      [](const std::string& s) { return coreai_torch::cpu::rewrite_conversions(s); },
      "The CPU backend's pass giving vector casts Metal's meaning.");
  m.def(
      "_rewrite_half_literals",
      [](const std::string& s) { return coreai_torch::cpu::rewrite_half_literals(s); },
      "The CPU backend's rewrite of Metal half literals (1.5h) to C++ (1.5f16).");
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
  coreai_torch::add_autograd_kernel(m);
  coreai_torch::add_contract(m);
  coreai_torch::add_specialization_table(m);
}

#endif  // COREAI_TORCH_NO_PYTHON
