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

#define COREAI_CPU_ABI_VERSION 7

// Metal's SIMD-group width on Apple GPUs; quad-groups are 4 lanes.
#define COREAI_CPU_SIMD_WIDTH 32
// Largest value a SIMD-group or quad function exchanges (a long4 / ulong4).
#define COREAI_CPU_SIMD_SLOT_BYTES 32
// Room for the result a SIMD-group computes once per exchange (an 8 x 8
// float matrix, or one value per lane).
#define COREAI_CPU_SIMD_COMBINED_BYTES 1024

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

// ---- fiber mode --------------------------------------------------------------
//
// A kernel that synchronises runs one fiber per thread of a threadgroup, all
// on one OS thread. The launcher maps the stacks and fills in a
// coreai_cpu_fibers; the kernel library's coreai_cpu_kernel_run_fibers runs
// the group to its end (fiber_runtime.h): barriers, SIMD-group functions and
// the switches between fibers are the library's own code. The launcher reads
// the state back to name the running thread in a fault and to notice a group
// that could not finish.

// What a thread is doing (coreai_cpu_lane::status).
enum {
  COREAI_CPU_RUNNABLE = 0,
  COREAI_CPU_AT_BARRIER = 1,   // waits at threadgroup_barrier
  COREAI_CPU_AT_SIMD = 2,      // waits at a SIMD-group or quad-group function
  COREAI_CPU_AT_LOCKSTEP = 3,  // waits for its SIMD-group to catch up (lockstep)
  COREAI_CPU_DONE = 4,         // returned
};

// One thread of a group in fiber mode.
typedef struct coreai_cpu_lane {
  void* context;            // saved context while suspended (fiber_switch.h)
  void* stack_top;          // highest address of its stack (below the launcher's colour offset)
  void* stack_bottom;       // lowest usable address of its stack
  void* entry_frame;        // frame of its fiber's entry: where call-site walks stop
  struct coreai_cpu_fibers* fibers;
  coreai_cpu_thread info;
  uint8_t status;           // COREAI_CPU_RUNNABLE, ...
  uint8_t access;           // lockstep: kind of its threadgroup accesses since it last caught up
  uint16_t reserved;
} coreai_cpu_lane;

// One SIMD-group of a group in fiber mode. A lane that reaches a SIMD-group
// function publishes its value in `in` and waits; once no lane of the
// SIMD-group can run, the waiting lanes of one call site are released
// together, their values copied to `view` (the exchange's participants in
// view_active), and the first of them to read computes the combined result
// into `combined` once for all.
typedef struct coreai_cpu_simdgroup {
  uint32_t runnable;      // lanes that can run
  uint32_t waiting;       // lanes waiting at a SIMD-group function (bit L: lane L)
  uint32_t lockstep;      // lanes waiting at a lockstep point
  uint32_t view_active;   // lanes of the exchange released last
  uint32_t combined_ready;
  uint32_t reserved;
  uint64_t site[COREAI_CPU_SIMD_WIDTH];   // call site of each waiting lane
  uint64_t order[COREAI_CPU_SIMD_WIDTH];  // source position of that call
  unsigned char in[COREAI_CPU_SIMD_WIDTH][COREAI_CPU_SIMD_SLOT_BYTES];
  unsigned char view[COREAI_CPU_SIMD_WIDTH][COREAI_CPU_SIMD_SLOT_BYTES];
  unsigned char combined[COREAI_CPU_SIMD_COMBINED_BYTES] __attribute__((aligned(64)));
} coreai_cpu_simdgroup;

// One threadgroup in fiber mode.
typedef struct coreai_cpu_fibers {
  coreai_cpu_lane* lanes;         // thread_count, in thread_index_in_threadgroup order
  coreai_cpu_simdgroup* simds;    // ceil(thread_count / 32)
  void* const* args;              // the kernel's arguments
  const coreai_cpu_group* group;
  void* main_context;             // the launcher's context while the fibers run
  uint32_t thread_count;
  uint32_t running;               // threads that have not returned
  uint32_t at_barrier;            // threads waiting at threadgroup_barrier
  uint32_t current;               // index of the running thread
  uint32_t stuck;                 // set when no thread could run but some had not returned
  uint32_t reserved;
} coreai_cpu_fibers;

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

// Debug mode: the SIMD-group matrix operation a SIMD-group reached
// (debug_simdgroup_matrix's `op`).
#define COREAI_CPU_MATRIX_LOAD 0u
#define COREAI_CPU_MATRIX_STORE 1u
#define COREAI_CPU_MATRIX_MULTIPLY 2u

// Services the launcher provides to kernel code; handed to the kernel library
// once, right after it is loaded.
typedef struct coreai_cpu_runtime {
  uint32_t abi_version;
  // Kernel code called a barrier, SIMD-group or quad-group function (named by
  // `what`) outside fiber mode: the source scan missed it (a name assembled by
  // a macro). The launch fails with a message that says so.
  void (*report_loop_mode_call)(const char* what);
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
  // Debug mode: the lanes `active` of the running thread's SIMD-group reached
  // the SIMD-group matrix operation `op` (COREAI_CPU_MATRIX_*) together; one
  // of them reports it. Metal wants every lane of the SIMD-group there; where
  // it is called from names the call in the kernel.
  void (*debug_simdgroup_matrix)(uint32_t op, uint32_t active);
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
// Runs every thread of one threadgroup on the fibers the launcher prepared
// (fiber mode); returns when all have returned or none can run.
typedef void (*coreai_cpu_kernel_run_fibers_fn)(coreai_cpu_fibers* fibers);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // COREAI_MSL_CPU_ABI_H
