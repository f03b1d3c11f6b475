// What the group-loop form (group_form.h) needs to know about a kernel body:
// what each name refers to (with C++'s scopes), which values are the same for
// every thread of a threadgroup or of a SIMD-group (uniformity), where the
// barriers and SIMD-group operations are, and whether fiber mode's lockstep
// could make a lane wait between two of them.
//
// Uniformity is the classic divergence analysis of GPU compilers (pocl's
// VariableUniformityAnalysis, LLVM's DivergenceAnalysis that CuPBoP uses),
// done on the statement tree: a variable is uniform if every value it is
// given is computed from uniform values under uniform control flow. It starts
// from what Metal says is uniform (threadgroup_position_in_grid, the
// arguments, constants) and falls back to varying wherever it cannot tell.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cpu/kernel_statements.h"

namespace coreai_torch::cpu::group_form {

// Ordered: min() of two is what an expression of both is.
enum class Uniformity : uint8_t {
  Varying = 0,  // may differ between the threads of a SIMD-group
  Simd = 1,     // the same for the threads of a SIMD-group
  Group = 2,    // the same for every thread of the threadgroup
};

inline Uniformity meet(Uniformity a, Uniformity b) { return a < b ? a : b; }

// The synchronisation (or SIMD-group object) a token names.
enum class Sync : uint8_t {
  None,
  Barrier,      // threadgroup_barrier(...)
  SimdBarrier,  // simdgroup_barrier(...)
  SimdValue,    // simd_*(...) and quad_*(...): values exchanged between lanes
  MatrixCall,   // simdgroup_load/store/multiply/multiply_accumulate, make_filled_simdgroup_matrix
  MatrixType,   // simdgroup_float8x8 ..., simdgroup_matrix
  Unsupported,  // cooperative execution scopes (MetalPerformancePrimitives) and the like
};

// A modification of a variable besides its declaration.
struct Site {
  size_t token = 0;                 // the variable's name
  TokenRange value{};               // the value assigned (empty for ++ and --)
  bool compound = false;            // +=, ++ ...: the old value takes part
  std::vector<TokenRange> guards;   // conditions under which it runs
  const Statement* statement = nullptr;  // the statement it is in
  bool standalone = false;          // that statement is this assignment and nothing else
  bool in_header = false;           // in the init or step of a for statement (`statement`)
};

struct Variable {
  std::string name;
  size_t token = 0;                     // its name in the declarator
  const Statement* statement = nullptr;  // declaring statement (a Simple, or a For's init)
  Declaration declaration;
  size_t declarator = 0;
  bool for_header = false;
  bool view = false;         // a tensor view of the rendering's preamble
  bool threadgroup = false;  // threadgroup storage
  bool matrix = false;       // a simdgroup matrix (an object of the whole SIMD-group)
  bool array = false;        // a local array: indexing it reads private memory
  std::vector<TokenRange> guards;  // conditions its declaration runs under
  Uniformity level = Uniformity::Group;
  bool escapes = false;      // its address is taken or it is handed to unknown code
  size_t last_use = 0;       // last token that names it
  std::vector<Site> sites;
};

// What a token refers to.
struct Name {
  enum class Kind : uint8_t { None, Variable, Attribute, Buffer } kind = Kind::None;
  int index = -1;  // into variables, or into the kernel's parameters
};

// What Metal says about a thread attribute.
Uniformity attribute_uniformity(std::string_view attribute);

class Analysis {
 public:
  // `lockstep`: refuse a kernel whose lanes fiber mode could make wait for
  // their SIMD-group between two synchronisations (check_lockstep), which
  // a form running a SIMD-group's lanes one after another cannot do. A form
  // that runs them together (the CUDA steps form: a SIMD-group is a warp)
  // passes false.
  Analysis(std::string_view source, const std::vector<Token>& tokens,
           const KernelFunction& kernel, bool lockstep = true);

  // Empty if the body can be followed; else why not (the first reason found).
  const std::string& failure() const { return failure_; }

  std::string_view source;
  const std::vector<Token>& tokens;
  const KernelFunction& kernel;
  std::vector<Statement> preamble;  // the rendering's tensor views
  std::vector<Statement> body;      // the user's statements
  std::vector<Variable> variables;
  std::vector<Name> names;          // per token
  std::vector<Sync> syncs;          // per token
  std::vector<int8_t> threadgroup_access;  // per token: -1, or ThreadgroupAccess::Kind

  // The least uniform value or condition of tokens `r` (and whether they are
  // pure: no assignment, no call that may have effects, no memory read).
  Uniformity uniformity(TokenRange r) const;
  bool pure(TokenRange r) const;

  // Whether tokens [first, last) hold a sync of `kind` (or, for Any, any).
  bool has_sync(size_t first, size_t last, bool barrier) const;
  bool has_barrier(const Statement& s) const { return has_sync(s.first, s.last, true); }
  bool has_simd(const Statement& s) const { return has_sync(s.first, s.last, false); }

  // Where the token is in the user's text, as `src:LINE`.
  std::string where(size_t token) const;

  // Whether the declaration at variable `v` runs once per threadgroup or
  // SIMD-group can stand for every thread's: it is a constant expression, or
  // its value is pure, at least `needed` uniform, and every later change is a
  // standalone assignment of the same kind (or a for header's).
  bool single_copy(int v, Uniformity needed) const { return single_[v] >= needed; }

  // Whether the body has a return: threads may leave before the others.
  bool can_return = false;

  // Where a statement runs in the group-loop form: once per threadgroup or
  // thread (Group: directly in a list that holds barriers, or in a region of
  // one without SIMD-group operations), once per SIMD-group or lane (Simd:
  // directly in a list of a region with SIMD-group operations), or inside
  // another statement (Lane: as part of one thread's code).
  enum class Placement : uint8_t { Lane, Group, Simd };
  Placement placement(const Statement& s) const;

  // A group-level list cut at its barriers: each statement with a barrier
  // stands alone (structural), the others form regions, which need
  // SIMD-group structure (simd) if one of them has a SIMD-group operation.
  struct Item {
    size_t begin = 0, end = 0;  // statements [begin, end) of the list
    bool structural = false;
    bool simd = false;
  };
  std::vector<Item> group_items(const Statement* list, size_t count) const;

 private:
  void fail(size_t token, const std::string& why);
  void check_helpers();
  void mark_syncs();
  void resolve();
  void compute_levels();
  void compute_placements();
  void compute_single_copies();
  void check_lockstep();

  std::vector<std::string> pure_helpers_;
  std::unordered_map<std::string, bool> macros_;  // name -> expands to a constant
  std::unordered_map<const Statement*, Placement> placements_;
  std::vector<Uniformity> single_;
  std::string failure_;
};

}  // namespace coreai_torch::cpu::group_form
