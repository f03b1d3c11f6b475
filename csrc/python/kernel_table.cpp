#include "python/kernel_table.h"

#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>
#include <string>

#include "specializations/launch_args.h"

namespace coreai_torch {
namespace {

namespace py = pybind11;

// Launches of fewer threads take microseconds: they keep the GIL, since
// releasing and retaking it would be a sizeable share of the call. Launches
// that compile first release it too.
constexpr double kReleaseGilThreads = 1 << 16;

std::vector<at::Tensor> run_launch(const KernelRecord& record, int64_t handle, Call& call) {
  const at::Device device = call.tensors.empty() ? at::Device(at::kCPU) : call.tensors[0].device();
  // A CUDA launch only enqueues the kernel: it keeps the GIL whatever its size.
  const bool small = device.is_cuda() || static_cast<double>(call.grid[0]) *
                                                 static_cast<double>(call.grid[1]) *
                                                 static_cast<double>(call.grid[2]) <
                                             kReleaseGilThreads;
  if (small && record.artifacts.ready(device)) {
    return launch_record(handle, record, call.tensors, call.scalars, call.grid, call.group,
                         call.shapes, LaunchChecks::AfterMatch);
  }
  py::gil_scoped_release no_gil;
  return launch_record(handle, record, call.tensors, call.scalars, call.grid, call.group,
                       call.shapes, LaunchChecks::AfterMatch);
}

// One launch as the launch hook sees it; `run()` performs it, once.
struct Launch {
  py::object kernel, inputs, threads_per_grid, threads_per_thread_group, result_shapes;
  int64_t handle = 0;
  std::string device;
  const char* route = "";
  const KernelTable* table = nullptr;
  std::shared_ptr<const KernelRecord> record;
  Call call;
  bool ran = false;

  py::object run() {
    TORCH_CHECK(!ran, "kernel '", record->name, "': a Launch runs once");
    ran = true;
    return py::reinterpret_steal<py::object>(table->shaped(run_launch(*record, handle, call)));
  }

  // register_kernel's arguments for this specialization, in its order.
  py::tuple registration() const {
    const auto dtype = [](at::ScalarType t) {
      return py::reinterpret_borrow<py::object>(
          reinterpret_cast<PyObject*>(torch::getTHPDtype(t)));
    };
    py::list input_names, input_dtypes, input_ranks, result_names, result_dtypes, result_ranks;
    for (const ArgSpec& a : record->inputs) {
      input_names.append(a.name);
      if (a.kind != ArgKind::Tensor) continue;
      input_dtypes.append(dtype(a.dtype));
      input_ranks.append(a.rank);
    }
    for (const ArgSpec& r : record->results) {
      result_names.append(r.name);
      result_dtypes.append(dtype(r.dtype));
      result_ranks.append(r.rank);
    }
    return py::make_tuple(record->name, record->source, record->entry, input_names,
                          record->arg_kinds, input_dtypes, input_ranks, result_names,
                          result_dtypes, result_ranks, py::cast(record->thread_attrs),
                          record->options);
  }
};

std::vector<std::string> strings(PyObject* obj, const char* what) {
  return py::cast<std::vector<std::string>>(py::handle(obj).attr(what));
}

// The KernelSpec of a Registration (coreai_torch.contract.Registration).
KernelSpec spec_of(py::handle r) {
  KernelSpec spec;
  spec.name = py::cast<std::string>(r.attr("name"));
  spec.source = py::cast<std::string>(r.attr("source"));
  spec.entry = py::cast<std::string>(r.attr("entry"));
  const auto input_names = strings(r.ptr(), "input_names");
  const auto arg_kinds = py::cast<std::string>(r.attr("arg_kinds"));
  const py::list input_dtypes = r.attr("input_dtypes");
  const auto input_ranks = py::cast<std::vector<int64_t>>(r.attr("input_ranks"));
  size_t next_tensor = 0;
  for (size_t i = 0; i < input_names.size(); ++i) {
    ArgSpec arg{input_names[i], static_cast<ArgKind>(arg_kinds.at(i))};
    if (arg.kind == ArgKind::Tensor) {
      arg.dtype = reinterpret_cast<THPDtype*>(input_dtypes[next_tensor].ptr())->scalar_type;
      arg.rank = input_ranks.at(next_tensor++);
    }
    spec.inputs.push_back(std::move(arg));
  }
  const auto result_names = strings(r.ptr(), "result_names");
  const py::list result_dtypes = r.attr("result_dtypes");
  const auto result_ranks = py::cast<std::vector<int64_t>>(r.attr("result_ranks"));
  for (size_t k = 0; k < result_names.size(); ++k) {
    spec.results.push_back({result_names[k], ArgKind::Tensor,
                            reinterpret_cast<THPDtype*>(result_dtypes[k].ptr())->scalar_type,
                            result_ranks.at(k)});
  }
  spec.thread_attrs = strings(r.ptr(), "thread_attrs");
  spec.options = py::cast<int64_t>(r.attr("options"));
  return spec;
}

}  // namespace

FrontEnd& front_end() {
  static FrontEnd installed;
  return installed;
}

KernelTable::KernelTable(CallSignature signature, ReturnKind return_kind)
    : signature_(std::move(signature)), return_kind_(return_kind) {}

KernelTable::~KernelTable() {
  for (const TableEntry& e : entries_) release_kernel(e.handle);
}

const TableEntry* KernelTable::find(int64_t options, const Call& call) const {
  for (const TableEntry& e : entries_) {
    bool match = e.options == options &&
                 std::equal(e.result_ranks.begin(), e.result_ranks.end(), call.ranks.begin(),
                            call.ranks.end());
    for (size_t j = 0; match && j < call.tensors.size(); ++j) {
      match = call.tensors[j].scalar_type() == e.input_dtypes[j] &&
              call.tensors[j].dim() == e.input_ranks[j];
    }
    if (match) return &e;
  }
  return nullptr;
}

const TableEntry& KernelTable::find_or_register(PyObject* kernel, int64_t options,
                                                const Call& call, PyObject* inputs,
                                                PyObject* result_shapes) {
  if (const TableEntry* e = find(options, call)) return *e;
  py::object options_obj = py::int_(options);
  py::object registration = py::reinterpret_steal<py::object>(PyObject_CallFunctionObjArgs(
      front_end().describe, kernel, inputs, result_shapes, options_obj.ptr(), nullptr));
  if (!registration) throw py::error_already_set();
  KernelSpec spec = spec_of(registration);
  TORCH_CHECK(spec.options == options && spec.inputs.size() == signature_.inputs.size() &&
                  spec.results.size() == signature_.results.size(),
              "kernel '", signature_.kernel,
              "': describe returned a registration of another signature");
  const int64_t handle = register_kernel(std::move(spec));
  std::lock_guard<std::mutex> lock(add_mutex_);
  // Another thread may have registered it meanwhile: the store gave both the
  // same handle; one entry keeps it.
  if (const TableEntry* e = find(options, call)) {
    release_kernel(handle);
    return *e;
  }
  TableEntry e;
  e.options = options;
  e.record = kernel_record(handle);
  for (const ArgSpec& arg : e.record->inputs) {
    if (arg.kind != ArgKind::Tensor) continue;
    e.input_dtypes.push_back(arg.dtype);
    e.input_ranks.push_back(arg.rank);
  }
  for (const ArgSpec& res : e.record->results) e.result_ranks.push_back(res.rank);
  e.handle = handle;
  entries_.push_back(std::move(e));
  return entries_.back();
}

PyObject* KernelTable::shaped(std::vector<at::Tensor> outs) const {
  if (return_kind_ == ReturnKind::Tensor) return THPVariable_Wrap(std::move(outs[0]));
  const bool tuple = return_kind_ == ReturnKind::Tuple;
  const auto n = static_cast<Py_ssize_t>(outs.size());
  PyObject* result = tuple ? PyTuple_New(n) : PyList_New(n);
  if (result == nullptr) return nullptr;
  for (Py_ssize_t k = 0; k < n; ++k) {
    PyObject* item = THPVariable_Wrap(std::move(outs[k]));
    if (item == nullptr) {
      Py_DECREF(result);
      return nullptr;
    }
    if (tuple) {
      PyTuple_SET_ITEM(result, k, item);
    } else {
      PyList_SET_ITEM(result, k, item);
    }
  }
  return result;
}

PyObject* KernelTable::launch(PyObject* kernel, const TableEntry& entry, Call& call,
                              PyObject* inputs, PyObject* grid, PyObject* group,
                              PyObject* result_shapes, Route route) const {
  std::shared_ptr<const KernelRecord> record = entry.record;  // held for the launch
  PyObject* hook = front_end().hook;
  if (hook == nullptr) return shaped(run_launch(*record, entry.handle, call));
  auto pending = std::make_unique<Launch>();
  pending->kernel = py::reinterpret_borrow<py::object>(kernel);
  pending->inputs = py::reinterpret_borrow<py::object>(inputs);
  pending->threads_per_grid = py::reinterpret_borrow<py::object>(grid);
  pending->threads_per_thread_group = py::reinterpret_borrow<py::object>(group);
  pending->result_shapes = py::reinterpret_borrow<py::object>(result_shapes);
  pending->handle = entry.handle;
  pending->device =
      call.tensors.empty() ? std::string("cpu") : call.tensors[0].device().str();
  pending->route = route == Route::Direct ? "direct" : "op";
  pending->table = this;
  pending->record = std::move(record);
  pending->call = std::move(call);
  py::object event = py::cast(std::move(pending));
  return PyObject_CallOneArg(hook, event.ptr());
}

std::vector<int64_t> KernelTable::handles() const {
  std::lock_guard<std::mutex> lock(add_mutex_);
  std::vector<int64_t> out;
  for (const TableEntry& e : entries_) out.push_back(e.handle);
  return out;
}

bool runs_kernel(PyObject* kernel) {
  static PyObject* execution_mode = PyUnicode_InternFromString("execution_mode");
  static PyObject* global = PyUnicode_InternFromString("_mode");
  static PyObject* kernel_mode = PyUnicode_InternFromString("kernel");
  PyObject* mode = PyObject_GetAttr(kernel, execution_mode);
  if (mode == nullptr) return false;
  if (mode == Py_None) {
    Py_DECREF(mode);
    mode = PyObject_GetAttr(front_end().modes, global);
    if (mode == nullptr) return false;
  }
  const bool yes = PyUnicode_Check(mode) && PyUnicode_Compare(mode, kernel_mode) == 0;
  Py_DECREF(mode);
  return yes;
}

KernelTable* table_of(PyObject* kernel) {
  static PyObject* name = PyUnicode_InternFromString("table");
  // Read from the object directly when it is exactly a KernelTable: py::cast
  // would look its type up in pybind11's registry by std::type_index, about 5%
  // of a 16-element call.
  static PyTypeObject* exact_type =
      reinterpret_cast<PyTypeObject*>(py::type::of<KernelTable>().ptr());
  PyObject* table = PyObject_GetAttr(kernel, name);
  if (table == nullptr) return nullptr;
  KernelTable* out =
      Py_TYPE(table) == exact_type
          ? reinterpret_cast<py::detail::instance*>(table)
                ->get_value_and_holder()
                .value_ptr<KernelTable>()
          : py::cast<KernelTable*>(py::handle(table));
  Py_DECREF(table);
  return out;
}

void add_kernel_table(py::module_& m) {
  py::class_<KernelTable>(m, "KernelTable",
                          "A kernel's specializations and the launch of its calls "
                          "(csrc/python/kernel_table.h).")
      .def(py::init([](std::string kernel, std::vector<std::string> inputs, std::string arg_kinds,
                       std::vector<std::string> results, int return_kind) {
             TORCH_CHECK_VALUE(return_kind >= 0 && return_kind <= 2, "bad return kind ",
                               return_kind);
             TORCH_CHECK_VALUE(arg_kinds.size() == inputs.size(), "one argument kind per input");
             for (char c : arg_kinds) {
               TORCH_CHECK_VALUE(arg_kind(c).has_value(), "bad argument kind '", c, "'");
             }
             return std::make_unique<KernelTable>(
                 CallSignature{std::move(kernel), std::move(inputs), std::move(arg_kinds),
                               std::move(results)},
                 static_cast<ReturnKind>(return_kind));
           }),
           py::arg("kernel"), py::arg("inputs"), py::arg("arg_kinds"), py::arg("results"),
           py::arg("return_kind"))
      .def(
          "check",
          [](const KernelTable& t, py::tuple inputs, py::handle grid, py::handle group,
             py::handle shapes) {
            Call call;
            read_call(t.signature(), inputs.ptr(), grid.ptr(), group.ptr(), shapes.ptr(), call);
          },
          py::arg("inputs"), py::arg("grid"), py::arg("group"), py::arg("result_shapes"),
          "Checks a call's arguments (every route's checks); values only a trace knows are "
          "left unchecked.")
      .def(
          "find_or_register",
          [](KernelTable& t, py::handle kernel, int64_t options, py::tuple inputs,
             py::handle shapes) {
            Call call;
            const py::tuple grid = py::make_tuple(0, 0, 0), group = py::make_tuple(1, 1, 1);
            read_call(t.signature(), inputs.ptr(), grid.ptr(), group.ptr(), shapes.ptr(), call);
            return t.find_or_register(kernel.ptr(), options, call, inputs.ptr(), shapes.ptr())
                .handle;
          },
          py::arg("kernel"), py::arg("options"), py::arg("inputs"), py::arg("result_shapes"),
          "The handle of the specialization these inputs and result shapes select, registered "
          "first if it is new (nothing is compiled).")
      .def("handles", &KernelTable::handles, "The handles of the registered specializations.");

  py::class_<Launch>(m, "Launch", "One kernel launch, as the launch hook sees it.")
      .def_readonly("kernel", &Launch::kernel, "The TorchMetalKernel launched.")
      .def_readonly("inputs", &Launch::inputs, "Its inputs, as given.")
      .def_readonly("threads_per_grid", &Launch::threads_per_grid)
      .def_readonly("threads_per_thread_group", &Launch::threads_per_thread_group)
      .def_readonly("result_shapes", &Launch::result_shapes)
      .def_readonly("handle", &Launch::handle, "The registered specialization's handle.")
      .def_readonly("device", &Launch::device, "The device it runs on ('cpu', 'cuda:0', ...).")
      .def_property_readonly(
          "route", [](const Launch& l) { return std::string(l.route); },
          "How the call got here: 'direct' (the C fast path of a plain call of a registered "
          "specialization) or 'op' (the kernel's op, through the dispatcher).")
      .def("run", &Launch::run, "Launches it (once) and returns its results.")
      .def("registration", &Launch::registration,
           "torch.ops.coreai_torch.register_kernel's arguments for its specialization, in "
           "order (coreai_torch.contract.Registration's fields).");

  m.def(
      "_install",
      [](py::dict active, py::module_ modes, py::module_ compiler, py::function reraise,
         py::function describe, py::function reference) {
        FrontEnd& f = front_end();
        f.active = active.release().ptr();
        f.modes = modes.release().ptr();
        f.compiler = compiler.release().ptr();
        f.reraise = reraise.release().ptr();
        f.describe = describe.release().ptr();
        f.reference = reference.release().ptr();
      },
      py::arg("active"), py::arg("modes"), py::arg("compiler"), py::arg("reraise"),
      py::arg("describe"), py::arg("reference"),
      "Gives the C++ route what it asks Python: the active kernels by name, the modes, "
      "torch.compiler, the compile-error translation, describe(kernel, inputs, "
      "result_shapes, options) and reference(kernel, inputs, result_shapes).");
  m.def(
      "_set_launch_hook",
      [](py::object hook) {
        FrontEnd& f = front_end();
        py::object previous = f.hook ? py::reinterpret_steal<py::object>(f.hook) : py::none();
        f.hook = hook.is_none() ? nullptr : hook.release().ptr();
        return previous;
      },
      py::arg("hook"), "Sets the launch hook (None: none); returns the previous one.");
}

}  // namespace coreai_torch
