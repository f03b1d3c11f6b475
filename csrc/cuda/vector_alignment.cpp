#include "cuda/vector_alignment.h"

#include "cuda/async_copies.h"
#include "cuda/known_alignment.h"
#include "cuda/llvm_ir_text.h"
#include "cuda/vector_access.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace coreai_torch::cuda {
namespace {

using llvm_ir::block_of_label;
using llvm_ir::lines_of;

// The entry block's name: unnamed, it takes the number after the unnamed
// parameters (%0, %1 ... then the block).
std::string entry_block(std::string_view define) {
  const size_t open = define.find('(');
  const size_t close = define.rfind(')');
  int unnamed = 0;
  for (size_t i = open; open != std::string_view::npos && i + 1 < close; ++i) {
    if (define[i] != ' ' || define[i + 1] != '%') continue;
    size_t j = i + 2;
    while (j < define.size() && std::isdigit(static_cast<unsigned char>(define[j])) != 0) ++j;
    if (j > i + 2 && j < define.size() && (define[j] == ',' || define[j] == ')')) ++unnamed;
  }
  return "%" + std::to_string(unnamed);
}

// The access, tested: a branch on the address's low bits to one vector access
// of the full alignment or to the access as it was, which the code generator
// splits into element accesses; a load's value joins in a phi. The block is
// split there: what follows the access, its terminator included, is now in
// the block `%<id>.join`.
std::string versioned(const Access& a, const std::string& id) {
  const std::string ptr = "ptr" + a.space + " " + a.pointer;
  const std::string& t = a.type.spelling;
  const int gain = gain_of(a);
  std::string v;
  v += "  %" + id + ".address = ptrtoint " + ptr + " to i64\n";
  v += "  %" + id + ".low = and i64 %" + id + ".address, " + std::to_string(gain - 1) + "\n";
  v += "  %" + id + ".aligned = icmp eq i64 %" + id + ".low, 0\n";
  v += "  br i1 %" + id + ".aligned, label %" + id + ".whole, label %" + id + ".elements\n";
  for (const char* path : {"whole", "elements"}) {
    const int align = std::string(path) == "whole" ? gain : a.align;
    v += id + "." + path + ":\n";
    if (a.store) {
      v += "  store " + t + " " + a.value + ", " + ptr;
    } else {
      v += "  %" + id + "." + path + ".value = load " + t + ", " + ptr;
    }
    v += ", align " + std::to_string(align) + a.metadata + "\n";
    v += "  br label %" + id + ".join\n";
  }
  v += id + ".join:\n";
  if (!a.store) {
    v += "  " + a.result + " = phi " + t + " [ %" + id + ".whole.value, %" + id + ".whole ], [ %" +
         id + ".elements.value, %" + id + ".elements ]\n";
  }
  return v;
}

// A function's lines with its under-aligned vector accesses versioned, or
// given their full alignment where the IR proves it (known_alignment.h);
// `out.count`, `out.proven` and `out.async` grow by their numbers. The entry
// block is not split where it holds allocas (split, the allocas after the
// split would no longer be static): no access there is tested and no copy
// made asynchronous.
void version_function(const std::vector<std::string_view>& lines,
                      const std::map<std::string, int>& globals, bool async_copies,
                      VersionedVectors& out) {
  KnownAlignment known(lines, globals);
  const std::string entry = entry_block(lines.front());
  bool entry_has_allocas = false;
  size_t entry_end = 1;  // one past the entry block's last line
  for (; entry_end < lines.size() && block_of_label(lines[entry_end]).empty(); ++entry_end) {
    if (lines[entry_end].find(" = alloca ") != std::string_view::npos) entry_has_allocas = true;
  }
  std::map<size_t, AsyncCopy> copies;
  std::map<size_t, size_t> copy_at;  // a copy's store line -> its load line
  if (async_copies) copies = find_async_copies(lines, known);
  if (entry_has_allocas) copies.erase(copies.begin(), copies.lower_bound(entry_end));
  for (const auto& [load, copy] : copies) copy_at[copy.store_line] = load;
  std::string block = entry;  // the current block, as it was named
  std::string current = entry;  // where its code after the last split goes
  std::vector<std::pair<std::string, std::string>> moved;  // block -> its terminator's block
  std::string body;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string_view line = lines[i];
    if (std::string label = block_of_label(line); !label.empty()) {
      if (current != block) moved.emplace_back(block, current);
      block = current = label;
    }
    if (auto copy = copies.find(i); copy != copies.end()) {
      // Written with its store, below. Numbered values must stay in order:
      // the number keeps an unused definition here.
      const std::string& result = copy->second.load.result;
      if (std::isdigit(static_cast<unsigned char>(result[1])) != 0) {
        body += "  " + result + " = freeze " + copy->second.load.type.spelling + " poison\n";
      }
      continue;
    }
    if (auto copy = copy_at.find(i); copy != copy_at.end()) {
      const std::string id = "coreai.copy" + std::to_string(out.async++);
      body += async_copy(copies.at(copy->second), id);
      current = "%" + id + ".join";
      continue;
    }
    std::optional<Access> a = i == 0 ? std::nullopt : parse_access(line);
    if (a && a->align < gain_of(*a) && known.of_pointer(a->pointer) >= gain_of(*a)) {
      body += access_line(*a, gain_of(*a));
      ++out.proven;
      continue;
    }
    if (a && a->align < gain_of(*a) && !(block == entry && entry_has_allocas)) {
      const std::string id = "coreai.vector" + std::to_string(out.count++);
      body += versioned(*a, id);
      current = "%" + id + ".join";
      continue;
    }
    body += line;
    body += '\n';
  }
  if (current != block) moved.emplace_back(block, current);
  if (moved.empty()) {
    out.ir += body;
    return;
  }
  // A block whose terminator moved is no longer its successors' predecessor:
  // the block that took the terminator is.
  for (std::string_view line : lines_of(body)) {
    if (line.find(" = phi ") != std::string_view::npos) {
      std::string phi(line);
      for (const auto& [from, to] : moved) {
        const std::string was = ", " + from + " ]";
        const std::string now = ", " + to + " ]";
        for (size_t at = phi.find(was); at != std::string::npos; at = phi.find(was, at + now.size())) {
          phi.replace(at, was.size(), now);
        }
      }
      out.ir += phi;
    } else {
      out.ir += line;
    }
    out.ir += '\n';
  }
}

}  // namespace

VersionedVectors version_underaligned_vectors(const std::string& ir, bool async_copies) {
  VersionedVectors out;
  out.ir.reserve(ir.size() + 4096);
  const std::vector<std::string_view> lines = lines_of(ir);
  const std::map<std::string, int> globals = KnownAlignment::global_alignments(lines);
  llvm_ir::rewrite_functions(lines, out.ir,
                             [&](const std::vector<std::string_view>& body, std::string&) {
                               version_function(body, globals, async_copies, out);
                             });
  if (out.async > 0) out.ir = wait_for_async_copies(out.ir);
  return out;
}

}  // namespace coreai_torch::cuda
