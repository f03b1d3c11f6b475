// The Python extension module coreai_torch._C. Importing it loads this
// library, whose static initialisers register the coreai_torch operators
// (specializations/ops.cpp). It holds the contract's facts (_C.contract), a
// kernel's table and the launch of its calls (kernel_table.cpp, kernel_call.cpp),
// the C++ kernels of each kernel's op (kernel_op.cpp), and test and benchmark
// hooks of the CPU and CUDA backends.
#include <torch/extension.h>

#include "cpu/access_checker.h"
#include "jit/compiler.h"
#include "cpu/fiber.h"
#include "cpu/group_form.h"
#include "cpu/target.h"
#include "jit/cache_dir.h"
#include "jit/pipeline.h"
#include "cpu/kernel_guard.h"
#include "source/metal_fidelity.h"
#include "source/source_scan.h"
#include "cpu/x86_division.h"
#include "cuda/target.h"
#include "cuda/toolchain.h"
#include "cuda/chained_products.h"
#include "cuda/paired_products.h"
#include "cuda/vector_alignment.h"
#include "python/kernel_call.h"
#include "python/contract_module.h"
#include "python/kernel_op.h"
#include "python/kernel_table.h"

namespace {

// A launch stopped by SIGINT raises what Python's SIGINT handler raises
// (KeyboardInterrupt unless the program installed its own); the launcher's
// SIGINT handler has already called Python's, so the signal is pending. If no
// handler raised (another thread's launch, or a handler that returns), the
// launch still did not finish: KeyboardInterrupt with the launcher's message.
void raise_keyboard_interrupt(const std::string& message) {
  pybind11::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw pybind11::error_already_set();
  PyErr_SetString(PyExc_KeyboardInterrupt, message.c_str());
  throw pybind11::error_already_set();
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "coreai_torch native library: registers torch.ops.coreai_torch";
  m.def("_fiber_switch_ns", &coreai_torch::cpu::fiber_switch_nanoseconds,
        pybind11::arg("round_trips"),
        "Measured cost of one fiber context switch, in nanoseconds.");
  m.def(
      "_metal_to_cpp",
      [](const std::string& s) { return coreai_torch::source::metal_to_cpp(s); },
      "The C++ the CPU backend compiles for a Metal source (all text passes).");
  m.def(
      "_rewrite_address_spaces",
      [](const std::string& s) { return coreai_torch::source::rewrite_address_spaces(s); },
      "The CPU backend's address-space pass over a Metal source.");
  m.def(
      "_drop_address_space_variants",
      [](const std::string& s) { return coreai_torch::source::drop_address_space_variants(s); },
      "The CPU backend's pass keeping one version of address-space-qualified member functions.");
  m.def(
      "_drop_metal_namespace_reopening",
      [](const std::string& s) { return coreai_torch::source::drop_metal_namespace_reopening(s); },
      "The CPU backend's pass that merges `namespace metal { ... }` into the kernel's namespace.");
  m.def(
      "_rewrite_conversions",
      [](const std::string& s) { return coreai_torch::source::rewrite_conversions(s); },
      "The CPU backend's pass giving vector casts Metal's meaning.");
  m.def(
      "_rewrite_half_literals",
      [](const std::string& s) { return coreai_torch::source::rewrite_half_literals(s); },
      "The CPU backend's rewrite of Metal half literals (1.5h) to C++ (1.5f16).");
  m.def(
      "_needs_fibers", [](const std::string& s) { return coreai_torch::source::needs_fibers(s); },
      "Whether the CPU backend runs this Metal source in fiber mode.");
  m.def(
      "_cpu_execution_form",
      [](const std::string& s, bool debug) {
        const coreai_torch::cpu::FormChoice c = coreai_torch::cpu::choose_execution_form(s, debug);
        return pybind11::make_tuple(coreai_torch::cpu::execution_form_name(c.form), c.reason,
                                    c.summary, c.rendering);
      },
      pybind11::arg("source"), pybind11::arg("debug") = false,
      "How the CPU backend runs a rendering: (form, why not group loops, what the group-loop "
      "form did, its rendering).");
  m.def(
      "_cpu_cache_directory", [] { return coreai_torch::jit::CacheDir::current("CPU").path(); },
      "The kernel cache directory (COREAI_TORCH_CACHE_DIR), created and checked.");
  m.def(
      "_cpu_compiler",
      [] {
        return coreai_torch::jit::find_compiler("(none)", "CPU",
                                                coreai_torch::jit::CacheDir::current("CPU"))
            .program;
      },
      "The C++ compiler the CPU backend compiles kernels with.");
  m.def("_start_compiler_check", &coreai_torch::jit::start_compiler_check, pybind11::arg("kernel"),
        "Starts looking for the kernel compiler on a thread of its own, once per process "
        "(jit/compiler.h, start_compiler_check).");
  m.def("_wait_for_compiler_check", &coreai_torch::jit::wait_for_compiler_check,
        pybind11::call_guard<pybind11::gil_scoped_release>(),
        "Waits up to a few seconds for the search _start_compiler_check started (at exit).");
  m.def("_cpu_kernel_flags", &coreai_torch::cpu::kernel_compile_flags,
        "The flags the CPU backend compiles every kernel with on this machine.");
  m.def(
      "_msl_directory", [] { return coreai_torch::jit::msl_directory("CPU"); },
      "The directory of the Metal standard library headers the backends compile against.");
  m.def(
      "_metal_may_recurse",
      [](const std::string& rendering, const std::string& entry) {
        return coreai_torch::source::may_recurse(rendering, entry);
      },
      pybind11::arg("rendering"), pybind11::arg("entry"),
      "Whether the user's text of a buffer rendering may hold a recursive function, so that "
      "its compile asks clang for the inliner's remarks (metal_fidelity.h).");
  m.def("_metal_fidelity_enabled", &coreai_torch::source::metal_fidelity_enabled,
        "Whether kernels compiled now refuse what Metal refuses (COREAI_TORCH_METAL_FIDELITY).");
  m.def(
      "_refuse_non_metal_in_asset",
      [](const std::string& kernel, const std::string& rendering) {
        coreai_torch::source::refuse_non_metal(
            kernel, coreai_torch::source::find_non_metal_constructs(rendering),
            "it is not written into a Core AI asset (set COREAI_TORCH_METAL_FIDELITY=0 to "
            "convert it anyway)");
      },
      pybind11::arg("kernel"), pybind11::arg("rendering"),
      "Raises the MetalCompileError of the source checks of Metal fidelity (metal_fidelity.h) "
      "for a buffer rendering of `kernel`, worded for the converter; returns if they find "
      "nothing.");
  m.def(
      "_complete_x86_division",
      [](const std::string& code, std::vector<uint64_t> gpr) {
        // For tests: the code bytes are copied into a buffer followed by
        // padding, so that decoding never reads past them.
        std::string padded = code + std::string(16, '\x90');
        coreai_torch::cpu::X86Registers regs{};
        for (size_t i = 0; i < 16 && i < gpr.size(); ++i) regs.gpr[i] = gpr[i];
        regs.rip = reinterpret_cast<uint64_t>(padded.data());
        if (!coreai_torch::cpu::complete_x86_division(regs)) {
          return pybind11::object(pybind11::none());
        }
        std::vector<uint64_t> out(regs.gpr, regs.gpr + 16);
        return pybind11::object(pybind11::make_tuple(
            out, regs.rip - reinterpret_cast<uint64_t>(padded.data())));
      },
      "For tests: completes the x86-64 div/idiv in `code` (register divisors only) on "
      "the registers `gpr` (rax, rcx, rdx, ...); returns (registers, instruction length), or "
      "None if `code` is not a division.");
  m.def(
      "_cuda_libdevice", [] { return coreai_torch::cuda::find_libdevice(nullptr); },
      "The libdevice.10.bc the CUDA backend compiles with; empty if none is found.");
  m.def(
      "_cuda_compile_command",
      [](const std::string& arch) {
        const auto& tc = coreai_torch::cuda::toolchain("(compile command)");
        std::vector<std::string> argv{tc.compiler.program};
        for (const std::string& flag : coreai_torch::cuda::device_compile_flags(tc, arch, false)) {
          argv.push_back(flag);
        }
        argv.insert(argv.end(), {"-I", coreai_torch::jit::msl_directory("CUDA")});
        return argv;
      },
      pybind11::arg("arch"),
      "The CUDA backend's compiler and flags for GPU architecture `arch` (before -o and the "
      "input), for test programs over the same headers.");
  m.def(
      "_cuda_ptx",
      [](int64_t handle, const std::string& arch, bool whole_simdgroups, bool aligned_tensors,
         int steps) {
        const std::shared_ptr<const coreai_torch::KernelRecord> record =
            coreai_torch::kernel_record(handle);
        pybind11::gil_scoped_release no_gil;  // callers compile many kernels from threads
        return coreai_torch::cuda::ptx_for(*record, arch, false,
                                           {whole_simdgroups, aligned_tensors, steps});
      },
      pybind11::arg("handle"), pybind11::arg("arch"), pybind11::arg("whole_simdgroups") = false,
      pybind11::arg("aligned_tensors") = false, pybind11::arg("steps") = 1,
      "The PTX the CUDA backend compiles a registered kernel to for GPU architecture `arch` "
      "(sm_XY), in the launch form (cuda/target.h, LaunchForm) for launches with partial "
      "SIMD-groups or, with `whole_simdgroups`, without; for any tensors or, with "
      "`aligned_tensors`, for 16-byte aligned data and outer strides; with `steps` Metal "
      "threads per CUDA thread; needs no GPU.");
  m.def(
      "_cuda_steps_form",
      [](const std::string& s) {
        const coreai_torch::cpu::FormChoice c = coreai_torch::cpu::cuda_steps_form(s);
        return pybind11::make_tuple(c.reason, c.summary, c.rendering);
      },
      pybind11::arg("source"),
      "The CUDA backend's steps form of a rendering (several Metal threads per CUDA thread): "
      "(why there is none, what the form did, its rendering).");
  m.def(
      "_cuda_version_vectors",
      [](const std::string& ir) {
        coreai_torch::cuda::VersionedVectors v = coreai_torch::cuda::version_underaligned_vectors(ir);
        return pybind11::make_tuple(v.ir, v.count, v.proven);
      },
      pybind11::arg("ir"),
      "For tests: the CUDA backend's rewrite of optimized LLVM IR that tests the alignment of "
      "under-aligned accesses at run time (cuda/vector_alignment.h); returns (IR, how many "
      "accesses are tested, how many are proven aligned and left untested).");
  m.def(
      "_cuda_async_copies",
      [](const std::string& ir) {
        coreai_torch::cuda::VersionedVectors v =
            coreai_torch::cuda::version_underaligned_vectors(ir, true);
        return pybind11::make_tuple(v.ir, v.async, v.count);
      },
      pybind11::arg("ir"),
      "For tests: the alignment rewrite of optimized LLVM IR with a kernel's copies from "
      "buffers to threadgroup arrays made asynchronous, as for sm_80 and later "
      "(cuda/async_copies.h); returns (IR, how many copies, how many accesses are tested).");
  m.def(
      "_cuda_pair_products",
      [](const std::string& ir) {
        coreai_torch::cuda::PairedProducts p = coreai_torch::cuda::pair_products_sharing_b(ir);
        return pybind11::make_tuple(p.ir, p.count);
      },
      pybind11::arg("ir"),
      "For tests: the CUDA backend's rewrite of optimized LLVM IR that puts two SIMD-group "
      "matrix products sharing B on one tensor-core instruction (cuda/paired_products.h); "
      "returns (IR, how many pairs were made).");
  m.def(
      "_cuda_fuse_chained_products",
      [](const std::string& ir) {
        coreai_torch::cuda::ChainedProducts p = coreai_torch::cuda::fuse_chained_products(ir);
        return pybind11::make_tuple(p.ir, p.count);
      },
      pybind11::arg("ir"),
      "For tests: the CUDA backend's rewrite of optimized LLVM IR that makes two SIMD-group "
      "matrix products in a row on one accumulator one m16n8k16 (cuda/chained_products.h); "
      "returns (IR, how many m16n8k16 were made).");
  m.def(
      "_cuda_loaded_steps",
      [](int64_t handle, int device) {
        const coreai_torch::cuda::KernelModule* module =
            coreai_torch::kernel_record(handle)->artifacts.cuda.built();
        return module != nullptr ? module->loaded_steps(device) : std::vector<int>{};
      },
      pybind11::arg("handle"), pybind11::arg("device") = 0,
      "Metal threads per CUDA thread of each form of a registered kernel loaded on CUDA "
      "device `device` (cuda/target.h, LaunchForm::steps): which forms its launches took.");
  m.def(
      "_cuda_uses_simdgroup_matrices",
      [](int64_t handle) {
        return coreai_torch::cuda::uses_simdgroup_matrices(
            coreai_torch::kernel_record(handle)->source);
      },
      pybind11::arg("handle"),
      "Whether the CUDA backend compiles a registered kernel in two forms, for launches with "
      "and without partial SIMD-groups (its source uses SIMD-group matrices).");
  m.def(
      "_last_debug_findings",
      [] {
        pybind11::list out;
        for (const coreai_torch::cpu::DebugFinding& f : coreai_torch::cpu::last_debug_findings()) {
          pybind11::dict d;
          d["kind"] = f.kind;
          d["memory"] = f.memory;
          d["index"] = f.index;
          d["threads"] = f.threads;
          d["lines"] = f.lines;
          d["message"] = f.message;
          d["count"] = f.count;
          out.append(d);
        }
        return out;
      },
      "What the last CPU debug launch on this thread found, one dict per problem (kind, "
      "memory, index, threads, lines, message, count); empty if it found nothing.");
  coreai_torch::cpu::set_interrupt_hook(&raise_keyboard_interrupt);
  coreai_torch::add_contract(m);
  coreai_torch::add_kernel_table(m);
  coreai_torch::add_kernel_op(m);
  coreai_torch::add_kernel_call(m);
}

