#include "cpu/group_form.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cpu/group_form_analysis.h"
#include "cpu/kernel_statements.h"
#include "source/source_scan.h"

namespace coreai_torch::cpu {
namespace {

using group_form::Analysis;
using group_form::Name;
using group_form::Site;
using group_form::Sync;
using group_form::Uniformity;
using group_form::Variable;
using Placement = Analysis::Placement;

// How a variable declared in a list of the form is kept.
enum class Storage {
  Local,       // stays where it is declared: used only in its own loop over threads
  Single,      // declared once, outside the loops over threads (a uniform value)
  Threads,     // one slot per thread of the threadgroup: coreai_lanes_<name>[thread]
  Lanes,       // one slot per lane, inside a SIMD-group: coreai_lslots_<name>[lane]
  SgSlots,     // a simdgroup matrix kept across regions: coreai_sgslots_<name>[simdgroup]
  SimdObject,  // a simdgroup matrix declared once per SIMD-group
};

// Reductions the form computes straight from the lanes' values.
const char* reduction_op(std::string_view name, int& width) {
  static const std::pair<std::string_view, const char*> kOps[] = {
      {"sum", "sum_op"},         {"product", "product_op"}, {"min", "min_op"},
      {"max", "max_op"},         {"and", "and_op"},         {"or", "or_op"},
      {"xor", "xor_op"}};
  for (const auto& [suffix, op] : kOps) {
    if (name.size() == 5 + suffix.size() && name.ends_with(suffix)) {
      if (name.starts_with("simd_")) {
        width = 32;
        return op;
      }
      if (name.starts_with("quad_")) {
        width = 4;
        return op;
      }
    }
  }
  return nullptr;
}

bool env_flag(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  return std::string_view(v) != "0";
}

// Which backend the form is written for. Cuda: the steps form of the CUDA
// backend (group_form.h, cuda_steps_form): the same regions and slots, but
// each CUDA thread runs ::coreai_steps Metal threads of a region in turn,
// SIMD-group functions stay the warp's, and barriers stay barriers.
enum class Backend { Cpu, Cuda };

class Emitter {
 public:
  Emitter(const Analysis& a, Backend backend)
      : a_(a), s_(a.source), t_(a.tokens), kf_(a.kernel), cuda_(backend == Backend::Cuda),
        storage_(a.variables.size(), Storage::Local) {
    find_line_directives();
  }

  bool emit(std::string& rendering, std::string& summary);
  const std::string& failure() const { return failure_; }

 private:
  bool emit_cuda(std::string& rendering, std::string& summary);

  // The rendering with the kernel function rewritten to run `body`: `head`
  // (the declaration up to its parameter list), the buffers, then the group
  // instead of the attributes; the rendering's preamble, `setup`, and the
  // attributes the same for the whole group, read at thread `first`.
  std::string taking_the_group(const std::string& head, const std::string& setup,
                               const std::string& first, const std::string& body) const {
    std::string f(s_.substr(0, t_[kf_.start].begin));
    f += line_marker(t_[kf_.start].begin) + head;
    for (const KernelParameter& p : kf_.params) {
      if (!p.attribute.empty()) continue;
      f += std::string(s_.substr(t_[p.first].begin, t_[p.last - 1].end - t_[p.first].begin)) +
           ", ";
    }
    f += "const ::coreai_cpu_group& coreai_g) {";
    f += line_marker(t_[kf_.body_open].end);
    f += std::string(
        s_.substr(t_[kf_.body_open].end, t_[kf_.user_first].begin - t_[kf_.body_open].end));
    f += setup;
    for (const KernelParameter& p : kf_.params) {
      if (!p.attribute.empty() &&
          group_form::attribute_uniformity(p.attribute) == Uniformity::Group) {
        f += " const " + p.type + " " + p.name + " = ::coreai::attr_" + p.attribute +
             "(coreai_g, " + first + ");";
      }
    }
    f += "\n{" + body + "\n}\n}\n";
    f += std::string(s_.substr(t_[kf_.body_close].end));
    return f;
  }

 private:
  // ---- text ----------------------------------------------------------------

  struct Edit {
    size_t last;  // token just past the replaced range
    std::string text;
  };

  void find_line_directives() {
    size_t pos = 0;
    while ((pos = s_.find("#line ", pos)) != std::string_view::npos) {
      if (pos == 0 || s_[pos - 1] == '\n') {
        size_t k = pos + 6;
        int line = 0;
        while (k < s_.size() && s_[k] >= '0' && s_[k] <= '9') line = line * 10 + (s_[k++] - '0');
        const size_t quote = s_.find('"', k);
        const size_t close = s_.find('"', quote + 1);
        const size_t eol = s_.find('\n', pos);
        if (quote != std::string_view::npos && close != std::string_view::npos &&
            eol != std::string_view::npos) {
          directives_.push_back(
              {eol + 1, line, std::string(s_.substr(quote + 1, close - quote - 1))});
        }
      }
      pos += 6;
    }
  }

  // `#line N "file"` naming position pos of the rendering.
  std::string line_marker(size_t pos) const {
    const Directive* d = nullptr;
    for (const Directive& c : directives_) {
      if (c.start <= pos) d = &c;
    }
    if (d == nullptr) return "\n";
    const long line = d->line + std::count(s_.begin() + static_cast<long>(d->start),
                                           s_.begin() + static_cast<long>(pos), '\n');
    return "\n#line " + std::to_string(line) + " \"" + d->file + "\"\n";
  }

  // A jump the rewrite adds. With Metal fidelity on, `goto` is a macro that
  // fails the compile (a refused word made by the user's macros,
  // metal_fidelity.h); the rewrite's own jumps are spelled with it undefined,
  // and the text after them resumes at the source line of `resume`.
  std::string generated_goto(const std::string& label, size_t resume) const {
    return "\n#pragma push_macro(\"goto\")\n#undef goto\ngoto " + label +
           ";\n#pragma pop_macro(\"goto\")" + line_marker(resume);
  }

  // Where copying a statement starts: its first token, or the `#pragma`
  // lines right before it (an unroll request belongs to the loop after it).
  size_t statement_start(size_t first) const {
    size_t start = t_[first].begin;
    size_t line = s_.rfind('\n', start == 0 ? 0 : start - 1);
    if (line == std::string_view::npos) return start;
    if (s_.substr(line + 1, start - line - 1).find_first_not_of(" \t") != std::string_view::npos) {
      return start;
    }
    size_t begin = line + 1;
    while (begin > 1) {
      const size_t prev = s_.rfind('\n', begin - 2);
      const size_t from = prev == std::string_view::npos ? 0 : prev + 1;
      const std::string_view l = s_.substr(from, begin - 1 - from);
      const size_t c = l.find_first_not_of(" \t");
      if (c == std::string_view::npos || !l.substr(c).starts_with("#pragma")) break;
      begin = from;
    }
    return begin;
  }

  // The text of tokens [first, last) with the edits applied, starting at
  // character `from` (at or before the first token), newlines kept.
  std::string copy(size_t first, size_t last, size_t from = std::string_view::npos) const {
    std::string out;
    if (first >= last) return out;
    size_t pos = from == std::string_view::npos ? t_[first].begin : from;
    size_t k = first;
    while (k < last) {
      out.append(s_.substr(pos, t_[k].begin - pos));
      const auto edit = edits_.find(k);
      if (edit != edits_.end() && edit->second.last <= last) {
        const size_t end = edit->second.last;
        out += edit->second.text;
        const std::string_view replaced = s_.substr(t_[k].begin, t_[end - 1].end - t_[k].begin);
        for (long n = std::count(edit->second.text.begin(), edit->second.text.end(), '\n');
             n < std::count(replaced.begin(), replaced.end(), '\n'); ++n) {
          out += '\n';
        }
        pos = t_[end - 1].end;
        k = end;
        continue;
      }
      out.append(text(s_, t_[k]));
      pos = t_[k].end;
      ++k;
    }
    return out;
  }

  // The same, preceded by the #line directive of its first character.
  std::string placed(size_t first, size_t last, bool pragmas = false) const {
    const size_t from = pragmas ? statement_start(first) : t_[first].begin;
    return line_marker(from) + copy(first, last, from);
  }

  std::string token_text(TokenRange r) const {
    return r.first < r.second ? std::string(s_.substr(t_[r.first].begin,
                                                      t_[r.second - 1].end - t_[r.first].begin))
                              : std::string();
  }

  bool fail(size_t token, const std::string& why) {
    if (failure_.empty()) failure_ = a_.where(token) + ": " + why;
    return false;
  }

  // ---- names -----------------------------------------------------------------

  const Variable& var(int v) const { return a_.variables[static_cast<size_t>(v)]; }

  std::string slot_name(int v) const {
    const std::string& n = var(v).name;
    switch (storage_[static_cast<size_t>(v)]) {
      case Storage::Threads:
        return "coreai_lanes_" + n;
      case Storage::Lanes:
        return "coreai_lslots_" + n;
      case Storage::SgSlots:
        return "coreai_sgslots_" + n;
      default:
        return n;
    }
  }

  // A stored variable's slot for the running thread (in a loop over threads).
  std::string slot_of_thread(int v) const {
    switch (storage_[static_cast<size_t>(v)]) {
      case Storage::Threads:
        return slot_name(v) + (cuda_ ? "[coreai_k]" : "[coreai_t]");
      case Storage::Lanes:
        return slot_name(v) + "[coreai_lane]";
      case Storage::SgSlots:
        return slot_name(v) + "[coreai_sg]";
      default:
        return var(v).name;
    }
  }

  // A stored variable's slot read once for the SIMD-group (or threadgroup):
  // its value is uniform there, so any running lane's copy is it.
  std::string slot_of_first(int v) const {
    switch (storage_[static_cast<size_t>(v)]) {
      case Storage::Threads:
        // CUDA: no thread returns (cuda_steps_form), so step 0 runs.
        if (cuda_) return slot_name(v) + "[0]";
        return in_simd_ ? slot_name(v) + "[coreai_f.first(coreai_sg)]"
                        : slot_name(v) + "[coreai_f.first()]";
      case Storage::Lanes:
        return slot_name(v) + "[coreai_f.first(coreai_sg) - coreai_sg * 32]";
      case Storage::SgSlots:
        return slot_name(v) + "[coreai_sg]";
      default:
        return var(v).name;
    }
  }

  // A single variable of a SIMD region's own list that is the same for the
  // whole threadgroup and never changes: declared before the loop over SIMD-groups.
  bool hoists_to_group(int v) const {
    return var(v).threadgroup ||
           (a_.single_copy(v, Uniformity::Group) && var(v).sites.empty() && !var(v).for_header);
  }

  bool group_uniform(int param) const {
    return group_form::attribute_uniformity(kf_.params[static_cast<size_t>(param)].attribute) ==
           Uniformity::Group;
  }

  bool stored(int v) const {
    const Storage st = storage_[static_cast<size_t>(v)];
    return st == Storage::Threads || st == Storage::Lanes || st == Storage::SgSlots;
  }

  // Edits that make tokens [first, last) read stored variables' uniform
  // values outside the loops over threads (a condition, a SIMD-group
  // statement), and leave attributes that vary to the loops' declarations.
  void edit_uniform_reads(size_t first, size_t last) {
    for (size_t k = first; k < last; ++k) {
      if (a_.names[k].kind != Name::Kind::Variable) continue;
      const int v = a_.names[k].index;
      if (var(v).token == k || !stored(v) ||
          storage_[static_cast<size_t>(v)] == Storage::SgSlots) {
        continue;
      }
      edits_[k] = {k + 1, "(" + slot_of_first(v) + ")"};
    }
  }

  // The text of tokens r inside decltype() outside the loops over threads:
  // stored variables read slot 0, attributes that vary become values of their type.
  std::string typing_text(TokenRange r) const {
    std::string out;
    size_t pos = t_[r.first].begin;
    for (size_t k = r.first; k < r.second; ++k) {
      out.append(s_.substr(pos, t_[k].begin - pos));
      pos = t_[k].end;
      const Name& n = a_.names[k];
      if (n.kind == Name::Kind::Variable && stored(n.index) && var(n.index).token != k) {
        out += "(" + slot_name(n.index) + "[0])";
      } else if (n.kind == Name::Kind::Attribute && !group_uniform(n.index)) {
        out += "(" + kf_.params[static_cast<size_t>(n.index)].type + "{})";
      } else {
        out.append(text(s_, t_[k]));
      }
    }
    return out;
  }

  // ---- declarations ---------------------------------------------------------------

  const Declarator& declarator(int v) const {
    return var(v).declaration.declarators[var(v).declarator];
  }

  // The decl-specifiers of v's declaration; without cv-qualifiers for its
  // slots when they qualify the variable itself.
  std::string specifiers(int v, bool drop_cv) const {
    const Declaration& d = var(v).declaration;
    std::string out;
    for (size_t k = d.specifiers.first; k < d.specifiers.second; ++k) {
      const std::string_view w = text(s_, t_[k]);
      if (drop_cv && (w == "const" || w == "constexpr" || w == "volatile")) continue;
      if (!out.empty()) out += ' ';
      out += copy(k, k + 1);
    }
    return out;
  }

  // `T coreai_lanes_x[1024][dims]` (or [32], or the matrix slots).
  std::string slots_declaration(int v) const {
    const Declarator& dc = declarator(v);
    const std::string count = storage_[static_cast<size_t>(v)] != Storage::Threads
                                  ? "[::coreai::group::kSimdWidth]"
                              : cuda_ ? "[::coreai_steps]"
                                      : "[::coreai::group::kMaxThreads]";
    const std::string dims = copy(dc.dims_first, dc.dims_last);
    if (var(v).declaration.is_auto) {
      return "::coreai::group::slot_t<decltype((" + typing_text(dc.init_tokens) + "))> " +
             slot_name(v) + count + ";";
    }
    std::string pointer;
    for (size_t k = dc.first; k < dc.name; ++k) {
      if (token_is(s_, t_, k, "*")) pointer += "*";
    }
    return specifiers(v, pointer.empty()) + " " + pointer + slot_name(v) + count + dims + ";";
  }

  bool const_variable(int v) const {
    const Declarator& dc = declarator(v);
    if (dc.pointer) {
      for (size_t k = dc.first; k < dc.name; ++k) {
        if (token_is(s_, t_, k, "const")) return true;
      }
      return false;
    }
    return var(v).declaration.is_const || var(v).declaration.is_constexpr;
  }

  std::string binding(int v) const {
    return std::string(const_variable(v) ? "const auto& " : "auto& ") + var(v).name + " = " +
           slot_of_thread(v) + ";";
  }

  // The text of one declarator as a declaration of its own: `T d;`.
  std::string own_declaration(int v) const {
    const Declarator& dc = declarator(v);
    return specifiers(v, false) + " " + copy(dc.first, dc.last) + ";";
  }

  // The declaration statement `st`, rewritten for the loop over threads:
  // local declarators as they are, stored ones initialised into their slot
  // and bound by reference, single ones gone (declared before the loop).
  std::string declaration_in_loop(const Statement& st) const {
    std::string out;
    for (const int v : declared_in(st)) {
      const Declarator& dc = declarator(v);
      const Storage where = storage_[static_cast<size_t>(v)];
      if (where == Storage::Single) continue;
      if (where == Storage::Local) {
        out += own_declaration(v) + " ";
        continue;
      }
      if (dc.init != Declarator::Init::None) {
        // The declaration under another name, then into the slot.
        std::string pointer;
        for (size_t k = dc.first; k < dc.name; ++k) pointer += copy(k, k + 1) + " ";
        out += specifiers(v, false) + " " + pointer + "coreai_init_" + var(v).name +
               copy(dc.dims_first, dc.last) + "; ::coreai::group::store(" + slot_of_thread(v) +
               ", coreai_init_" + var(v).name + "); ";
      }
      out += binding(v) + " ";
    }
    return out;
  }

  std::vector<int> declared_in(const Statement& st) const {
    std::vector<int> out;
    for (size_t k = st.first; k < st.last; ++k) {
      // (The variables of a for header are the loop's: single in a loop around
      // synchronisation, check_header, or local to a thread's loop.)
      if (a_.names[k].kind == Name::Kind::Variable && var(a_.names[k].index).token == k &&
          var(a_.names[k].index).statement == &st && !var(a_.names[k].index).for_header) {
        out.push_back(a_.names[k].index);
      }
    }
    return out;
  }

  bool is_declaration(const Statement& st) const {
    return st.kind == StatementKind::Simple && parse_declaration(s_, t_, st).has_value();
  }

  // ---- classification -----------------------------------------------------------

  enum class Kind {
    Run,          // a thread's code: runs inside a loop over threads
    Hoist,        // declared once before the loops (single variables, types, threadgroup storage)
    Assign,       // a uniform assignment to a single variable, once, in order
    SimdValue,    // a statement with SIMD-group functions
    SimdBarrier,  // simdgroup_barrier(...)
    Matrix,       // a simdgroup matrix statement, once per SIMD-group
    Structural,   // control flow around synchronisation
    Interchange,  // a loop of uniform trip count: once, with the loops over threads inside
  };

  bool whole_call(const Statement& st, Sync sync) const {
    return st.kind == StatementKind::Simple && a_.syncs[st.first] == sync &&
           token_is(s_, t_, st.first + 1, "(") &&
           skip_group(s_, t_, st.first + 1) + 1 == st.last;
  }

  bool mentions_matrix(const Statement& st) const {
    for (size_t k = st.first; k < st.last; ++k) {
      if (a_.syncs[k] == Sync::MatrixCall || a_.syncs[k] == Sync::MatrixType) return true;
      if (a_.names[k].kind == Name::Kind::Variable && var(a_.names[k].index).matrix) return true;
    }
    return false;
  }

  bool has_matrix_call(const Statement& st) const {
    for (size_t k = st.first; k < st.last; ++k) {
      if (a_.syncs[k] == Sync::MatrixCall) return true;
    }
    return false;
  }

  bool has_simd_value(const Statement& st) const {
    for (size_t k = st.first; k < st.last; ++k) {
      if (a_.syncs[k] == Sync::SimdValue) return true;
    }
    return false;
  }

  // A break or continue in `st` that leaves it (its loop is around it).
  static bool jumps_out(const Statement& st, bool in_loop = false, bool in_switch = false) {
    switch (st.kind) {
      case StatementKind::Break:
        return !in_loop && !in_switch;
      case StatementKind::Continue:
        return !in_loop;
      case StatementKind::For:
      case StatementKind::While:
      case StatementKind::Do:
        in_loop = true;
        break;
      case StatementKind::Switch:
        in_switch = true;
        break;
      default:
        break;
    }
    return std::any_of(st.body.begin(), st.body.end(),
                       [&](const Statement& b) { return jumps_out(b, in_loop, in_switch); });
  }

  // A thread's statement must end inside its loop over threads.
  bool check_run(const Statement& st) {
    if (jumps_out(st)) {
      return fail(st.first, "a break or continue out of a loop around a synchronisation");
    }
    for (const int v : declared_in(st)) {
      if (var(v).declaration.is_static && storage_[static_cast<size_t>(v)] != Storage::Local) {
        return fail(var(v).token, "a static variable used across a synchronisation");
      }
    }
    return true;
  }

  bool has_return(const Statement& st) const {
    if (st.kind == StatementKind::Return) return true;
    return std::any_of(st.body.begin(), st.body.end(),
                       [&](const Statement& b) { return has_return(b); });
  }

  // Whether a standalone assignment assigns a single variable.
  bool single_assignment(const Statement& st) const {
    if (st.kind != StatementKind::Simple || is_declaration(st)) return false;
    for (size_t k = st.first; k < st.last; ++k) {
      if (a_.names[k].kind != Name::Kind::Variable) continue;
      for (const group_form::Site& site : var(a_.names[k].index).sites) {
        if (site.statement == &st && site.standalone && site.token == k) {
          return storage_[static_cast<size_t>(a_.names[k].index)] == Storage::Single;
        }
      }
    }
    return false;
  }

  Kind classify(const Statement& st, bool simd) const {
    if (st.kind == StatementKind::Simple) {
      // CUDA: SIMD-group functions and barriers are the warp's, in a thread's code.
      if (whole_call(st, Sync::SimdBarrier)) return cuda_ ? Kind::Run : Kind::SimdBarrier;
      if (declares_type(s_, t_, st)) return Kind::Hoist;
      const std::vector<int> declared = declared_in(st);
      if (!declared.empty()) {
        if (var(declared[0]).matrix) return Kind::Matrix;
        if (var(declared[0]).threadgroup) return Kind::Hoist;
        if (has_simd_value(st) && !cuda_) return Kind::SimdValue;
        if (std::all_of(declared.begin(), declared.end(), [&](int v) {
              return storage_[static_cast<size_t>(v)] == Storage::Single;
            })) {
          return Kind::Hoist;
        }
        return Kind::Run;
      }
      if (has_simd_value(st) && !cuda_) return Kind::SimdValue;
      if (simd && has_matrix_call(st)) return Kind::Matrix;
      if (single_assignment(st)) return Kind::Assign;
      return Kind::Run;
    }
    if (simd ? a_.has_simd(st) : a_.has_barrier(st)) return Kind::Structural;
    if (interchangeable(st, simd)) return Kind::Interchange;
    return Kind::Run;
  }

  // The trip count of `for (T i = a; i < b; ++i)` (or <=, i++, i += 1) with
  // integer literals a and b; -1 for any other loop.
  long constant_trip_count(const Statement& st) const {
    if (st.kind != StatementKind::For || st.range_for) return -1;
    auto squeezed = [&](TokenRange r) {
      std::string out;
      for (char c : token_text(r)) {
        if (!std::isspace(static_cast<unsigned char>(c))) out += c;
      }
      return out;
    };
    auto integer = [](std::string_view w, long& value) {
      while (!w.empty() && std::strchr("uUlL", w.back()) != nullptr) w.remove_suffix(1);
      if (w.empty() || w.size() > 9 ||
          !std::all_of(w.begin(), w.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        return false;
      }
      value = std::strtol(std::string(w).c_str(), nullptr, 10);
      return true;
    };
    const TokenRange init = st.head[0];
    if (init.second < init.first + 3 || !token_is(s_, t_, init.second - 2, "=")) return -1;
    const std::string name(text(s_, t_[init.second - 3]));
    long first = 0, bound = 0;
    if (!integer(text(s_, t_[init.second - 1]), first)) return -1;
    const std::string step = squeezed(st.head[2]);
    if (step != name + "++" && step != "++" + name && step != name + "+=1") return -1;
    const std::string cond = squeezed(st.head[1]);
    if (cond.starts_with(name + "<=") && integer(cond.substr(name.size() + 2), bound)) {
      return std::max(bound - first + 1, 0L);
    }
    if (cond.starts_with(name + "<") && integer(cond.substr(name.size() + 1), bound)) {
      return std::max(bound - first, 0L);
    }
    return -1;
  }

  // Whether a loop of a thread's code, directly in a region's list, can run
  // its header once for the threadgroup (or SIMD-group) with the loop over
  // threads inside: `for (i ...) for (t ...) body` for `for (t ...) for (i
  // ...) body`, so that the body's loop over threads can vectorize. Each
  // thread still runs its statements in order; only the interleaving of
  // threads, which Metal leaves unordered between barriers, changes. Needs a
  // header that is the same for all threads and changes only its own
  // variables, and a body without synchronisation, return, or break or
  // continue of this loop. A loop of a small constant trip count stays a
  // thread's (the compiler unrolls it).
  bool interchangeable(const Statement& st, bool simd) const {
    if (st.kind != StatementKind::For || st.range_for || st.body.empty()) return false;
    if (a_.placement(st) == Placement::Lane || st.head[1].first >= st.head[1].second) {
      return false;
    }
    if (a_.has_barrier(st) || a_.has_simd(st) || mentions_matrix(st) || has_return(st) ||
        jumps_out(st.body[0])) {
      return false;
    }
    const Uniformity needed = simd ? Uniformity::Simd : Uniformity::Group;
    for (size_t h = 0; h < 3; ++h) {
      const TokenRange r = st.head[h];
      if (r.first >= r.second) continue;
      if (a_.uniformity(r) < needed || (h == 1 && !a_.pure(r))) return false;
      for (size_t k = r.first; k < r.second; ++k) {
        if (a_.names[k].kind != Name::Kind::Variable) continue;
        const int v = a_.names[k].index;
        const bool own = var(v).statement == &st && var(v).for_header;
        if (own && var(v).token == k && !a_.single_copy(v, needed)) return false;
        for (const group_form::Site& site : var(v).sites) {
          if (site.token == k && (!own || !a_.single_copy(v, needed) || !a_.pure(site.value))) {
            return false;
          }
        }
      }
    }
    const long trips = constant_trip_count(st);
    return trips < 0 || trips > kUnrolledTrips;
  }

  // Loops of at most this many iterations, constant, are unrolled whole
  // inside an interchanged loop: the vectorized body is then one block.
  static constexpr long kUnrolledTrips = 16;

  void unroll_small_loops(const Statement& st) {
    for (const Statement& b : st.body) {
      const long trips = constant_trip_count(b);
      const size_t start = statement_start(b.first);
      const bool hinted =
          s_.substr(start, t_[b.first].begin - start).find("#pragma") != std::string_view::npos;
      if (trips > 0 && trips <= kUnrolledTrips && !hinted && edits_.find(b.first) == edits_.end()) {
        edits_[b.first] = {b.first + 1, "_Pragma(\"clang loop unroll(full)\") for"};
      }
      unroll_small_loops(b);
    }
  }

  // ---- storage decisions ------------------------------------------------------------

  // Decides how the variables declared directly in statements [list, list +
  // count) are kept, for a list processed at SIMD level (simd) or at group
  // level: single where the analysis allows, else in slots if they are read
  // after the loop over threads that declares them (or after the region,
  // region_end, for the variables of a SIMD region's own list).
  void decide_storage(const Statement* list, size_t count, size_t after, bool simd,
                      size_t region_end) {
    for (size_t i = 0; i < count; ++i) {
      for (const int v : declared_in(list[i])) {
        const Variable& x = var(v);
        Storage& where = storage_[static_cast<size_t>(v)];
        if (x.threadgroup) {
          where = Storage::Single;
        } else if (x.matrix) {
          where = x.last_use >= region_end ? Storage::SgSlots : Storage::SimdObject;
        } else if (a_.single_copy(v, simd ? Uniformity::Simd : Uniformity::Group) &&
                   !(simd && x.last_use >= region_end && !hoists_to_group(v))) {
          where = Storage::Single;
        } else {
          where = Storage::Local;
        }
      }
    }
    // Where the loops over threads end depends on which assignments are single.
    const std::vector<size_t> segment_end = segment_ends(list, count, after, simd);
    for (size_t i = 0; i < count; ++i) {
      for (const int v : declared_in(list[i])) {
        Storage& where = storage_[static_cast<size_t>(v)];
        if (where != Storage::Local) continue;
        const Variable& x = var(v);
        if (x.last_use >= region_end && simd) {
          where = Storage::Threads;
        } else if (x.last_use >= segment_end[i]) {
          where = simd ? Storage::Lanes : Storage::Threads;
        }
        if (where == Storage::Threads || where == Storage::Lanes) check_slots(v);
      }
    }
  }

  // The slots of an array live on the group's stack, one per possible thread:
  // its bounds must be constants, and all of them must fit a stack.
  void check_slots(int v) {
    const Declarator& dc = declarator(v);
    unsigned long long elements = 1;
    bool known = true;
    for (size_t k = dc.dims_first; k < dc.dims_last; ++k) {
      const Name& n = a_.names[k];
      if ((n.kind == Name::Kind::Variable && !var(n.index).declaration.is_constexpr) ||
          n.kind == Name::Kind::Buffer || n.kind == Name::Kind::Attribute) {
        fail(dc.name, "the array " + var(v).name + " has a bound that is not a constant and "
                      "lives across a barrier or SIMD-group operation");
        return;
      }
      const std::string_view w = text(s_, t_[k]);
      if (w == "[" || w == "]") continue;
      if (t_[k].kind == TokenKind::Other && std::isdigit(static_cast<unsigned char>(w[0]))) {
        elements *= std::strtoull(std::string(w).c_str(), nullptr, 0);
      } else {
        known = false;
      }
    }
    const unsigned long long slots =
        storage_[static_cast<size_t>(v)] == Storage::Threads ? 1024 : 32;
    // At least 4 bytes an element for the common types; exactness is not needed.
    if (known && dc.dims_last > dc.dims_first && elements * 4 * slots > (64ull << 20)) {
      fail(dc.name, "the array " + var(v).name + " (" + std::to_string(elements) +
                        " elements a thread) lives across a barrier or SIMD-group operation, "
                        "and one copy per thread would not fit a stack");
    }
  }

  // ---- loops over threads -----------------------------------------------------------

  struct Piece {
    const Statement* statement = nullptr;  // copied (with its edits) ...
    std::string text;                      // ... or this text
  };

  // The attributes and bindings a loop over threads needs for its pieces.
  std::string loop_prologue(const std::vector<Piece>& pieces, size_t segment_first) const {
    std::set<int> attrs, vars;
    auto scan = [&](size_t first, size_t last) {
      for (size_t k = first; k < last; ++k) {
        const Name& n = a_.names[k];
        if (n.kind == Name::Kind::Attribute) attrs.insert(n.index);
        if (n.kind == Name::Kind::Variable && stored(n.index) &&
            storage_[static_cast<size_t>(n.index)] != Storage::SgSlots &&
            var(n.index).token < segment_first) {
          vars.insert(n.index);
        }
      }
    };
    for (const Piece& p : pieces) {
      if (p.statement != nullptr) scan(p.statement->first, p.statement->last);
    }
    for (const auto& r : extra_reads_) scan(r.first, r.second);
    std::string out;
    for (int i : attrs) {
      const KernelParameter& p = kf_.params[static_cast<size_t>(i)];
      if (group_form::attribute_uniformity(p.attribute) == Uniformity::Group) continue;
      out += "const " + p.type + " " + p.name + " = ::coreai::attr_" + p.attribute +
             "(coreai_g, coreai_th); ";
    }
    for (int v : vars) out += binding(v) + " ";
    return out;
  }

  std::string pieces_text(const std::vector<Piece>& pieces) const {
    std::string out;
    for (const Piece& p : pieces) {
      if (p.statement == nullptr) {
        out += p.text;
      } else if (is_declaration(*p.statement) && p.statement->kind == StatementKind::Simple) {
        out += line_marker(t_[p.statement->first].begin) + declaration_in_loop(*p.statement);
      } else {
        out += placed(p.statement->first, p.statement->last, true);
      }
    }
    return out;
  }

  // Edits turning each return among `pieces` into the end of that thread.
  void edit_returns(const Statement& st, const std::string& label) {
    if (st.kind == StatementKind::Return) {
      edits_[st.first] = {st.last, "{ coreai_f.kill(coreai_t);" +
                                       generated_goto(label, t_[st.last - 1].begin) + "}"};
      return;
    }
    for (const Statement& b : st.body) edit_returns(b, label);
  }

  // A loop over the threads running `pieces`: every thread of the threadgroup
  // (group level) or every lane of SIMD-group coreai_sg.
  void loop_over_threads(std::vector<Piece>& pieces, size_t segment_first,
                         const std::string& kill_label = {}) {
    if (pieces.empty()) return;
    const std::string label =
        kill_label.empty() ? "coreai_next_" + std::to_string(labels_++) : kill_label;
    bool returns = !kill_label.empty();
    for (const Piece& p : pieces) {
      if (p.statement != nullptr && has_return(*p.statement)) {
        edit_returns(*p.statement, label);
        returns = true;
      }
    }
    const std::string alive =
        a_.can_return || kills_ ? "if (!coreai_f.alive(coreai_t)) continue; " : "";
    std::string head;
    if (cuda_) {
      // Step k runs Metal thread k * blockDim + c on CUDA thread c: Metal's
      // SIMD-group t / 32 is the warp of c, so SIMD-group functions in the
      // pieces are the warp's. Unrolled: slots indexed by k stay registers.
      head = "\n_Pragma(\"unroll\") for (uint32_t coreai_k = 0; coreai_k < ::coreai_steps; "
             "++coreai_k) { const uint32_t coreai_t = coreai_k * coreai_b + coreai_c; "
             "const ::coreai_cpu_thread coreai_th = ::coreai::target::thread_at(coreai_g, "
             "coreai_t); ";
    } else if (in_simd_) {
      head = "\nfor (uint32_t coreai_lane = 0; coreai_lane < coreai_f.lanes(coreai_sg); "
             "++coreai_lane) { const uint32_t coreai_t = coreai_sg * 32 + coreai_lane; " + alive +
             "const ::coreai_cpu_thread coreai_th = coreai_f.thread_at(coreai_t); ";
    } else {
      head =
          "\nfor (uint32_t coreai_z = 0, coreai_t = 0; coreai_z < coreai_g.size[2]; ++coreai_z) "
          "for (uint32_t coreai_y = 0; coreai_y < coreai_g.size[1]; ++coreai_y) "
          "for (uint32_t coreai_x = 0; coreai_x < coreai_g.size[0]; ++coreai_x, ++coreai_t) { " +
          alive +
          "const ::coreai_cpu_thread coreai_th{{coreai_x, coreai_y, coreai_z}, coreai_t}; ";
    }
    const std::string prologue = loop_prologue(pieces, segment_first);
    // (The CPU's vectorizer needs the branch every thread takes; the GPU does not.)
    const size_t branch = returns || cuda_ ? pieces.size() : branch_of_every_thread(pieces);
    const bool versioned = branch < pieces.size();
    if (versioned) {
      // The condition for every running thread first; then the branch they
      // all take alone, or the pieces as written.
      const Statement& st = *pieces[branch].statement;
      const std::string every = "coreai_every_" + std::to_string(versioned_++);
      const std::vector<Piece> prefix(pieces.begin(), pieces.begin() + static_cast<long>(branch));
      std::vector<Piece> taken = pieces;
      taken[branch] = {&st.body[0], {}};
      out_ += "\n{ bool " + every + " = true;" + head + prologue + "{" + pieces_text(prefix) +
              "\n" + every + " &= bool(" + placed(st.head[0].first, st.head[0].second) +
              ");\n}\n}\nif (" + every + ") {" + head + prologue + "{" + pieces_text(taken) +
              "\n}\n}\n} else {";
    }
    out_ += head + prologue + "{" + pieces_text(pieces) + "\n}";
    if (returns) out_ += " " + label + ": ;";
    out_ += "\n}";
    if (versioned) out_ += "\n}\n}";  // the else, then the block of the flag
    ++loops_;
    if (returns) {
      out_ += in_simd_ ? "\nif (!coreai_f.any(coreai_sg)) {" +
                             generated_goto(simd_end_, t_[segment_first].begin) + "}"
                       : "\nif (coreai_f.none()) return;";
    }
    pieces.clear();
    extra_reads_.clear();
  }

  // A loop over threads whose pieces are pure declarations and then an if
  // (MLX's `const int offset = r * lsize * 4 + lid * 4; if (offset + 4 <= n)
  // {...} else {...}`) also runs as two loops: the first evaluates the
  // condition for every running thread; where all take the then branch, the
  // second runs the pieces with that branch in place of the if. The compiler
  // vectorises a loop over threads with the if's branches masked: the then
  // branch's loads and stores of consecutive threads become gathers and
  // scatters, and the else branch runs too. Without the if they are whole
  // vectors. The index of that if among `pieces`, or pieces.size() where the
  // condition could change while the loop runs: the declarations and the
  // condition must be pure (no assignment, no call with effects, no memory
  // read), and no piece may modify a variable they read, nor any code reach
  // one through its address.
  size_t branch_of_every_thread(const std::vector<Piece>& pieces) const {
    const size_t none = pieces.size();
    std::set<const Statement*> prefix;
    std::vector<TokenRange> reads;
    size_t i = 0;
    for (; i < pieces.size(); ++i) {
      const Statement* st = pieces[i].statement;
      if (st == nullptr) return none;
      if (st->kind == StatementKind::If) break;
      if (!is_declaration(*st) || declares_type(s_, t_, *st)) return none;
      for (const int v : declared_in(*st)) {
        const Storage where = storage_[static_cast<size_t>(v)];
        if (where != Storage::Local && where != Storage::Single) return none;
        const Declarator& dc = declarator(v);
        if (dc.init != Declarator::Init::None) reads.push_back(dc.init_tokens);
      }
      prefix.insert(st);
    }
    if (i == none) return none;
    const Statement& branch = *pieces[i].statement;
    if (is_declaration(branch.body[0])) return none;
    reads.push_back(branch.head[0]);
    for (const TokenRange& r : reads) {
      if (!a_.pure(r)) return none;
      for (size_t k = r.first; k < r.second; ++k) {
        const Name& n = a_.names[k];
        if (n.kind == Name::Kind::Buffer) return none;
        if (n.kind != Name::Kind::Variable) continue;
        // A thread's own declaration, made again in each loop (a single
        // variable is one copy for all threads, checked as any other).
        if (prefix.contains(var(n.index).statement) &&
            storage_[static_cast<size_t>(n.index)] == Storage::Local) {
          continue;
        }
        const Variable& x = var(n.index);
        if (x.escapes || x.threadgroup || x.matrix) return none;
        for (const Site& site : x.sites) {
          for (const Piece& p : pieces) {
            if (p.statement != nullptr && site.token >= p.statement->first &&
                site.token < p.statement->last) {
              return none;
            }
          }
        }
      }
    }
    return i;
  }

  // ---- lists -------------------------------------------------------------------------

  // The token after statement i of a list, or `after` for the last.
  static size_t end_of(const Statement* list, size_t count, size_t i, size_t after) {
    return i + 1 < count ? list[i + 1].first : after;
  }

  bool group_list(const Statement* list, size_t count, size_t after, bool top);
  bool group_region(const Statement* list, size_t count, size_t after);
  bool simd_region(const Statement* list, size_t count, size_t after);
  bool simd_list(const Statement* list, size_t count, size_t after, size_t region_end);
  bool structural(const Statement& st, bool simd);
  bool interchange(const Statement& st, bool simd);
  bool terminal_if(const Statement& st);
  bool simd_value(const Statement& st, std::vector<Piece>& before, std::vector<Piece>& after);
  bool matrix_statement(const Statement& st);
  bool check_header(const Statement& st, Uniformity needed);

  std::vector<size_t> segment_ends(const Statement* list, size_t count, size_t after,
                                   bool simd) const {
    std::vector<size_t> ends(count, after);
    // A segment ends where a statement that is not a thread's code starts.
    size_t end = after;
    for (size_t i = count; i-- > 0;) {
      ends[i] = end;
      const Kind kind = classify(list[i], simd);
      if (kind != Kind::Run && kind != Kind::Hoist) end = list[i].first;
    }
    return ends;
  }

  // Statements in a body block or a single statement, as a list.
  template <class F>
  bool each_body(const Statement& st, size_t index, F f) {
    const Statement& b = st.body[index];
    if (b.kind == StatementKind::Block) return f(b.body.data(), b.body.size(), b.last - 1);
    return f(&b, 1, b.last);
  }

  const Analysis& a_;
  std::string_view s_;
  const std::vector<Token>& t_;
  const KernelFunction& kf_;
  const bool cuda_;
  struct Directive {
    size_t start;
    int line;
    std::string file;
  };
  std::vector<Directive> directives_;
  std::vector<Storage> storage_;
  std::map<size_t, Edit> edits_;
  std::vector<TokenRange> extra_reads_;  // pieces of text that name variables (SIMD arguments)
  std::string out_;
  std::string failure_;
  std::string simd_end_;  // label at the end of the running SIMD-group's body
  std::string computes_;  // SIMD-group functions' results, computed after the loop before them
  bool in_simd_ = false;
  bool kills_ = false;    // a thread may stop early (return, or the terminal if)
  int labels_ = 0, loops_ = 0, exchanges_ = 0, regions_ = 0, simd_regions_ = 0, matrices_ = 0,
      interchanged_ = 0, versioned_ = 0;
};

// ---- group level -------------------------------------------------------------------

bool Emitter::group_list(const Statement* list, size_t count, size_t after, bool top) {
  const std::vector<Analysis::Item> items = a_.group_items(list, count);
  for (size_t n = 0; n < items.size(); ++n) {
    const Analysis::Item& item = items[n];
    const size_t end = end_of(list, count, item.end - 1, after);
    if (item.structural) {
      const Statement& st = list[item.begin];
      if (whole_call(st, Sync::Barrier)) {
        // The end of a region: on the CPU nothing to run, on the GPU the
        // barrier between the CUDA threads.
        if (cuda_) out_ += placed(st.first, st.last);
        continue;
      }
      if (top && n + 1 == items.size() && item.begin + 1 == count &&
          st.kind == StatementKind::If && a_.uniformity(st.head[0]) < Uniformity::Group) {
        if (!terminal_if(st)) return false;
        continue;
      }
      if (!structural(st, false)) return false;
      continue;
    }
    const bool ok = item.simd && !cuda_
                        ? simd_region(list + item.begin, item.end - item.begin, end)
                        : group_region(list + item.begin, item.end - item.begin, end);
    if (!ok) return false;
  }
  return true;
}

bool Emitter::group_region(const Statement* list, size_t count, size_t after) {
  ++regions_;
  decide_storage(list, count, after, false, after);
  if (!failure_.empty()) return false;
  std::vector<Piece> pieces;
  size_t segment_first = list[0].first;
  for (size_t i = 0; i < count; ++i) {
    const Statement& st = list[i];
    const Kind kind = classify(st, false);
    if (kind == Kind::Hoist) {
      const bool verbatim =
          declares_type(s_, t_, st) || !is_declaration(st) || var(declared_in(st)[0]).threadgroup;
      out_ += verbatim
                  ? placed(st.first, st.last)
                  : [&] {
                      std::string hoisted;
                      for (const int v : declared_in(st)) {
                        hoisted += line_marker(t_[st.first].begin) + own_declaration(v);
                      }
                      return hoisted;
                    }();
      continue;
    }
    if (kind == Kind::Assign) {
      loop_over_threads(pieces, segment_first);
      out_ += placed(st.first, st.last);
      segment_first = end_of(list, count, i, after);
      continue;
    }
    if (kind == Kind::Interchange) {
      loop_over_threads(pieces, segment_first);
      if (!interchange(st, false)) return false;
      segment_first = end_of(list, count, i, after);
      continue;
    }
    if (kind != Kind::Run) return fail(st.first, "unexpected statement in a region");
    if (!check_run(st)) return false;
    // Stored variables declared here get their slots before the loop.
    for (const int v : declared_in(st)) {
      if (storage_[static_cast<size_t>(v)] == Storage::Threads) {
        out_ += line_marker(t_[st.first].begin) + slots_declaration(v);
      } else if (storage_[static_cast<size_t>(v)] == Storage::Single) {
        out_ += line_marker(t_[st.first].begin) + own_declaration(v);
      }
    }
    pieces.push_back({&st, {}});
  }
  loop_over_threads(pieces, segment_first);
  return true;
}

// Whether a for/while/do/if header may run once for the threads of `needed`
// uniformity: its values are uniform and pure, and the variables it changes
// are single.
bool Emitter::check_header(const Statement& st, Uniformity needed) {
  for (size_t h = 0; h < 3; ++h) {
    const TokenRange r = st.head[h];
    if (r.first >= r.second) continue;
    if (a_.uniformity(r) < needed) {
      const char* what = needed == Uniformity::Group ? "a barrier" : "a SIMD-group operation";
      return fail(r.first,
                  std::string("the condition around ") + what + " differs between threads");
    }
    for (size_t k = r.first; k < r.second; ++k) {
      if (a_.names[k].kind != Name::Kind::Variable) continue;
      const int v = a_.names[k].index;
      for (const group_form::Site& site : var(v).sites) {
        if (site.token == k && storage_[static_cast<size_t>(v)] != Storage::Single &&
            !(var(v).statement == &st && var(v).for_header &&
              a_.single_copy(v, needed))) {
          return fail(k, "the loop around a synchronisation changes " + var(v).name +
                             ", which is not the same for all threads");
        }
      }
    }
    const bool step = st.kind == StatementKind::For && h == 2;
    const bool init = st.kind == StatementKind::For && h == 0;
    if (!step && !init && !a_.pure(r)) {
      return fail(r.first, "a condition around a synchronisation reads memory or has effects");
    }
  }
  // Variables the header declares are single.
  for (size_t k = st.head[0].first; k < st.head[0].second; ++k) {
    if (a_.names[k].kind == Name::Kind::Variable && var(a_.names[k].index).token == k) {
      const int v = a_.names[k].index;
      if (!a_.single_copy(v, needed)) {
        return fail(k, "the loop variable " + var(v).name + " is not the same for all threads");
      }
      storage_[static_cast<size_t>(v)] = Storage::Single;
    }
  }
  return true;
}

// Control flow around barriers (or, at SIMD level, around SIMD-group
// operations): its conditions are uniform, so it runs once, around the loops.
bool Emitter::structural(const Statement& st, bool simd) {
  const Uniformity needed = simd ? Uniformity::Simd : Uniformity::Group;
  auto body = [&](size_t index) {
    return each_body(st, index, [&](const Statement* l, size_t n, size_t after) {
      return simd ? simd_list(l, n, after, 0) : group_list(l, n, after, false);
    });
  };
  switch (st.kind) {
    case StatementKind::Block:
      out_ += "\n{";
      if (!(simd ? simd_list(st.body.data(), st.body.size(), st.last - 1, 0)
                 : group_list(st.body.data(), st.body.size(), st.last - 1, false))) {
        return false;
      }
      out_ += "\n}";
      return true;
    case StatementKind::If: {
      if (a_.uniformity(st.head[0]) < needed || !a_.pure(st.head[0])) {
        return fail(st.first, std::string("a ") + (simd ? "SIMD-group operation" : "barrier") +
                                  " under a condition that differs between threads");
      }
      edit_uniform_reads(st.head[0].first, st.head[0].second);
      out_ += line_marker(t_[st.first].begin) + "if (" +
              copy(st.head[0].first, st.head[0].second) + ") {";
      if (!body(0)) return false;
      out_ += "\n}";
      if (st.has_else) {
        out_ += " else {";
        if (!body(1)) return false;
        out_ += "\n}";
      }
      return true;
    }
    case StatementKind::For:
    case StatementKind::While:
    case StatementKind::Do: {
      if (st.range_for) return fail(st.first, "a range-based for loop around a synchronisation");
      // Declarations in the init are the loop's own, single, variables.
      if (!check_header(st, needed)) return false;
      for (const TokenRange& r : st.head) edit_uniform_reads(r.first, r.second);
      const std::string marker = line_marker(t_[st.first].begin);
      if (st.kind == StatementKind::For) {
        out_ += marker + "for (" + copy(st.head[0].first, st.head[0].second) + "; " +
                copy(st.head[1].first, st.head[1].second) + "; " +
                copy(st.head[2].first, st.head[2].second) + ") {";
      } else if (st.kind == StatementKind::While) {
        out_ += marker + "while (" + copy(st.head[0].first, st.head[0].second) + ") {";
      } else {
        out_ += marker + "do {";
      }
      if (!body(0)) return false;
      out_ += "\n}";
      if (st.kind == StatementKind::Do) {
        out_ += " while (" + copy(st.head[0].first, st.head[0].second) + ");";
      }
      return true;
    }
    default:
      return fail(st.first, std::string("a ") + (simd ? "SIMD-group operation" : "barrier") +
                                " inside a statement the group-loop form does not follow");
  }
}

// A loop of uniform trip count (interchangeable): its header once, as around
// a synchronisation, and its body one region of the loops over threads.
bool Emitter::interchange(const Statement& st, bool simd) {
  ++interchanged_;
  unroll_small_loops(st);
  const int regions = regions_;
  const bool ok = structural(st, simd);
  regions_ = regions;  // the body's loop is part of the region around it
  return ok;
}

// `if (c) { ... barriers ... }` as the kernel's last statement, c varying:
// threads for which c is false run the else branch and are done (fiber mode
// waits at a barrier only for threads still running); the others go on
// through the branch, region by region.
bool Emitter::terminal_if(const Statement& st) {
  if (cuda_) return fail(st.first, "threads leave the threadgroup at an if around barriers");
  if (st.has_else && (a_.has_barrier(st.body[1]) || a_.has_simd(st.body[1]))) {
    return fail(st.first, "barriers in both branches of an if whose condition differs between "
                          "threads");
  }
  ++regions_;
  kills_ = true;
  const std::string label = "coreai_next_" + std::to_string(labels_++);
  std::string kill =
      "{ coreai_f.kill(coreai_t);" + generated_goto(label, t_[st.head[0].first].begin) + "}";
  extra_reads_.push_back(st.head[0]);
  std::string text = line_marker(t_[st.head[0].first].begin) + "if (!(" +
                     copy(st.head[0].first, st.head[0].second) + ")) {";
  std::vector<Piece> pieces;
  if (st.has_else) {
    pieces.push_back({nullptr, text});
    if (has_return(st.body[1])) edit_returns(st.body[1], label);
    pieces.push_back({&st.body[1], {}});
    pieces.push_back({nullptr, "\n" + kill + "}"});
  } else {
    pieces.push_back({nullptr, text + " " + kill + " }"});
  }
  loop_over_threads(pieces, st.first, label);
  return each_body(st, 0, [&](const Statement* l, size_t n, size_t after) {
    out_ += "\n{";
    const bool ok = group_list(l, n, after, false);
    out_ += "\n}";
    return ok;
  });
}

// ---- SIMD level -----------------------------------------------------------------------

bool Emitter::simd_region(const Statement* list, size_t count, size_t after) {
  ++simd_regions_;
  const std::string end_label = "coreai_sgend_" + std::to_string(labels_++);
  // Variables of the region's own list that outlive it: their slots first.
  decide_storage(list, count, after, true, after);
  if (!failure_.empty()) return false;
  for (size_t i = 0; i < count; ++i) {
    const Statement& st = list[i];
    if (declares_type(s_, t_, st)) {
      out_ += placed(st.first, st.last);
      continue;
    }
    for (const int v : declared_in(st)) {
      const Storage where = storage_[static_cast<size_t>(v)];
      if (where == Storage::Threads) {
        out_ += line_marker(t_[st.first].begin) + slots_declaration(v);
      } else if (where == Storage::SgSlots) {
        const Declarator& dc = declarator(v);
        out_ += line_marker(t_[st.first].begin) + copy(var(v).declaration.specifiers.first,
                                                       var(v).declaration.specifiers.second) +
                " " + slot_name(v) + "[::coreai::group::kSimdWidth]" +
                copy(dc.dims_first, dc.dims_last) + ";";
      } else if (where == Storage::Single && hoists_to_group(v)) {
        out_ += var(v).threadgroup ? placed(st.first, st.last)
                                   : line_marker(t_[st.first].begin) + own_declaration(v);
      }
    }
  }
  const bool was_simd = in_simd_;
  const std::string was_end = simd_end_;
  in_simd_ = true;
  simd_end_ = end_label;
  out_ += "\nfor (uint32_t coreai_sg = 0; coreai_sg < coreai_f.simdgroups(); ++coreai_sg) {";
  if (a_.can_return || kills_) out_ += " if (!coreai_f.any(coreai_sg)) continue;";
  for (const KernelParameter& p : kf_.params) {
    if (!p.attribute.empty() &&
        group_form::attribute_uniformity(p.attribute) == Uniformity::Simd) {
      out_ += " const " + p.type + " " + p.name + " = ::coreai::attr_" + p.attribute +
              "(coreai_g, coreai_f.thread_at(coreai_sg * 32));";
    }
  }
  // Matrices kept across regions, for this SIMD-group.
  for (size_t v = 0; v < a_.variables.size(); ++v) {
    if (storage_[v] == Storage::SgSlots && a_.variables[v].token < list[0].first &&
        a_.variables[v].last_use >= list[0].first) {
      out_ += " auto& " + a_.variables[v].name + " = " + slot_name(static_cast<int>(v)) +
              "[coreai_sg];";
    }
  }
  out_ += " {";
  const bool ok = simd_list(list, count, after, after);
  out_ += "\n} " + end_label + ": ;\n}";
  if (a_.can_return || kills_) out_ += "\nif (coreai_f.none()) return;";
  in_simd_ = was_simd;
  simd_end_ = was_end;
  return ok;
}

bool Emitter::simd_list(const Statement* list, size_t count, size_t after, size_t region_end) {
  // Storage of a nested list (the region's own was decided by simd_region).
  if (region_end == 0) decide_storage(list, count, after, true, std::string_view::npos);
  if (!failure_.empty()) return false;
  std::vector<Piece> pieces;
  size_t segment_first = list[0].first;
  for (size_t i = 0; i < count; ++i) {
    const Statement& st = list[i];
    const Kind kind = classify(st, true);
    const size_t next = end_of(list, count, i, after);
    switch (kind) {
      case Kind::Hoist: {
        if (region_end != 0) {
          // In the region's own list: declared before the loop over SIMD-groups,
          // unless only uniform within a SIMD-group.
          for (const int v : declared_in(st)) {
            if (!hoists_to_group(v)) {
              out_ += line_marker(t_[st.first].begin) + own_declaration(v);
            }
          }
          continue;
        }
        if (declares_type(s_, t_, st) || var(declared_in(st)[0]).threadgroup) {
          out_ += placed(st.first, st.last);
        } else {
          for (const int v : declared_in(st)) {
            out_ += line_marker(t_[st.first].begin) + own_declaration(v);
          }
        }
        continue;
      }
      case Kind::Run:
        for (const int v : declared_in(st)) {
          if (storage_[static_cast<size_t>(v)] == Storage::Lanes) {
            out_ += line_marker(t_[st.first].begin) + slots_declaration(v);
          } else if (storage_[static_cast<size_t>(v)] == Storage::Single &&
                     !(region_end != 0 && hoists_to_group(v))) {
            out_ += line_marker(t_[st.first].begin) + own_declaration(v);
          }
        }
        if (!check_run(st)) return false;
        if (mentions_matrix(st) && has_matrix_call(st)) {
          return fail(st.first, "a simdgroup matrix operation inside a statement the "
                                "group-loop form does not follow");
        }
        pieces.push_back({&st, {}});
        continue;
      case Kind::SimdValue: {
        for (const int v : declared_in(st)) {
          if (storage_[static_cast<size_t>(v)] == Storage::Lanes) {
            out_ += line_marker(t_[st.first].begin) + slots_declaration(v);
          }
        }
        std::vector<Piece> rest;
        if (!simd_value(st, pieces, rest)) return false;
        loop_over_threads(pieces, segment_first);
        out_ += computes_;
        computes_.clear();
        pieces = std::move(rest);
        segment_first = st.first;
        continue;
      }
      case Kind::SimdBarrier:
        loop_over_threads(pieces, segment_first);
        segment_first = next;
        continue;
      case Kind::Assign:
        loop_over_threads(pieces, segment_first);
        out_ += placed(st.first, st.last);
        segment_first = next;
        continue;
      case Kind::Matrix:
        loop_over_threads(pieces, segment_first);
        if (!matrix_statement(st)) return false;
        segment_first = next;
        continue;
      case Kind::Interchange:
        loop_over_threads(pieces, segment_first);
        if (!interchange(st, true)) return false;
        segment_first = next;
        continue;
      case Kind::Structural:
        loop_over_threads(pieces, segment_first);
        if (a_.has_barrier(st)) {
          return fail(st.first, "a threadgroup_barrier under a condition that differs between "
                                "SIMD-groups");
        }
        if (!structural(st, true)) return false;
        segment_first = next;
        continue;
    }
  }
  loop_over_threads(pieces, segment_first);
  return true;
}

// `... simd_sum(x) ...;`: the lanes' arguments are collected in the loop over
// lanes before it (`before`), and the statement, reading each lane's result,
// starts the loop after it (`after`).
bool Emitter::simd_value(const Statement& st, std::vector<Piece>& before,
                         std::vector<Piece>& after) {
  struct Call {
    size_t name, open, close;
    std::vector<TokenRange> args;
  };
  std::vector<Call> calls;
  for (size_t k = st.first; k < st.last; ++k) {
    if (a_.syncs[k] != Sync::SimdValue) continue;
    Call c{k, k + 1, 0, {}};
    if (!token_is(s_, t_, c.open, "(")) {
      return fail(k, "a SIMD-group function with template arguments");
    }
    c.close = skip_group(s_, t_, c.open) - 1;
    for (size_t j = c.open + 1; j < c.close; ++j) {
      if (a_.syncs[j] != Sync::None) {
        return fail(j, "a SIMD-group function inside the arguments of another");
      }
    }
    size_t from = c.open + 1;
    while (from < c.close) {
      size_t to = from;
      while (to < c.close && !token_is(s_, t_, to, ",")) {
        const std::string_view w = text(s_, t_[to]);
        to = (w == "(" || w == "[" || w == "{") ? skip_group(s_, t_, to) : to + 1;
      }
      c.args.push_back({from, to});
      from = to + 1;
    }
    calls.push_back(std::move(c));
    k = calls.back().close;
  }
  // Calls run under no condition of their own statement: none follows a `?`,
  // `&&` or `||` (which would make it the operand evaluated only sometimes).
  if (!calls.empty()) {
    for (size_t k = st.first; k < calls.back().name; ++k) {
      const std::string_view w = text(s_, t_[k]);
      if (w == "?" || ((w == "&" || w == "|") && token_is(s_, t_, k + 1, w))) {
        return fail(k, "a SIMD-group function in a conditional expression");
      }
    }
  }
  for (const Call& c : calls) {
    const std::string x = "coreai_x" + std::to_string(exchanges_++);
    const std::string name(text(s_, t_[c.name]));
    out_ += "\n::coreai::group::exchange " + x + ";";
    std::string args, types;
    for (const TokenRange& r : c.args) {
      args += ", " + copy(r.first, r.second);
      types += std::string(types.empty() ? "" : ", ") + "decltype((" + copy(r.first, r.second) +
               "))";
      extra_reads_.push_back(r);
    }
    before.push_back(
        {nullptr, line_marker(t_[c.name].begin) + x + ".put(coreai_lane" + args + ");"});
    int width = 0;
    const char* op = reduction_op(name, width);
    std::string how;
    if (op != nullptr && c.args.size() == 1) {
      how = "::coreai::group::reduction<::coreai::simd::" + std::string(op) + ", " +
            std::to_string(width) + ">{}";
    } else {
      how = "[](auto... coreai_a) { return ::metal::" + name + "(coreai_a...); }";
    }
    // The qualifier of `metal::simd_sum(...)` goes with the call.
    size_t first = c.name;
    while (first >= 2 && token_is(s_, t_, first - 1, "::")) first -= 2;
    edits_[first] = {c.close + 1, x + ".result(coreai_lane, " + how +
                                     ", ::coreai::group::types<" + types + ">{})"};
    // Between the loops: the argument types spelled outside the loops over lanes.
    std::string outside;
    for (const TokenRange& r : c.args) {
      outside += std::string(outside.empty() ? "" : ", ") + "decltype((" + typing_text(r) + "))";
    }
    computes_ += line_marker(t_[c.name].begin) + x + ".compute(coreai_f.active(coreai_sg), " +
                 how + ", ::coreai::group::types<" + outside + ">{});";
  }
  after.push_back({&st, {}});
  return true;
}

// A statement on simdgroup matrices, run once for the SIMD-group: a
// declaration, an assignment, or a load, store or product. What it reads
// besides matrices must be the same for the SIMD-group's lanes.
bool Emitter::matrix_statement(const Statement& st) {
  ++matrices_;
  for (size_t k = st.first; k < st.last; ++k) {
    if (a_.syncs[k] == Sync::MatrixCall || a_.syncs[k] == Sync::MatrixType) continue;
    if (text(s_, t_[k]) == "thread_elements") {
      return fail(k, "thread_elements() in a statement with a simdgroup matrix operation");
    }
  }
  // Everything but the matrix calls and the assigned matrix.
  for (size_t k = st.first; k < st.last; ++k) {
    if (a_.syncs[k] == Sync::MatrixCall && token_is(s_, t_, k + 1, "(")) {
      const size_t close = skip_group(s_, t_, k + 1) - 1;
      size_t from = k + 2;
      while (from < close) {
        size_t to = from;
        while (to < close && !token_is(s_, t_, to, ",")) {
          const std::string_view w = text(s_, t_[to]);
          to = (w == "(" || w == "[" || w == "{") ? skip_group(s_, t_, to) : to + 1;
        }
        if (a_.uniformity({from, to}) < Uniformity::Simd || !a_.pure({from, to})) {
          return fail(from, "a simdgroup matrix operation with an argument that differs between "
                            "the lanes of a SIMD-group");
        }
        from = to + 1;
      }
    }
  }
  const std::vector<int> declared = declared_in(st);
  edit_uniform_reads(st.first, st.last);
  if (!declared.empty()) {
    for (const int v : declared) {
      const Declarator& dc = declarator(v);
      if (dc.init != Declarator::Init::None && a_.uniformity(dc.init_tokens) < Uniformity::Simd) {
        return fail(dc.name, "a simdgroup matrix initialised from values of single lanes");
      }
      if (storage_[static_cast<size_t>(v)] == Storage::SgSlots) {
        out_ += line_marker(t_[st.first].begin) + "auto& " + var(v).name + " = " +
                slot_of_thread(v) + ";";
        if (dc.init == Declarator::Init::Equals) {
          out_ += " " + var(v).name + " = " +
                  copy(dc.init_tokens.first, dc.init_tokens.second) + ";";
        } else if (dc.init != Declarator::Init::None) {
          return fail(dc.name,
                      "a simdgroup matrix kept across barriers, initialised by a constructor");
        }
      } else {
        out_ += line_marker(t_[st.first].begin) + own_declaration(v);
      }
    }
    return true;
  }
  out_ += placed(st.first, st.last);
  return true;
}

bool Emitter::emit(std::string& rendering, std::string& summary) {
  kills_ = false;
  if (cuda_) return emit_cuda(rendering, summary);
  // Edits everywhere in the body: the group form's simdgroup matrices.
  for (size_t k = kf_.user_first; k < kf_.user_last; ++k) {
    const std::string_view w = text(s_, t_[k]);
    if (a_.syncs[k] == Sync::MatrixType) {
      edits_[k] = {k + 1, "::coreai::group::" + std::string(w)};
    } else if (a_.syncs[k] == Sync::MatrixCall) {
      size_t first = k;
      while (first >= 2 && token_is(s_, t_, first - 1, "::")) first -= 2;
      if (w == "make_filled_simdgroup_matrix") {
        edits_[first] = {k + 1, "::coreai::group::make_filled_simdgroup_matrix"};
      } else {
        edits_[first] = {k + 2, "::coreai::group::" + std::string(w) +
                                    "(coreai_f.simd(coreai_sg), "};
      }
    } else if (w == "thread_elements" && token_is(s_, t_, k + 1, "(") &&
               token_is(s_, t_, k + 2, ")")) {
      edits_[k + 1] = {k + 3, "(coreai_lane)"};
    }
  }
  // The kernel's last statement may be an if with barriers: threads leave there.
  if (!a_.body.empty() && a_.body.back().kind == StatementKind::If &&
      a_.has_barrier(a_.body.back())) {
    kills_ = a_.uniformity(a_.body.back().head[0]) < Uniformity::Group;
  }
  out_.clear();
  if (!group_list(a_.body.data(), a_.body.size(), kf_.user_last, true)) return false;
  const std::string body = std::move(out_);

  // Inlined into the entry shim's copies of the group loop (AVX2, AVX-512).
  const std::string head =
      std::string(s_.substr(t_[kf_.start].begin, t_[kf_.start + 4].end - t_[kf_.start].begin)) +
      " [[gnu::always_inline]] inline " +
      std::string(s_.substr(t_[kf_.start + 5].begin,
                            t_[kf_.open_paren].end - t_[kf_.start + 5].begin));
  rendering = taking_the_group(head, "\n::coreai::group::frame coreai_f(coreai_g);",
                               "coreai_f.thread_at(0)", body);

  int slots = 0;
  for (Storage st : storage_) slots += st == Storage::Threads || st == Storage::Lanes;
  summary = std::to_string(loops_) + " loops over threads in " + std::to_string(regions_) +
            " regions between barriers, " + std::to_string(simd_regions_) +
            " regions over SIMD-groups, " + std::to_string(exchanges_) +
            " SIMD-group functions on the lanes' values, " + std::to_string(matrices_) +
            " simdgroup matrix statements, " + std::to_string(interchanged_) +
            " loops of a uniform trip count with the threads innermost, " +
            std::to_string(versioned_) + " loops also run without an if every thread takes, " +
            std::to_string(slots) + " values kept per thread across regions";
  return true;
}

// The steps form: the kernel keeps its name and its buffers, and takes the
// group instead of the attributes (the entry shim places nothing: the
// regions place each step's Metal thread).
bool Emitter::emit_cuda(std::string& rendering, std::string& summary) {
  for (size_t k = kf_.user_first; k < kf_.user_last; ++k) {
    if (a_.syncs[k] == Sync::MatrixCall || a_.syncs[k] == Sync::MatrixType) {
      return fail(k, "a simdgroup matrix, whose fragments are a warp's lanes");
    }
    if (t_[k].kind == TokenKind::Identifier && text(s_, t_[k]) == "return") {
      return fail(k, "a thread may return before the others");
    }
  }
  out_.clear();
  if (!group_list(a_.body.data(), a_.body.size(), kf_.user_last, true)) return false;
  // `[[kernel]] void name(` as rendered: the CUDA backend finds it by that text.
  const std::string head(
      s_.substr(t_[kf_.start].begin, t_[kf_.open_paren].end - t_[kf_.start].begin));
  rendering = taking_the_group(head,
                               "\nconst uint32_t coreai_c = ::coreai::target::cuda_thread(), "
                               "coreai_b = ::coreai::target::cuda_threads();",
                               "::coreai::target::thread_at(coreai_g, 0)", out_);
  int slots = 0;
  for (Storage st : storage_) slots += st == Storage::Threads;
  summary = std::to_string(loops_) + " loops over steps in " + std::to_string(regions_) +
            " regions between barriers, " + std::to_string(interchanged_) +
            " loops of a uniform trip count with the steps innermost, " + std::to_string(slots) +
            " values kept per step across regions";
  return true;
}

}  // namespace

const char* execution_form_name(ExecutionForm form) {
  switch (form) {
    case ExecutionForm::Loop:
      return "loop";
    case ExecutionForm::GroupLoops:
      return "group_loops";
    case ExecutionForm::Fibers:
      return "fibers";
  }
  return "?";
}

namespace {

// The group-loop form of a rendering that synchronises, for `backend`: the
// choice Fibers with the reason where there is none.
FormChoice group_loops(std::string_view rendering, Backend backend) {
  FormChoice choice;
  choice.form = ExecutionForm::Fibers;
  const std::vector<Token> tokens = tokenize(rendering, false);
  const std::optional<KernelFunction> kernel = find_kernel_function(rendering, tokens);
  if (!kernel) {
    choice.reason = "the rendering has no [[kernel]] function laid out as expected";
    return choice;
  }
  // A CUDA step runs a whole SIMD-group on a warp: its lanes are as much in
  // step as in one Metal thread per CUDA thread.
  const Analysis analysis(rendering, tokens, *kernel, backend == Backend::Cpu);
  if (!analysis.failure().empty()) {
    choice.reason = analysis.failure();
    return choice;
  }
  Emitter emitter(analysis, backend);
  if (!emitter.emit(choice.rendering, choice.summary)) {
    choice.reason = emitter.failure();
    choice.rendering.clear();
    return choice;
  }
  choice.form = ExecutionForm::GroupLoops;
  return choice;
}

}  // namespace

FormChoice choose_execution_form(std::string_view rendering, bool debug) {
  FormChoice choice;
  if (debug) {
    choice.form = ExecutionForm::Fibers;
    choice.reason = "debug mode checks every thread in fiber mode";
    return choice;
  }
  if (!needs_fibers(rendering)) return choice;
  if (!env_flag("COREAI_TORCH_CPU_GROUP_LOOPS", true)) {
    choice.form = ExecutionForm::Fibers;
    choice.reason = "COREAI_TORCH_CPU_GROUP_LOOPS=0";
    return choice;
  }
  return group_loops(rendering, Backend::Cpu);
}

FormChoice cuda_steps_form(std::string_view rendering) {
  if (!needs_fibers(rendering)) {
    FormChoice none;
    none.form = ExecutionForm::Fibers;  // no steps form: one Metal thread per CUDA thread
    none.reason = "no barrier or SIMD-group function: nothing to share between steps";
    return none;
  }
  return group_loops(rendering, Backend::Cuda);
}

void log_execution_form(const std::string& kernel, const FormChoice& choice) {
  if (!env_flag("COREAI_TORCH_CPU_FORM_LOG", false)) return;
  std::string line = "coreai_torch: kernel '" + kernel + "' runs in the CPU backend's " +
                     execution_form_name(choice.form) + " form";
  if (choice.form == ExecutionForm::GroupLoops) line += " (" + choice.summary + ")";
  if (choice.form == ExecutionForm::Fibers) line += ": " + choice.reason;
  std::fprintf(stderr, "%s\n", line.c_str());
}

}  // namespace coreai_torch::cpu
