// The one table of registered specializations (coreai_torch.h): checks a spec
// once at registration, derives what every launch needs from it, and counts
// the uses of each handle so that a released specialization's record, and with
// it what the backends compiled, goes away.
#include <c10/util/Exception.h>

#include <algorithm>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "coreai_torch.h"
#include "specializations/launch_args.h"

namespace coreai_torch {
namespace {

bool is_identifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

void check_tensor(const KernelSpec& spec, const ArgSpec& arg, const char* role) {
  TORCH_CHECK_TYPE(element_type(arg.dtype) != nullptr,
                   dtype_refusal(spec.name, std::string(role) + " '" + arg.name + "'", arg.dtype));
  TORCH_CHECK_VALUE(arg.rank >= 0 && arg.rank <= kMaxRank, "kernel '", spec.name, "': ", role,
                    " '", arg.name, "' has rank ", arg.rank, "; Metal tensors have rank 0 to ",
                    kMaxRank, ". Reshape it to fewer dimensions.");
}

void check_spec(const KernelSpec& spec) {
  const std::string& name = spec.name;
  TORCH_CHECK_VALUE(is_identifier(spec.entry), "kernel '", name, "': entry name '", spec.entry,
                    "' is not an identifier");
  for (const ArgSpec& arg : spec.inputs) {
    TORCH_CHECK_VALUE(!arg.name.empty(), "kernel '", name, "': an input has no name");
    if (arg.kind == ArgKind::Tensor) {
      check_tensor(spec, arg, "input");
    } else {
      TORCH_CHECK_VALUE(arg_kind(static_cast<char>(arg.kind)).has_value(), "kernel '", name,
                        "': input '", arg.name, "' has an unknown kind");
    }
  }
  for (const ArgSpec& arg : spec.results) {
    TORCH_CHECK_VALUE(arg.kind == ArgKind::Tensor, "kernel '", name, "': result '", arg.name,
                      "' must be a tensor");
    check_tensor(spec, arg, "result");
  }
  TORCH_CHECK_VALUE(!spec.results.empty(), "kernel '", name, "': a kernel has at least one result");
  // The buffer rendering binds every input and result plus the metadata buffer.
  const size_t buffers = spec.inputs.size() + spec.results.size() + 1;
  TORCH_CHECK_VALUE(buffers <= static_cast<size_t>(kMaxParameters), "kernel '", name, "': ",
                    spec.inputs.size(), " inputs and ", spec.results.size(),
                    " results need, with the metadata buffer, ", buffers,
                    " buffers; Metal binds at most ", kMaxParameters);
  for (size_t i = 0; i < spec.thread_attrs.size(); ++i) {
    const std::string& attr = spec.thread_attrs[i];
    if (thread_attribute(attr) == nullptr) {
      std::string known;
      for (const ThreadAttribute& a : thread_attributes()) {
        known += (known.empty() ? "" : ", ") + std::string(a.name);
      }
      TORCH_CHECK_VALUE(false, "kernel '", name, "': metal_params entry ", i,
                        " has the unknown thread attribute '", attr, "'. Known attributes: ",
                        known);
    }
  }
  for (const auto& pair : kExclusiveThreadAttributes) {
    const auto has = [&](const char* a) {
      return std::find(spec.thread_attrs.begin(), spec.thread_attrs.end(), a) !=
             spec.thread_attrs.end();
    };
    TORCH_CHECK_VALUE(!(has(pair[0]) && has(pair[1])), "kernel '", name, "': metal_params declare ",
                      "both [[", pair[0], "]] and [[", pair[1],
                      "]], which Metal does not allow in one kernel; keep one (they are equal)");
  }
  TORCH_CHECK_VALUE((spec.options & ~kKnownOptions) == 0, "kernel '", name,
                    "': unknown option bits in ", spec.options);
}

// Every field, each prefixed by its length so that no two specs collide.
std::string identity(const KernelSpec& spec) {
  std::ostringstream s;
  auto put = [&s](const std::string& v) { s << v.size() << ':' << v; };
  auto put_args = [&](const std::vector<ArgSpec>& args) {
    s << args.size() << '[';
    for (const ArgSpec& a : args) {
      put(a.name);
      s << static_cast<char>(a.kind) << static_cast<int>(a.dtype) << ',' << a.rank << ';';
    }
    s << ']';
  };
  put(spec.name);
  put(spec.source);
  put(spec.entry);
  put_args(spec.inputs);
  put_args(spec.results);
  s << spec.thread_attrs.size() << '[';
  for (const auto& a : spec.thread_attrs) put(a);
  s << ']' << spec.options;
  return s.str();
}

class Registry {
 public:
  int64_t add(KernelSpec spec) {
    std::string key = identity(spec);
    std::lock_guard<std::mutex> lock(mutex_);
    auto known = by_key_.find(key);
    if (known != by_key_.end()) {
      ++by_handle_.at(known->second).uses;
      return known->second;
    }
    const int64_t handle = next_handle_++;  // handles start at 1 and are never reused
    by_handle_.emplace(handle, Entry{std::make_shared<const KernelRecord>(std::move(spec)), 1, key});
    by_key_.emplace(std::move(key), handle);
    return handle;
  }

  void release(int64_t handle) {
    std::shared_ptr<const KernelRecord> last;  // destroyed after the lock is released
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = by_handle_.find(handle);
    TORCH_CHECK_VALUE(it != by_handle_.end(), "coreai_torch: release_kernel(", handle,
                      "): no such registered kernel (unknown, or already released)");
    if (--it->second.uses > 0) return;
    last = std::move(it->second.record);
    by_key_.erase(it->second.key);
    by_handle_.erase(it);
  }

  std::shared_ptr<const KernelRecord> get(int64_t handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = by_handle_.find(handle);
    TORCH_CHECK_VALUE(it != by_handle_.end(), "coreai_torch: unknown kernel handle ", handle,
                      " (handles come from coreai_torch::register_kernel in this process and "
                      "are unknown once released)");
    return it->second.record;
  }

 private:
  struct Entry {
    std::shared_ptr<const KernelRecord> record;
    int64_t uses;
    std::string key;
  };
  std::mutex mutex_;
  int64_t next_handle_ = 1;
  std::unordered_map<int64_t, Entry> by_handle_;
  std::unordered_map<std::string, int64_t> by_key_;
};

Registry& registry() {
  // Never destroyed: launches on other threads may outlive static destruction.
  static Registry* r = new Registry();
  return *r;
}

}  // namespace

KernelRecord::KernelRecord(KernelSpec spec) : KernelSpec(std::move(spec)) {
  for (const ArgSpec& arg : inputs) {
    arg_kinds += static_cast<char>(arg.kind);
    if (arg.kind == ArgKind::Tensor) {
      tensor_names.push_back(arg.name);
      tensor_ranks.push_back(arg.rank);
    }
  }
  tensor_inputs = tensor_names.size();
  for (const ArgSpec& arg : results) {
    tensor_names.push_back(arg.name);
    tensor_ranks.push_back(arg.rank);
  }
  layout = meta_layout(tensor_ranks);
}

bool BackendArtifacts::ready(const at::Device& device) const {
  if (device.is_cpu()) return cpu.ready();
  if (device.is_cuda()) {
    const cuda::KernelModule* module = cuda.built();
    return module != nullptr && cuda::loaded_on(*module, device.index());
  }
  if (device.is_mps()) return mps.ready();
  return false;
}

int64_t register_kernel(KernelSpec spec) {
  check_spec(spec);
  return registry().add(std::move(spec));
}

void release_kernel(int64_t handle) { registry().release(handle); }

std::shared_ptr<const KernelRecord> kernel_record(int64_t handle) {
  return registry().get(handle);
}

}  // namespace coreai_torch
