// Metal fidelity: what the Metal compiler refuses and clang, compiling the same
// source as C++, would accept. A kernel that runs on the CPU (or CUDA) backend
// must also compile on an Apple GPU, so these constructs are refused before
// the kernel is compiled, each with the line it is on and the section of the
// Metal Shading Language specification (MSL, version 3.2 numbering) that rules
// it out. docs/cpu.md ("Refused, at compile time") lists them.
//
// Found here, in the user's own text (the `src` and `helper_src` regions the
// buffer rendering marks with #line directives): `double`, new and delete
// expressions, alloca, virtual functions, exceptions (throw, try, catch), goto,
// inline assembly, dynamic_cast and typeid, thread_local, the C++ standard library
// (std::, `using namespace std`, #include of a header that is not Metal's), a
// C library function called through `::`, a pointer to a built-in or struct
// type declared without an address space, and threadgroup variables at
// program scope.
//
// Found elsewhere, because they need the compiler: C library functions called
// unqualified (deleted declarations, coreai_msl/unavailable.h), recursion (the
// inliner's remarks, recursion_in_remarks below), variable-length arrays
// (-Werror=vla) and threadgroup memory beyond 32 KiB (the kernel library's
// threadgroup notes, threadgroup_memory_overuse below).
//
// Both the CPU and the CUDA backend compile the buffer rendering through
// metal_to_cpp (source_scan.h); each calls refuse_non_metal() on the rendering
// before it compiles it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace coreai_torch::cpu {

// A place in the user's text, as the compiler would name it (`src`, 1-based).
struct SourcePosition {
  std::string file;
  int line = 0;
  int column = 0;
};

struct NonMetalConstruct {
  SourcePosition where;
  std::string message;  // names the construct and the MSL section
};

// Every construct of the list above in the user's regions of `rendering`.
std::vector<NonMetalConstruct> find_non_metal_constructs(std::string_view rendering);

// Recursive functions, from the remarks clang prints with
// -Rpass-missed=inline (fidelity_compile_flags): the position of each
// and its name. Only functions in the user's text count.
std::vector<NonMetalConstruct> recursion_in_remarks(const std::string& compiler_output);

// A threadgroup variable of a compiled kernel, as its library notes it
// (coreai_msl/threadgroup_notes.h): one per variable and template instantiation.
struct ThreadgroupVariable {
  std::string name;
  SourcePosition where;  // column 0: the notes keep the line only
  uint64_t bytes = 0;
};

// The refusal of a kernel whose threadgroup variables take more than Metal's
// kMaxThreadgroupMemoryBytes together (empty if they fit), at the first one.
std::vector<NonMetalConstruct> threadgroup_memory_overuse(
    const std::vector<ThreadgroupVariable>& variables);

// The compiler's output without the remarks fidelity_compile_flags asks for
// (and their notes and source excerpts), as a compile error shows it.
std::string without_remarks(const std::string& compiler_output);

// Flags that make clang report what find_non_metal_constructs cannot see
// (recursion, variable-length arrays), added to every kernel compile while
// fidelity is on.
const std::vector<std::string>& fidelity_compile_flags();

// False when COREAI_TORCH_METAL_FIDELITY is 0 (or false/no/off): kernels that
// only the CPU could run are then accepted, as before this check existed.
bool metal_fidelity_enabled();

// Throws the MetalCompileError (c10::Error with kCompileErrorMarker) that
// names `kernel` and lists `found` as compiler diagnostics (`src:3:5: error:
// ...`). Does nothing when `found` is empty.
void refuse_non_metal(const std::string& kernel, const std::vector<NonMetalConstruct>& found);

// Where each line of a rendering comes from, by its #line directives.
class LineMap {
 public:
  explicit LineMap(std::string_view source);
  SourcePosition at(size_t offset) const;
  // Whether `offset` lies in the user's own text (src or helper_src).
  bool in_user_text(size_t offset) const;

 private:
  struct Line {
    size_t begin;       // offset of the line's first character
    int file;           // index into files_
    int number;         // the line number #line gave it
  };
  std::vector<std::string> files_;
  std::vector<Line> lines_;
  const Line& line_of(size_t offset) const;
};

bool is_user_file(std::string_view file);

}  // namespace coreai_torch::cpu
