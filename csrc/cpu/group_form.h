// How the CPU backend runs a kernel (docs/cpu.md, "Execution"):
//
//   Loop:        no barrier, SIMD-group function or threadgroup memory: each
//                threadgroup is a loop over its threads, with the kernel inlined.
//   GroupLoops:  the kernel synchronises, and the group-loop form below can
//                prove how: each threadgroup is one call of a rewritten kernel
//                whose regions between barriers are loops over the threads, and
//                whose SIMD-group operations work on the 32 lanes' values at once.
//   Fibers:      everything else (and every kernel in debug mode): one fiber per
//                thread, switching at barriers and SIMD-group functions.
//
// The group-loop form is a source-to-source transformation of the buffer
// rendering, done before the passes of source_scan.h (which the CUDA backend
// shares and which this leaves untouched). It follows the work-group-loop
// technique of pocl and of CUDA-on-CPU compilers (COX/CuPBoP's hierarchical
// loops): a region between two barriers becomes a loop over the threads; a
// variable that lives across a region boundary gets one slot per thread;
// values the uniformity analysis proves equal for all threads stay single;
// barriers inside loops and ifs whose conditions are uniform keep their
// control flow around the loops; a thread that returns is marked and skipped;
// a loop over threads whose if every thread takes runs that branch alone.
// Regions holding SIMD-group operations become loops over SIMD-groups of loops
// over their 32 lanes; a SIMD-group function collects the lanes' arguments,
// computes every lane's result once, and hands them out; a simdgroup matrix is
// one 8 x 8 object per SIMD-group, loaded, stored and multiplied whole. What
// the analysis cannot prove (group_form_analysis.h) stays in fiber mode, with
// the reason available (COREAI_TORCH_CPU_FORM_LOG=1 prints it).
#pragma once

#include <string>
#include <string_view>

namespace coreai_torch::cpu {

enum class ExecutionForm { Loop, GroupLoops, Fibers };

// "loop", "group_loops" or "fibers".
const char* execution_form_name(ExecutionForm form);

struct FormChoice {
  ExecutionForm form = ExecutionForm::Loop;
  std::string reason;     // Fibers: why not group loops
  std::string rendering;  // GroupLoops: what to compile instead of the rendering
  std::string summary;    // GroupLoops: what the form did, for the log
};

// The form of a kernel whose buffer rendering is `rendering` (debug: option
// bit 0, which keeps fiber mode and its checks). Group loops are on unless
// COREAI_TORCH_CPU_GROUP_LOOPS=0.
FormChoice choose_execution_form(std::string_view rendering, bool debug);

// The group-loop form for the CUDA backend's steps form (docs/cuda.md,
// "Several Metal threads per CUDA thread"): each region between barriers is
// an unrolled loop of ::coreai_steps steps (a constant of the translation
// unit), step k of CUDA thread c running Metal thread k * blockDim + c, with
// the values that live across barriers one slot per step and uniform values
// single. A SIMD-group is then one warp at one step: its functions stay the
// warp's, as written, and barriers stay barriers. GroupLoops with the
// rendering, whose kernel takes the buffers and the group; else Fibers and
// why the kernel keeps one Metal thread per CUDA thread (what the CPU form
// refuses, a simdgroup matrix, a return, no barrier at all).
FormChoice cuda_steps_form(std::string_view rendering);

// Prints `choice` for kernel `kernel` on stderr when COREAI_TORCH_CPU_FORM_LOG
// is set to a non-empty value other than 0.
void log_execution_form(const std::string& kernel, const FormChoice& choice);

}  // namespace coreai_torch::cpu
