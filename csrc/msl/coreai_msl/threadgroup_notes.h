// Notes on a kernel's threadgroup variables, for the CPU backend.
//
// The address-space pass (csrc/cpu/address_spaces.cpp) follows every
// threadgroup variable declared in a function body with
//
//   COREAI_THREADGROUP_NOTE(storage, name);
//
// which records, once per instantiation and when the kernel library is
// loaded, the variable's name, source line and size. The launcher adds them up
// and refuses a kernel whose threadgroup memory exceeds Metal's 32 KiB
// (csrc/cpu/metal_fidelity.h). In debug mode the note also tells the
// launcher, each time a thread passes the declaration, where the variable lies
// for that thread, so that accesses to it are checked (csrc/cpu/access_checker.h).
#ifndef COREAI_MSL_THREADGROUP_NOTES_H
#define COREAI_MSL_THREADGROUP_NOTES_H

#include <cstddef>
#include <cstdint>

#include "cpu_abi.h"
#include "runtime.h"

namespace coreai {

// More distinct threadgroup variables than any kernel declares; further ones
// are not noted (and the limit is checked on the ones that are).
inline constexpr std::uint32_t kMaxThreadgroupNotes = 512;

struct threadgroup_note_table {
  coreai_cpu_threadgroup_note notes[kMaxThreadgroupNotes];
  std::uint32_t count;
};

// Constant-initialised: ready before any note's initialiser runs.
inline threadgroup_note_table& threadgroup_note_list() {
  static threadgroup_note_table table{};
  return table;
}

inline bool note_threadgroup(const char* name, const char* file, std::uint32_t line,
                             std::uint64_t bytes) {
  threadgroup_note_table& table = threadgroup_note_list();
  if (table.count < kMaxThreadgroupNotes) table.notes[table.count++] = {name, file, line, bytes};
  return true;
}

// A string literal as a template argument.
template <std::size_t N>
struct note_text {
  char text[N];
  constexpr note_text(const char (&s)[N]) {  // NOLINT: implicit, from a literal
    for (std::size_t i = 0; i < N; ++i) text[i] = s[i];
  }
};

// One per variable and instantiation: its initialiser runs when the library
// is loaded, because the note's statement names it.
template <note_text Name, note_text File, std::uint32_t Line, std::uint64_t Bytes>
struct threadgroup_note {
  static inline const bool noted = note_threadgroup(Name.text, File.text, Line, Bytes);
};

}  // namespace coreai

#if defined(__NVPTX__)
// The GPU declares shared memory statically and records nothing at load time:
// Metal's 32 KiB limit is checked by the CPU backend (ptxas refuses more
// than the GPU holds).
#define COREAI_THREADGROUP_NOTE(storage, name) ((void)0)
#elif defined(COREAI_MSL_DEBUG)
#define COREAI_THREADGROUP_NOTE(storage, name)                                              \
  ((void)::coreai::threadgroup_note<#name, __FILE__, __LINE__, sizeof(storage)>::noted,    \
   ::coreai::debug_threadgroup_storage(storage, #name, __FILE__, __LINE__))
#else
#define COREAI_THREADGROUP_NOTE(storage, name) \
  ((void)::coreai::threadgroup_note<#name, __FILE__, __LINE__, sizeof(storage)>::noted)
#endif

#endif  // COREAI_MSL_THREADGROUP_NOTES_H
