// The binary interface between coreai_torch's CPU launcher (compiled into _C)
// and one JIT-compiled kernel library. Plain C so that the two sides may be
// built by different compilers and language standards: _C by the compiler that
// built torch, the kernel by clang++ -std=c++23.
//
// Bump COREAI_CPU_ABI_VERSION whenever a struct or a signature here changes;
// the launcher refuses a kernel library built against another version, and the
// version is part of the disk cache key.
#ifndef COREAI_MSL_CPU_ABI_H
#define COREAI_MSL_CPU_ABI_H

#include <stdint.h>

#define COREAI_CPU_ABI_VERSION 5

// Metal's SIMD-group width on Apple GPUs; quad-groups are 4 lanes.
#define COREAI_CPU_SIMD_WIDTH 32
// Largest value a SIMD-group or quad function exchanges (a long4 / ulong4).
#define COREAI_CPU_SIMD_SLOT_BYTES 32

#ifdef __cplusplus
extern "C" {
#endif

// What is uniform over one threadgroup. Every field is in Metal order (x first).
typedef struct coreai_cpu_group {
  uint32_t position[3];         // threadgroup_position_in_grid
  uint32_t size[3];             // threads_per_threadgroup: smaller at the grid edge
  uint32_t dispatch_size[3];    // dispatch_threads_per_threadgroup: as requested
  uint32_t grid[3];             // threads_per_grid
  uint32_t groups_per_grid[3];  // threadgroups_per_grid
  uint32_t thread_count;        // size[0] * size[1] * size[2]
  uint32_t meta_count;          // int32 entries in the metadata buffer (the last argument)
} coreai_cpu_group;

// One thread of a threadgroup.
typedef struct coreai_cpu_thread {
  uint32_t position[3];  // thread_position_in_threadgroup
  uint32_t index;        // thread_index_in_threadgroup (x fastest, over the actual size)
} coreai_cpu_thread;

// The values of one SIMD-group exchange, as seen by one lane after the
// rendezvous: lane L's value is at slots + L * COREAI_CPU_SIMD_SLOT_BYTES and is
// meaningful only when bit L of active_mask is set (lanes that exited or that
// lie past the end of a partial SIMD-group are clear).
typedef struct coreai_cpu_simd_view {
  const unsigned char* slots;
  uint32_t active_mask;
  uint32_t lane;
} coreai_cpu_simd_view;

// One threadgroup variable of a kernel library, as its source declares it
// (threadgroup_notes.h): noted when the library is loaded, for the check of
// Metal's threadgroup memory limit.
typedef struct coreai_cpu_threadgroup_note {
  const char* name;  // as the kernel's source spells it
  const char* file;  // "src" or "helper_src" (the rendering's #line names)
  uint32_t line;
  uint64_t bytes;
} coreai_cpu_threadgroup_note;

// Debug mode: a threadgroup variable where the running thread sees it.
typedef struct coreai_cpu_threadgroup_storage {
  const void* address;
  uint64_t bytes;
  uint32_t element_bytes;  // of the innermost element of an array
  uint32_t rank;           // array dimensions named in `extents` (0: a scalar, or deeper)
  uint32_t extents[4];
  const char* name;
  const char* file;
  uint32_t line;
} coreai_cpu_threadgroup_storage;

// Debug mode: what a kernel's memory access was (debug_access's `flags`).
#define COREAI_CPU_ACCESS_WRITE 1u
#define COREAI_CPU_ACCESS_ATOMIC 2u

// Debug mode: the synchronisation a thread reaches or leaves (debug_sync's `kind`).
#define COREAI_CPU_SYNC_THREADGROUP_BARRIER 0u
#define COREAI_CPU_SYNC_SIMDGROUP_BARRIER 1u
#define COREAI_CPU_SYNC_SIMD_FUNCTION 2u

// Services the launcher provides to kernel code; handed to the kernel library
// once, right after it is loaded.
typedef struct coreai_cpu_runtime {
  uint32_t abi_version;
  // Waits until every thread of the threadgroup that is still running arrives.
  void (*threadgroup_barrier)(void);
  // Waits until every still-running lane of the caller's SIMD-group arrives.
  void (*simdgroup_barrier)(void);
  // Publishes `size` bytes from `value` as the caller's lane value, waits for
  // the SIMD-group's running lanes, and returns everyone's values.
  coreai_cpu_simd_view (*simd_exchange)(const void* value, uint32_t size);
  // Debug mode: a tensor view at `base` was indexed outside its extents
  // (index and extents in Metal order, `rank` entries each) by the thread at
  // `thread_position` (thread_position_in_grid, 3 entries; in fiber mode the
  // launcher knows the running thread better and ignores it).
  void (*report_out_of_bounds)(const void* base, uint32_t rank, const int64_t* index,
                               const int32_t* extents, const uint32_t* thread_position);
  // Debug mode: an integer division or remainder at file:line:column of the
  // kernel's source divides by zero (`overflow` 0) or is INT_MIN / -1 of its
  // type (`overflow` 1). `type` names the type; the operands are its bits,
  // sign-extended when `is_signed`. `thread_position` as above.
  void (*report_division)(uint32_t overflow, const char* file, uint32_t line, uint32_t column,
                          const char* type, uint64_t lhs, uint64_t rhs, uint32_t is_signed,
                          const uint32_t* thread_position);
  // Debug mode (docs/cpu.md, "Checking kernels"): the running thread read or
  // wrote `size` bytes at `address` (flags: COREAI_CPU_ACCESS_*), at `pc` in
  // the kernel library. The compiler's instrumentation calls it for every
  // access to memory that is not a private local (debug_accesses.h).
  void (*debug_access)(const void* address, uint32_t size, uint32_t flags, const void* pc);
  // Debug mode: the running thread reaches (`leaving` 0) or leaves (1) the
  // synchronisation `kind` (COREAI_CPU_SYNC_*); where it is called from names
  // the call in the kernel.
  void (*debug_sync)(uint32_t kind, uint32_t leaving);
  // Debug mode: where a threadgroup variable is for the running thread, each
  // time the thread passes its declaration.
  void (*debug_threadgroup_storage)(const coreai_cpu_threadgroup_storage* storage);
} coreai_cpu_runtime;

// Symbols every kernel library exports (see the entry shim written by the JIT).
typedef uint32_t (*coreai_cpu_kernel_abi_fn)(void);
typedef void (*coreai_cpu_kernel_init_fn)(const coreai_cpu_runtime* runtime);
// The threadgroup variables the library declares: sets *notes to an array of
// them and returns how many there are.
typedef uint32_t (*coreai_cpu_kernel_threadgroup_notes_fn)(
    const coreai_cpu_threadgroup_note** notes);
// Runs every thread of one threadgroup in turn (loop mode).
typedef void (*coreai_cpu_kernel_run_group_fn)(void* const* args, const coreai_cpu_group* group);
// Runs one thread (fiber mode: called on the thread's own fiber).
typedef void (*coreai_cpu_kernel_run_thread_fn)(void* const* args, const coreai_cpu_group* group,
                                                const coreai_cpu_thread* thread);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // COREAI_MSL_CPU_ABI_H
