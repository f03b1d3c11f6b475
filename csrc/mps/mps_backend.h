// The pieces of the MPS backend that its translation units share. Objective-C++
// only: the declarations below use Metal protocol types.
#pragma once

#ifndef __OBJC__
#error "csrc/mps/mps_backend.h declares Objective-C types; include it from .mm files only"
#endif

#import <Metal/Metal.h>

#include <cstdint>
#include <string>

#include "coreai_torch.h"

namespace coreai_torch::mps {

// Empty when this process can run Metal 4 kernels on the MPS device; otherwise
// a sentence saying what is missing. Computed once.
const std::string& metal4_unavailable_reason();

// The major OS version macOS reports to this process: 16 on macOS 26 for a
// program built against an SDK older than macOS 26 (launch_rules.h).
int64_t reported_os_major();

// The MPS artifact of a record (its slot in KernelRecord::artifacts): the
// compute pipeline of its source. Records with the same source, entry and math
// mode share one; it is released with the last of them.
struct Pipeline {
  id<MTLComputePipelineState> state;
};

// The compute pipeline for `record`. Compiles the record's source on its first
// launch; later launches read the record's slot. Metal's verdict that the
// source does not compile throws a c10::Error whose message starts with
// kCompileErrorMarker, which the slot remembers; other failures are thrown
// unmarked and retried by the next launch (launch_rules.h).
const Pipeline& pipeline_for(const KernelRecord& record);

// How many times this process has handed a kernel source to the Metal
// compiler. Lets tests prove that repeated launches compile nothing.
int64_t compile_count();

// Entries of the process-wide pipeline cache (live pipelines and those
// released since the last compile). Lets tests prove that released kernels'
// entries go.
int64_t cached_pipelines();

}  // namespace coreai_torch::mps
