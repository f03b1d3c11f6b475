// Checks coreai_torch::launch against the record of a registered
// specialization, through the public C++ API (csrc/coreai_torch.h):
//
//   coreai_torch_launch_checks SOURCE_FILE ENTRY
//
// SOURCE_FILE holds the buffer rendering of a kernel `scaled_add(x, y, n)`
// with float32 rank-1 tensors x, y, an int scalar n and a float32 rank-1
// result `out` (out[id] = x[id] + y[id] * n), rendered by the contract module.
// Each check prints "ok <name>" or "FAIL <name>: <why>"; the exit code is the
// number of failures.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <ATen/core/grad_mode.h>

#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>

#include "coreai_torch.h"

namespace {

int failures = 0;

void report(const std::string& name, bool ok, const std::string& why = "") {
  std::cout << (ok ? "ok " : "FAIL ") << name << (ok ? "" : ": " + why) << "\n";
  if (!ok) ++failures;
}

// `call` must throw `Error` with a message that contains every one of `parts`.
template <class Error>
void expect_refusal(const std::string& name, const std::function<void()>& call,
                    std::initializer_list<std::string> parts) {
  try {
    call();
  } catch (const Error& e) {
    const std::string message = e.msg();
    for (const std::string& part : parts) {
      if (message.find(part) == std::string::npos) {
        report(name, false, "message lacks '" + part + "': " + message);
        return;
      }
    }
    report(name, true);
    return;
  } catch (const c10::Error& e) {
    report(name, false, std::string("wrong exception type: ") + e.what());
    return;
  }
  report(name, false, "the launch was not refused");
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

int main(int argc, char** argv) {
  using coreai_torch::ArgKind;
  if (argc != 3) {
    std::cerr << "usage: coreai_torch_launch_checks SOURCE_FILE ENTRY\n";
    return 2;
  }
  coreai_torch::KernelSpec spec;
  spec.name = "scaled_add";
  spec.source = read_file(argv[1]);
  spec.entry = argv[2];
  spec.inputs = {{"x", ArgKind::Tensor, at::kFloat, 1},
                 {"y", ArgKind::Tensor, at::kFloat, 1},
                 {"n", ArgKind::Int}};
  spec.results = {{"out", ArgKind::Tensor, at::kFloat, 1}};
  spec.thread_attrs = {"thread_position_in_grid"};
  const int64_t handle = coreai_torch::register_kernel(spec);

  const at::Tensor x = at::arange(8, at::kFloat), y = at::ones({8}, at::kFloat);
  auto launch = [&](const at::Tensor& a, const at::Tensor& b, const c10::Scalar& n,
                    std::vector<int64_t> grid = {8, 1, 1}) {
    return coreai_torch::launch(handle, {a, b}, {n}, grid, {8, 1, 1}, {8});
  };

  // A launch that matches the record runs, with the kernel's numbers.
  const at::Tensor out = launch(x, y, 3)[0];
  report("matching launch", at::equal(out, x + y * 3));

  expect_refusal<c10::ValueError>("wrong rank", [&] { launch(x.reshape({2, 4}), y, 3); },
                                  {"kernel 'scaled_add'", "input 'x'", "rank 2", "rank 1"});
  expect_refusal<c10::TypeError>("wrong dtype", [&] { launch(x, y.to(at::kInt), 3); },
                                 {"kernel 'scaled_add'", "input 'y'", "int32", "float32"});
  expect_refusal<c10::ValueError>(
      "wrong device", [&] { launch(x, at::ones({8}, at::TensorOptions().device(at::kMeta)), 3); },
      {"kernel 'scaled_add'", "input 'y'", "one device"});
  expect_refusal<c10::TypeError>("float for an int scalar", [&] { launch(x, y, 2.5); },
                                 {"kernel 'scaled_add'", "input 'n'", "int parameter"});
  expect_refusal<c10::TypeError>("bool for an int scalar", [&] { launch(x, y, true); },
                                 {"kernel 'scaled_add'", "input 'n'", "int parameter"});
  expect_refusal<c10::ValueError>("int outside Metal's int", [&] { launch(x, y, int64_t{1} << 31); },
                                  {"kernel 'scaled_add'", "input 'n'", "32-bit int"});
  expect_refusal<c10::ValueError>("grid entry of 2^32",
                                  [&] { launch(x, y, 3, {int64_t{1} << 32, 1, 1}); },
                                  {"kernel 'scaled_add'", "threads_per_grid", "2^32 - 1"});
  expect_refusal<c10::ValueError>(
      "missing tensor", [&] { coreai_torch::launch(handle, {x}, {3}, {8, 1, 1}, {8, 1, 1}, {8}); },
      {"kernel 'scaled_add'", "expected 2 tensor inputs"});

  // Through the dispatcher, the op's Autograd kernel refuses inputs that
  // require grad (the op has no derivative) and passes every other call on.
  const auto op = c10::Dispatcher::singleton()
                      .findSchemaOrThrow("coreai_torch::launch", "")
                      .typed<std::vector<at::Tensor>(int64_t, at::TensorList,
                                                     c10::ArrayRef<c10::Scalar>, at::IntArrayRef,
                                                     at::IntArrayRef, at::IntArrayRef)>();
  const std::vector<c10::Scalar> three{3};
  const std::vector<int64_t> grid{8, 1, 1}, shape{8};
  const at::Tensor leaf = x.clone().requires_grad_();
  try {
    op.call(handle, {leaf, y}, three, grid, grid, shape);
    report("dispatcher: input requiring grad", false, "the launch was not refused");
  } catch (const c10::Error& e) {
    const std::string message = e.msg();
    const bool named = message.find("kernel 'scaled_add'") != std::string::npos &&
                       message.find("no derivative") != std::string::npos &&
                       message.find("tensor argument 0 requires grad") != std::string::npos;
    report("dispatcher: input requiring grad", named, "message: " + message);
  }
  {
    at::NoGradGuard no_grad;
    const at::Tensor plain = op.call(handle, {leaf, y}, three, grid, grid, shape)[0];
    report("dispatcher: same inputs under at::NoGradGuard",
           at::equal(plain, x + y * 3) && !plain.requires_grad());
  }

  coreai_torch::release_kernel(handle);
  expect_refusal<c10::ValueError>("released handle", [&] { launch(x, y, 3); },
                                  {"unknown kernel handle"});
  return failures;
}
