// What a kernel's optimized LLVM IR proves about the alignment of a pointer,
// for the CUDA backend's alignment rewrite (vector_alignment.h).
//
// clang gives every access through a Metal `device` or `threadgroup` pointer
// its element's alignment, and LLVM's own inference does not see through the
// address-space casts of threadgroup memory. Yet a SIMD-group matrix load
// from a threadgroup tile reads each lane's pair of halves at an even element
// of a 16-byte aligned array: the address is a multiple of four however the
// lane's row and column are computed. Such an access needs no test at run
// time. This reads the trailing zero bits of an address off the IR: a global's
// alignment, and through getelementptr, casts and integer arithmetic
// (shl, mul, and, or, add, sub, select, phi) the offsets' known zero bits.
#pragma once

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace coreai_torch::cuda {

class KnownAlignment {
 public:
  // The alignments of the module's globals (`@g = ... global ..., align N`).
  static std::map<std::string, int> global_alignments(const std::vector<std::string_view>& module);

  // For one function: its lines (the `define` line first) and the module's
  // global alignments.
  KnownAlignment(const std::vector<std::string_view>& function,
                 const std::map<std::string, int>& globals);

  // The largest power of two (up to 4096) that the pointer operand `pointer`
  // (a name or a constant expression, as written in an access) is known to
  // be a multiple of; 1 when nothing is known.
  int of_pointer(std::string_view pointer);

 private:
  // Known trailing zero bits of an operand (a pointer's or an integer's).
  int pointer_bits(std::string_view pointer);
  int integer_bits(std::string_view value);
  int element_pointer_bits(std::string_view operands);  // a getelementptr's
  int definition_bits(const std::string& name, bool pointer);
  int compute(std::string_view definition, bool pointer);

  const std::map<std::string, int>& globals_;
  std::map<std::string, std::string_view> definitions_;  // name -> what follows " = "
  std::map<std::string, int> known_;
  std::set<std::string> pending_;  // being computed (a loop leads back to them)
  std::vector<std::string> phis_;  // the phis among them, innermost last
  int optimistic_ = 0;             // how often a pending phi was assumed aligned
};

}  // namespace coreai_torch::cuda
