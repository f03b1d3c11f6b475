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
// (std::, `using namespace std`, #include of a header that is not Metal's), an
// #include of a file ("...") or a macro and #embed, a C library function
// called through `::`, a pointer to a built-in or struct type declared without
// an address space, threadgroup variables at program scope, and a #line
// directive naming another file than src or helper_src (which would hide the
// lines after it from these checks). Directives are read as the preprocessor
// reads them: `%:` is `#`, and backslash-continued lines are joined.
//
// Found elsewhere, because they need the compiler: C library functions called
// unqualified (deleted declarations, coreai_msl/unavailable.h), recursion (the
// inliner's remarks, recursion_in_remarks below), variable-length arrays
// (-Werror=vla), threadgroup memory beyond 32 KiB (the kernel library's
// threadgroup notes, threadgroup_memory_overuse below), and the words above
// that refuse wherever they stand when a macro makes them (with_refused_word_guards).
//
// Both the CPU and the CUDA backend compile the buffer rendering through
// metal_to_cpp (source_scan.h); each calls refuse_non_metal() on the rendering
// before it compiles it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace coreai_torch::source {

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

// Whether the user's text in `rendering` can hold a recursive function, which
// only the compiler's remarks find (recursion_in_remarks); `entry` names the
// kernel function, which src is the body of. Recursion needs a function of
// the user's that calls itself, directly or through others: something shaped
// like a function declaration (`T name(`), a class (member functions), an
// operator, a template, a lambda with parameters (one that is passed itself,
// or deduces `this`), or the kernel calling itself by its name. Macro bodies
// count as text. Asking clang for the remarks costs a few milliseconds of
// every compile, so text with none of these is compiled without them.
bool may_recurse(std::string_view rendering, std::string_view entry);

// Flags that make clang report what find_non_metal_constructs cannot see
// (recursion, where `rendering` may_recurse, and variable-length arrays),
// added to every kernel compile while fidelity is on.
std::vector<std::string> fidelity_compile_flags(std::string_view rendering,
                                                std::string_view entry);

// False when COREAI_TORCH_METAL_FIDELITY is 0 (or false/no/off): kernels that
// only the CPU could run are then accepted, as before this check existed.
bool metal_fidelity_enabled();

// What a refusal does, after "so it would not compile on an Apple GPU; ".
inline constexpr std::string_view kRefusedByBackend =
    "the CPU backend refuses it too (set COREAI_TORCH_METAL_FIDELITY=0 to run it anyway)";

// Throws the MetalCompileError (c10::Error with kCompileErrorMarker) that
// names `kernel` and lists `found` as compiler diagnostics (`src:3:5: error:
// ...`). Does nothing when `found` is empty.
void refuse_non_metal(const std::string& kernel, const std::vector<NonMetalConstruct>& found,
                      std::string_view consequence = kRefusedByBackend);

// The macro fidelity_compile_flags defines.
inline constexpr std::string_view kFidelityMacro = "COREAI_METAL_FIDELITY";

// `rendering` (a buffer rendering) with, before the user's text, a macro for
// each word the scan refuses wherever it stands (double, goto, asm, ...) that
// makes a compile error naming it, and after it their #undef, all under
// kFidelityMacro. The scan sees the words the user wrote; these catch the
// ones a macro makes (token pasting `a ## sm`, `#define REAL double`), as
// Metal sees them after preprocessing. A source that is not a buffer
// rendering (no `#line 1 "helper_src"`) is returned as it is.
std::string with_refused_word_guards(std::string_view rendering);

// Where each line of a rendering comes from, by its #line directives.
class LineMap {
 public:
  explicit LineMap(std::string_view source);
  SourcePosition at(size_t offset) const;
  // Whether `offset` lies in the user's own text (src or helper_src).
  bool in_user_text(size_t offset) const;
  // Offsets of the #line directives that name a file other than src or helper_src.
  const std::vector<size_t>& foreign_directives() const { return foreign_; }

 private:
  struct Line {
    size_t begin;       // offset of the line's first character
    int file;           // index into files_
    int number;         // the line number #line gave it
  };
  std::vector<std::string> files_;
  std::vector<Line> lines_;
  std::vector<size_t> foreign_;
  const Line& line_of(size_t offset) const;
};

bool is_user_file(std::string_view file);

}  // namespace coreai_torch::source
