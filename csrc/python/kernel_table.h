// A TorchMetalKernel's specializations, and the launch of a call from Python.
//
// The table is where a kernel's calls find what to launch: the registered
// specializations (records of the store, specializations/store.cpp) of the
// kernel, keyed by what a call fixes (tensor dtypes and ranks, result ranks,
// option bits). A call that finds none registers one in one step that asks
// Python once (`describe`: torch_defn's result dtypes and the rendering, as
// a named Registration). Every eager launch from Python goes through
// `launch`, which offers it to the launch hook when one is set
// (coreai_torch.set_launch_hook).
#pragma once

#include <torch/extension.h>

#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "coreai_torch.h"
#include "python/call_args.h"

namespace coreai_torch {

struct TableEntry {
  int64_t options = 0;
  std::vector<at::ScalarType> input_dtypes;  // per tensor input
  std::vector<int64_t> input_ranks;
  std::vector<int64_t> result_ranks;
  int64_t handle = 0;
  std::shared_ptr<const KernelRecord> record;
};

// The route a launched call took (docs/internals.md §1).
enum class Route { Direct, Op };

class KernelTable {
 public:
  KernelTable(CallSignature signature, ReturnKind return_kind);
  KernelTable(const KernelTable&) = delete;
  KernelTable& operator=(const KernelTable&) = delete;
  ~KernelTable();  // gives back the store's handles

  const CallSignature& signature() const { return signature_; }
  ReturnKind return_kind() const { return return_kind_; }

  // The registered specialization a call selects, or nullptr.
  const TableEntry* find(int64_t options, const Call& call) const;

  // The specialization a call selects, registered first if it is new:
  // `describe(kernel, inputs, result_shapes, options)` gives its Registration.
  const TableEntry& find_or_register(PyObject* kernel, int64_t options, const Call& call,
                                     PyObject* inputs, PyObject* result_shapes);

  // Launches `call` of `entry` (through the launch hook, if one is set) and
  // returns the results shaped as torch_defn returns them (a new reference).
  // The arguments as given are what the hook sees.
  PyObject* launch(PyObject* kernel, const TableEntry& entry, Call& call, PyObject* inputs,
                   PyObject* grid, PyObject* group, PyObject* result_shapes, Route route) const;

  // The results of a launch, as torch_defn returns them.
  PyObject* shaped(std::vector<at::Tensor> outs) const;

  std::vector<int64_t> handles() const;

 private:
  CallSignature signature_;
  ReturnKind return_kind_;
  // A deque never moves its elements: a launch running without the GIL keeps
  // a valid reference while another thread adds a specialization.
  std::deque<TableEntry> entries_;
  mutable std::mutex add_mutex_;
};

// What the Python front end gives once (_C._install): the kernels active
// under each name, the modes module, torch.compiler, the compile error
// translation, `describe` and the reference run of a call.
struct FrontEnd {
  PyObject* active = nullptr;
  PyObject* modes = nullptr;
  PyObject* compiler = nullptr;
  PyObject* reraise = nullptr;
  PyObject* describe = nullptr;
  PyObject* reference = nullptr;
  PyObject* hook = nullptr;  // the launch hook, or nullptr
};
FrontEnd& front_end();

// Whether `kernel` runs its Metal source now (its execution_mode, else the
// global mode, is "kernel"); false with a Python error set if reading fails.
bool runs_kernel(PyObject* kernel);

// The table of a TorchMetalKernel object (its `table`), or nullptr with an error.
KernelTable* table_of(PyObject* kernel);

// Adds KernelTable, Launch, _install and _set_launch_hook to the module.
void add_kernel_table(pybind11::module_& m);

}  // namespace coreai_torch
