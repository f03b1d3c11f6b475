#include "cuda/async_copies.h"

#include "cuda/llvm_ir_text.h"

#include <optional>
#include <set>
#include <utility>

namespace coreai_torch::cuda {
namespace {

using llvm_ir::block_of_label;
using llvm_ir::instruction_of;
using llvm_ir::is_call;
using llvm_ir::is_pure_asm_call;

constexpr int kCopyBytes = 16;  // cp.async.cg moves 16 bytes
constexpr std::string_view kCopy = "@llvm.nvvm.cp.async.cg.shared.global.16(";
constexpr std::string_view kWait = "  call void @llvm.nvvm.cp.async.wait.all()\n";
constexpr std::string_view kDeclarations =
    "declare void @llvm.nvvm.cp.async.cg.shared.global.16(ptr addrspace(3), ptr addrspace(1))\n"
    "declare void @llvm.nvvm.cp.async.wait.all()\n";
// How many definitions an address is followed back through.
constexpr int kTraceDepth = 16;

bool is_async_copy(std::string_view instruction) {
  return is_call(instruction) && instruction.find(kCopy) != std::string_view::npos;
}

// Whether the instruction may write memory: a store, an atomic, a fence or
// a call that is not pure assembly.
bool writes_memory(std::string_view instruction) {
  for (std::string_view op : {"store ", "atomicrmw ", "cmpxchg ", "fence "}) {
    if (instruction.substr(0, op.size()) == op) return true;
  }
  return is_call(instruction) && !is_pure_asm_call(instruction);
}

// Whether a thread with copies in flight must wait for them before the
// instruction: it may read or write memory, synchronise or leave.
bool needs_copies_done(std::string_view instruction) {
  if (instruction.substr(0, 5) == "load " || instruction.substr(0, 4) == "ret " ||
      instruction == "ret" || instruction.substr(0, 11) == "unreachable") {
    return true;
  }
  return writes_memory(instruction) && !is_async_copy(instruction);
}

// A function's values, where each is defined and what reads it.
class FunctionValues {
 public:
  explicit FunctionValues(const std::vector<std::string_view>& lines)
      : lines_(lines), values_(llvm_ir::value_lines(lines)) {
    // The kernel entry's pointer parameters, but those passed by value (the
    // metadata and dispatch blocks, in parameter space): device buffers.
    const std::string_view define = lines.front();
    const size_t open = define.find('(');
    const size_t close = define.rfind(')');
    if (open != std::string_view::npos && close != std::string_view::npos && close > open) {
      for (std::string_view p : llvm_ir::operands_of(define.substr(open + 1, close - open - 1))) {
        const size_t name = p.rfind(" %");
        if (p.substr(0, 4) == "ptr " && p.find("byval") == std::string_view::npos &&
            name != std::string_view::npos) {
          buffers_.insert(std::string(p.substr(name + 1)));
        }
      }
    }
  }

  const std::vector<size_t>& uses(const std::string& name) const {
    static const std::vector<size_t> none;
    auto found = values_.uses.find(name);
    return found == values_.uses.end() ? none : found->second;
  }

  // Whether the pointer operand is an element of a kernel buffer (device memory).
  bool in_buffer(std::string_view pointer, int depth = 0) const {
    if (buffers_.count(std::string(pointer)) != 0) return true;
    std::optional<std::string_view> base = element_base(pointer, depth);
    return base && in_buffer(*base, depth + 1);
  }

  // Whether the pointer operand is an element of a threadgroup array.
  bool in_threadgroup_array(std::string_view pointer, int depth = 0) const {
    constexpr std::string_view kShared = "addrspacecast (ptr addrspace(3) @";
    if (pointer.substr(0, kShared.size()) == kShared) return true;
    std::optional<std::string_view> base = element_base(pointer, depth);
    return base && in_threadgroup_array(*base, depth + 1);
  }

 private:
  // The base of a getelementptr that defines `pointer` (its own pointer
  // operand, without the type), or nullopt.
  std::optional<std::string_view> element_base(std::string_view pointer, int depth) const {
    if (depth == kTraceDepth) return std::nullopt;
    auto found = values_.definition.find(std::string(pointer));
    if (found == values_.definition.end()) return std::nullopt;
    std::string_view gep = instruction_of(lines_[found->second]);
    constexpr std::string_view kGep = "getelementptr ";
    if (gep.substr(0, kGep.size()) != kGep) return std::nullopt;
    gep.remove_prefix(kGep.size());
    if (gep.substr(0, 9) == "inbounds ") gep.remove_prefix(9);
    const std::vector<std::string_view> parts = llvm_ir::operands_of(gep);
    if (parts.size() < 2 || parts[1].substr(0, 4) != "ptr ") return std::nullopt;
    return parts[1].substr(4);
  }

  const std::vector<std::string_view>& lines_;
  const llvm_ir::ValueLines values_;
  std::set<std::string> buffers_;
};

// A function's blocks: where each starts, and its successors.
struct Block {
  size_t first = 0;  // its first line (the label's, or the define's for the entry)
  size_t end = 0;    // one past its last line
  std::vector<size_t> successors;
};

std::vector<Block> blocks_of(const std::vector<std::string_view>& lines) {
  std::vector<Block> blocks{Block{}};
  std::map<std::string, size_t> index;
  for (size_t i = 1; i < lines.size(); ++i) {
    if (std::string label = block_of_label(lines[i]); !label.empty()) {
      blocks.back().end = i;
      index[label] = blocks.size();
      blocks.push_back(Block{i, 0, {}});
    }
  }
  blocks.back().end = lines.size();
  // Only terminators name blocks as labels.
  for (Block& b : blocks) {
    for (size_t i = b.first; i < b.end; ++i) {
      for (size_t at = lines[i].find("label %"); at != std::string_view::npos;
           at = lines[i].find("label %", at + 1)) {
        size_t end = at + 7;
        while (end < lines[i].size() && llvm_ir::is_name_char(lines[i][end])) ++end;
        auto found = index.find(std::string(lines[i].substr(at + 6, end - at - 6)));
        if (found != index.end()) b.successors.push_back(found->second);
      }
    }
  }
  return blocks;
}

// Block `b` entered with copies in flight or not: whether it leaves with
// some. With `out`, its lines are written there, with a wait before each
// instruction that needs the thread's copies done while some are in flight.
// (A label or `define` line is neither a copy nor such an instruction.)
bool pass_block(const std::vector<std::string_view>& lines, const Block& b, bool in_flight,
                std::string* out) {
  for (size_t i = b.first; i < b.end; ++i) {
    const std::string_view instruction = instruction_of(lines[i]);
    if (is_async_copy(instruction)) {
      in_flight = true;
    } else if (needs_copies_done(instruction)) {
      if (in_flight && out != nullptr) *out += kWait;
      in_flight = false;
    }
    if (out != nullptr) {
      *out += lines[i];
      *out += '\n';
    }
  }
  return in_flight;
}

// One function with its waits: each block is entered with copies in flight
// if any predecessor may leave with some (a fixed point over the blocks).
void wait_in_function(const std::vector<std::string_view>& lines, std::string& out) {
  const std::vector<Block> blocks = blocks_of(lines);
  std::vector<bool> entered(blocks.size(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t b = 0; b < blocks.size(); ++b) {
      if (!pass_block(lines, blocks[b], entered[b], nullptr)) continue;
      for (size_t s : blocks[b].successors) {
        if (!entered[s]) entered[s] = changed = true;
      }
    }
  }
  for (size_t b = 0; b < blocks.size(); ++b) pass_block(lines, blocks[b], entered[b], &out);
}

}  // namespace

std::map<size_t, AsyncCopy> find_async_copies(const std::vector<std::string_view>& lines,
                                              KnownAlignment& known) {
  std::map<size_t, AsyncCopy> copies;
  if (lines.empty() || lines.front().find("@coreai_cuda_kernel(") == std::string_view::npos) {
    return copies;
  }
  const FunctionValues values(lines);
  for (size_t i = 1; i < lines.size(); ++i) {
    std::optional<Access> load = parse_access(lines[i]);
    if (!load || load->store || load->type.bytes != kCopyBytes ||
        (!load->space.empty() && load->space != " addrspace(1)")) {
      continue;
    }
    const std::vector<size_t>& uses = values.uses(load->result);
    if (uses.size() != 1 || uses[0] <= i) continue;
    const size_t at = uses[0];
    std::optional<Access> store = parse_access(lines[at]);
    if (!store || !store->store || store->value != load->result ||
        store->type.bytes != kCopyBytes ||
        (!store->space.empty() && store->space != " addrspace(3)")) {
      continue;
    }
    // The load moves down to the store: nothing between them may start a
    // block or write memory.
    bool clear = true;
    for (size_t j = i + 1; j < at && clear; ++j) {
      clear = block_of_label(lines[j]).empty() && !writes_memory(instruction_of(lines[j]));
    }
    if (!clear || !values.in_buffer(load->pointer) ||
        !values.in_threadgroup_array(store->pointer) ||
        std::max(store->align, known.of_pointer(store->pointer)) < kCopyBytes) {
      continue;
    }
    const bool aligned = std::max(load->align, known.of_pointer(load->pointer)) >= kCopyBytes;
    copies[i] = AsyncCopy{std::move(*load), std::move(*store), at, aligned};
  }
  return copies;
}

std::string async_copy(const AsyncCopy& copy, const std::string& id) {
  const std::string join = "%" + id + ".join";
  const Access& from = copy.load;
  const Access& to = copy.store;
  std::string v;
  if (copy.source_aligned) {
    v += "  br label %" + id + ".async\n";
  } else {
    v += "  %" + id + ".address = ptrtoint ptr" + from.space + " " + from.pointer + " to i64\n";
    v += "  %" + id + ".low = and i64 %" + id + ".address, " + std::to_string(kCopyBytes - 1) +
         "\n";
    v += "  %" + id + ".aligned = icmp eq i64 %" + id + ".low, 0\n";
    v += "  br i1 %" + id + ".aligned, label %" + id + ".async, label %" + id + ".sync\n";
  }
  v += id + ".async:\n";
  std::string global = from.pointer, shared = to.pointer;
  if (from.space.empty()) {
    global = "%" + id + ".global";
    v += "  " + global + " = addrspacecast ptr " + from.pointer + " to ptr addrspace(1)\n";
  }
  if (to.space.empty()) {
    shared = "%" + id + ".shared";
    v += "  " + shared + " = addrspacecast ptr " + to.pointer + " to ptr addrspace(3)\n";
  }
  v += "  call void " + std::string(kCopy) + "ptr addrspace(3) " + shared + ", ptr addrspace(1) " +
       global + ")\n";
  v += "  br label " + join + "\n";
  if (!copy.source_aligned) {
    v += id + ".sync:\n";
    Access load = from, store = to;
    load.result = store.value = "%" + id + ".value";
    v += access_line(load, load.align);
    v += access_line(store, kCopyBytes);
    v += "  br label " + join + "\n";
  }
  v += id + ".join:\n";
  return v;
}

std::string wait_for_async_copies(const std::string& ir) {
  std::string out;
  out.reserve(ir.size() + 4096);
  llvm_ir::rewrite_functions(llvm_ir::lines_of(ir), out,
                             [&](const std::vector<std::string_view>& body, std::string& to) {
                               wait_in_function(body, to);
                             });
  out += '\n';
  out += kDeclarations;
  return out;
}

}  // namespace coreai_torch::cuda
