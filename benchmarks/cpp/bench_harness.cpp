// C++ benchmarks of the coreai_torch launch op against ATen, with no Python in
// the loop: kernels rendered ahead of time by render_kernels.py are registered
// and launched through the dispatcher, the way any C++ caller of the op would.
//
//   coreai_torch_bench --kernels DIR [--smoke] [--json] [--only KEY]
//
// Every measurement runs warm-up calls first, then `reps` repetitions of
// `calls` back-to-back calls; a repetition gives one per-call time, and the
// table reports the median over repetitions (the JSON also has the best).
// Every kernel's result is checked against ATen before it is timed.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "contract/contract.h"

namespace {

// ---- kernels rendered by render_kernels.py ---------------------------------

struct KernelFile {
  std::string name, entry, arg_kinds, source;
  std::vector<std::string> input_names, result_names, thread_attrs;
  std::vector<at::ScalarType> input_dtypes, result_dtypes;
  std::vector<int64_t> input_ranks, result_ranks;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw std::runtime_error("cannot read " + path +
                             "; render the kernels first: python benchmarks/cpp/render_kernels.py "
                             "DIR, then pass --kernels DIR");
  }
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> words(std::istringstream& line) {
  std::vector<std::string> out;
  for (std::string w; line >> w;) out.push_back(w);
  return out;
}

// A dtype as torch spells it (float32, int64, ...), from the contract's table.
at::ScalarType dtype_named(const std::string& name) {
  for (const coreai_torch::ElementType& row : coreai_torch::element_types()) {
    if (c10::getDtypeNames(row.dtype).first == name) return row.dtype;
  }
  throw std::runtime_error("unknown dtype '" + name + "' in a .kernel file");
}

std::vector<at::ScalarType> dtypes(std::istringstream& line) {
  std::vector<at::ScalarType> out;
  for (const std::string& w : words(line)) out.push_back(dtype_named(w));
  return out;
}

std::vector<int64_t> ints(std::istringstream& line) {
  std::vector<int64_t> out;
  for (const std::string& w : words(line)) out.push_back(std::stoll(w));
  return out;
}

KernelFile read_kernel(const std::string& dir, const std::string& key) {
  KernelFile k;
  k.source = read_text(dir + "/" + key + ".metal");
  std::istringstream fields(read_text(dir + "/" + key + ".kernel"));
  for (std::string line; std::getline(fields, line);) {
    std::istringstream in(line);
    std::string field;
    in >> field;
    if (field == "name") in >> k.name;
    else if (field == "entry") in >> k.entry;
    else if (field == "input_names") k.input_names = words(in);
    else if (field == "arg_kinds") in >> k.arg_kinds;
    else if (field == "input_dtypes") k.input_dtypes = dtypes(in);
    else if (field == "input_ranks") k.input_ranks = ints(in);
    else if (field == "result_names") k.result_names = words(in);
    else if (field == "result_dtypes") k.result_dtypes = dtypes(in);
    else if (field == "result_ranks") k.result_ranks = ints(in);
    else if (field == "thread_attrs") k.thread_attrs = words(in);
  }
  if (k.name.empty() || k.entry.empty() || k.result_names.empty()) {
    throw std::runtime_error(dir + "/" + key + ".kernel lacks name, entry or result_names");
  }
  return k;
}

// ---- the coreai_torch ops, found by name in the dispatcher -----------------

// The C++ signatures the ops are registered with (csrc/ops.cpp).
using RegisterKernelFn = int64_t(std::string, std::string, std::string, std::vector<std::string>,
                                 std::string, std::vector<at::ScalarType>, std::vector<int64_t>,
                                 std::vector<std::string>, std::vector<at::ScalarType>,
                                 std::vector<int64_t>, std::vector<std::string>, int64_t);
using LaunchFn = std::vector<at::Tensor>(int64_t, at::TensorList, c10::ArrayRef<c10::Scalar>,
                                         at::IntArrayRef, at::IntArrayRef, at::IntArrayRef);

class CoreaiOps {
 public:
  CoreaiOps()
      : register_(c10::Dispatcher::singleton()
                      .findSchemaOrThrow("coreai_torch::register_kernel", "")
                      .typed<RegisterKernelFn>()),
        launch_(c10::Dispatcher::singleton()
                    .findSchemaOrThrow("coreai_torch::launch", "")
                    .typed<LaunchFn>()) {}

  int64_t register_kernel(const KernelFile& k) const {
    return register_.call(k.name, k.source, k.entry, k.input_names, k.arg_kinds, k.input_dtypes,
                          k.input_ranks, k.result_names, k.result_dtypes, k.result_ranks,
                          k.thread_attrs, /*options=*/0);
  }

  const c10::TypedOperatorHandle<LaunchFn>& launch() const { return launch_; }

 private:
  c10::TypedOperatorHandle<RegisterKernelFn> register_;
  c10::TypedOperatorHandle<LaunchFn> launch_;
};

// One launch of a registered kernel with one result, ready to repeat.
struct Launch {
  const CoreaiOps* ops;
  int64_t handle;
  std::vector<at::Tensor> tensors;
  std::vector<c10::Scalar> scalars;
  std::vector<int64_t> grid, group, result_shape;

  at::Tensor operator()() const {
    return ops->launch().call(handle, tensors, scalars, grid, group, result_shape)[0];
  }
};

// ---- timing ------------------------------------------------------------------

struct Plan {
  int warmup;  // calls before timing
  int reps;    // timed repetitions
  int calls;   // back-to-back calls per repetition
};

struct Timing {
  double median;  // seconds per call
  double best;
};

// Times calls against each other, alternating them repetition by repetition:
// on a shared machine a burst of load then slows every contender alike, which
// keeps the ratios between them meaningful.
std::vector<Timing> measure(const std::vector<std::function<void()>>& calls, const Plan& plan) {
  using clock = std::chrono::steady_clock;
  for (const auto& f : calls) {
    for (int i = 0; i < plan.warmup; ++i) f();
  }
  std::vector<std::vector<double>> per_call(calls.size());
  for (int r = 0; r < plan.reps; ++r) {
    for (size_t k = 0; k < calls.size(); ++k) {
      const auto t0 = clock::now();
      for (int i = 0; i < plan.calls; ++i) calls[k]();
      const std::chrono::duration<double> dt = clock::now() - t0;
      per_call[k].push_back(dt.count() / plan.calls);
    }
  }
  std::vector<Timing> out;
  for (std::vector<double>& t : per_call) {
    std::sort(t.begin(), t.end());
    // The upper median for an even count; plans use odd counts.
    out.push_back({t[t.size() / 2], t.front()});
  }
  return out;
}

void check_close(const char* what, const at::Tensor& ours, const at::Tensor& expected,
                 double rtol, double atol) {
  if (!at::allclose(ours, expected, rtol, atol)) {
    const double worst = (ours - expected).abs().max().item<double>();
    throw std::runtime_error(std::string(what) + ": the kernel's result differs from ATen's by up "
                             "to " + std::to_string(worst) + " (rtol " + std::to_string(rtol) +
                             ", atol " + std::to_string(atol) + ")");
  }
}

// ---- rows --------------------------------------------------------------------

struct Row {
  std::string key;     // stable identifier (tests look rows up by it)
  std::string metric;  // what is measured, with its unit
  double ours = 0, ours_best = 0;
  std::optional<double> baseline, baseline_best, ratio;
  std::string target = "-";
  std::optional<bool> pass;
};

struct Sizes {
  int64_t tiny = 16;
  int64_t vector_log2;
  int64_t matmul;
  int64_t barrier_groups;
  int64_t barrier_count;
  Plan tiny_plan, big_plan;
  // The 2^24 add's time moves by 5-10% from call to call on a shared machine
  // (its page faults and memory bandwidth): 41 calls a side steady its median.
  Plan vector_plan;
};

Sizes sizes_for(bool smoke) {
  if (smoke) return {16, 12, 32, 2, 4, {1, 3, 5}, {1, 3, 1}, {1, 3, 1}};
  return {16, 24, 256, 64, 64, {2000, 15, 2000}, {2, 11, 1}, {2, 41, 1}};
}

constexpr int64_t kTile = 16;  // benchmarks/bench_kernels.py: TILE
constexpr int64_t kSimdTile = 32;  // benchmarks/bench_kernels.py: SIMD_TILE
constexpr double kLaunchTarget = 1.5;
constexpr double kThroughputTarget = 0.95;
constexpr double kTiledMatmulTarget = 12.0;
constexpr double kSimdgroupGemmTarget = 8.0;
constexpr double kBarrierTargetNs = 1.0;

// Runs `first_launch` (which compiles its kernel) with group loops turned off:
// the kernel runs in fiber mode (bench_kernels.py, fiber_mode_compile).
template <class F>
auto in_fiber_mode(F first_launch) {
  setenv("COREAI_TORCH_CPU_GROUP_LOOPS", "0", 1);
  struct Restore {
    ~Restore() { unsetenv("COREAI_TORCH_CPU_GROUP_LOOPS"); }
  } restore;
  return first_launch();
}
constexpr double kColdCompileTargetS = 1.5;

// Points COREAI_TORCH_CACHE_DIR at a new empty directory for its lifetime.
class EmptyKernelCache {
 public:
  EmptyKernelCache() {
    const char* previous = std::getenv(kVariable);
    if (previous) previous_ = previous;
    std::string pattern =
        (std::filesystem::temp_directory_path() / "coreai_torch_bench_XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      throw std::runtime_error("cannot create a temporary kernel cache from " + pattern);
    }
    dir_ = pattern;
    setenv(kVariable, dir_.c_str(), 1);
  }
  ~EmptyKernelCache() {
    if (previous_) setenv(kVariable, previous_->c_str(), 1);
    else unsetenv(kVariable);
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  EmptyKernelCache(const EmptyKernelCache&) = delete;
  EmptyKernelCache& operator=(const EmptyKernelCache&) = delete;

 private:
  static constexpr const char* kVariable = "COREAI_TORCH_CACHE_DIR";
  std::optional<std::string> previous_;
  std::string dir_;
};

// The first launch of a kernel this process has not run, with nothing on
// disk: finding clang++, compiling the kernel and loading it, with no Python
// anywhere. Must run before anything else launches `add`.
Row cold_compile_row(const CoreaiOps& ops, int64_t add, const Sizes& s) {
  const at::Tensor x = at::randn({s.tiny}), y = at::randn({s.tiny});
  const Launch call{&ops, add, {x, y}, {}, {s.tiny, 1, 1}, {s.tiny, 1, 1}, {s.tiny}};
  at::Tensor out;
  std::chrono::duration<double> seconds{};
  {
    EmptyKernelCache empty;
    const auto t0 = std::chrono::steady_clock::now();
    out = call();
    seconds = std::chrono::steady_clock::now() - t0;
  }
  check_close("bench_add (cold)", out, at::add(x, y), 0, 0);
  Row r{"cpp.cold_compile",
        "C++: first launch, empty kernel cache (find clang++, compile, load), s"};
  r.ours = r.ours_best = seconds.count();
  r.target = "<= 1.5 s";
  r.pass = r.ours <= kColdCompileTargetS;
  return r;
}

Row launch_row(const CoreaiOps& ops, int64_t add, const Sizes& s) {
  const at::Tensor x = at::randn({s.tiny}), y = at::randn({s.tiny});
  const Launch call{&ops, add, {x, y}, {}, {s.tiny, 1, 1}, {s.tiny, 1, 1}, {s.tiny}};
  // One rounding per element on both sides: the sums are bitwise equal.
  check_close("bench_add (16 elements)", call(), at::add(x, y), 0, 0);
  const auto t = measure({[&] { call(); }, [&] { at::add(x, y); }}, s.tiny_plan);
  const Timing& ours = t[0];
  const Timing& base = t[1];
  Row r{"cpp.launch_tiny", "C++: add " + std::to_string(s.tiny) +
                               " elements, us/call (vs at::add)"};
  r.ours = ours.median * 1e6;
  r.ours_best = ours.best * 1e6;
  r.baseline = base.median * 1e6;
  r.baseline_best = base.best * 1e6;
  r.ratio = ours.median / base.median;
  r.target = "<= 1.5x";
  r.pass = *r.ratio <= kLaunchTarget;
  return r;
}

Row vector_add_row(const CoreaiOps& ops, int64_t add, const Sizes& s) {
  const int64_t n = int64_t{1} << s.vector_log2;
  const at::Tensor x = at::randn({n}), y = at::randn({n});
  const Launch call{&ops, add, {x, y}, {}, {n, 1, 1}, {1024, 1, 1}, {n}};
  check_close("bench_add (vector)", call(), at::add(x, y), 0, 0);
  const auto t = measure({[&] { call(); }, [&] { at::add(x, y); }}, s.vector_plan);
  const Timing& ours = t[0];
  const Timing& base = t[1];
  const double gb = 3.0 * n * sizeof(float) / 1e9;  // two reads and one write per element
  Row r{"cpp.vector_add", "C++: add 2^" + std::to_string(s.vector_log2) +
                              " fp32, GB/s (vs at::add)"};
  r.ours = gb / ours.median;
  r.ours_best = gb / ours.best;
  r.baseline = gb / base.median;
  r.baseline_best = gb / base.best;
  r.ratio = base.median / ours.median;
  r.target = ">= 0.95x";
  r.pass = *r.ratio >= kThroughputTarget;
  return r;
}

// The kernels of matmul_rows, registered: each in the group-loop form and
// its copy in fiber mode.
struct MatmulKernels {
  int64_t tiled, tiled_fibers, simdgroup, simdgroup_fibers;
};

std::vector<Row> matmul_rows(const CoreaiOps& ops, const MatmulKernels& k, const Sizes& s) {
  const int64_t n = s.matmul;
  const at::Tensor a = at::randn({n, n}), b = at::randn({n, n});
  const Launch tiled{&ops, k.tiled, {a, b}, {}, {n, n, 1}, {kTile, kTile, 1}, {n, n}};
  const Launch tiled_fibers{&ops, k.tiled_fibers, {a, b}, {}, {n, n, 1}, {kTile, kTile, 1}, {n, n}};
  // One SIMD-group (a 32-thread group) per 32 x 32 output tile.
  const int64_t tiles = n / kSimdTile;
  const Launch simdgroup{&ops, k.simdgroup, {a, b}, {}, {32 * tiles, tiles, 1}, {32, 1, 1}, {n, n}};
  const Launch simdgroup_fibers{&ops, k.simdgroup_fibers, {a, b}, {}, {32 * tiles, tiles, 1},
                                {32, 1, 1}, {n, n}};
  // Dot products of n standard-normal pairs (|sum| ~ sqrt(n)) summed in a
  // different order from ATen's: fp32 rounding differs by a few ulp per add,
  // well inside 1e-4 relative plus 1e-3 absolute at n = 256.
  const at::Tensor expected = at::matmul(a, b);
  check_close("bench_tiled_matmul", tiled(), expected, 1e-4, 1e-3);
  check_close("bench_tiled_matmul_fibers", in_fiber_mode(tiled_fibers), expected, 1e-4, 1e-3);
  check_close("bench_simdgroup_gemm", simdgroup(), expected, 1e-4, 1e-3);
  check_close("bench_simdgroup_gemm_fibers", in_fiber_mode(simdgroup_fibers), expected, 1e-4,
              1e-3);
  const auto t = measure({[&] { tiled(); }, [&] { tiled_fibers(); }, [&] { simdgroup(); },
                          [&] { simdgroup_fibers(); }, [&] { at::matmul(a, b); }},
                         s.big_plan);
  const Timing& base = t.back();
  const std::string size = std::to_string(n) + "^3";
  const struct {
    const char* key;
    std::string metric;
    double target;  // 0: none
  } labels[] = {
      {"cpp.tiled_matmul", "C++: tiled matmul " + size + " fp32, ms (vs at::matmul)",
       kTiledMatmulTarget},
      {"cpp.tiled_matmul_fibers", "C++: same matmul in fiber mode, ms (vs at::matmul)", 0},
      {"cpp.simdgroup_gemm", "C++: simdgroup_matrix GEMM " + size + " fp32, ms (vs at::matmul)",
       kSimdgroupGemmTarget},
      {"cpp.simdgroup_gemm_fibers", "C++: same GEMM in fiber mode, ms (vs at::matmul)", 0},
  };
  std::vector<Row> rows;
  for (size_t i = 0; i < std::size(labels); ++i) {
    Row r{labels[i].key, labels[i].metric};
    r.ours = t[i].median * 1e3;
    r.ours_best = t[i].best * 1e3;
    r.baseline = base.median * 1e3;
    r.baseline_best = base.best * 1e3;
    r.ratio = t[i].median / base.median;
    if (labels[i].target > 0) {
      std::ostringstream target;
      target << "<= " << labels[i].target << "x";
      r.target = target.str();
      r.pass = *r.ratio <= labels[i].target;
    }
    rows.push_back(r);
  }
  return rows;
}

// A kernel of nothing but barriers, in the group-loop form and in fiber mode.
struct BarrierKernels {
  int64_t group_loops, fibers;
};

std::vector<Row> barrier_rows(const CoreaiOps& ops, const BarrierKernels& k, const Sizes& s) {
  const int64_t groups = s.barrier_groups;
  const int64_t threads = groups * 256;
  const at::Tensor x = at::randn({threads});
  auto launch = [&](int64_t handle) {
    return [&, handle](int64_t count) {
      return Launch{&ops, handle, {x}, {c10::Scalar(count)}, {threads, 1, 1}, {256, 1, 1},
                    {threads}};
    };
  };
  struct Variant {
    const char* key;
    const char* what;
    std::function<Launch(int64_t)> call;
    bool fibers;
  };
  const Variant variants[] = {
      {"cpp.barrier_alone", "barrier alone", launch(k.group_loops), false},
      {"cpp.barrier_alone_fibers", "same in fiber mode", launch(k.fibers), true},
  };
  std::vector<Row> rows;
  for (const Variant& v : variants) {
    const Launch check = v.call(s.barrier_count);
    check_close(v.key, v.fibers ? in_fiber_mode(check) : check(), x + s.barrier_count, 0, 0);
    const Launch busy_call = v.call(s.barrier_count), idle_call = v.call(0);
    const auto t = measure({[&] { busy_call(); }, [&] { idle_call(); }}, s.big_plan);
    const Timing& busy = t[0];
    const Timing& idle = t[1];
    const double thread_barriers = double(threads) * s.barrier_count;
    Row r{v.key, std::string("C++: ") + v.what + " (" + std::to_string(s.barrier_count) +
                     " per thread, 256-thread groups), ns/thread/barrier"};
    r.ours = (busy.median - idle.median) / thread_barriers * 1e9;
    r.ours_best = (busy.best - idle.best) / thread_barriers * 1e9;
    if (!v.fibers) {
      r.target = "<= 1 ns";
      r.pass = r.ours <= kBarrierTargetNs;
    }
    rows.push_back(r);
  }
  return rows;
}

// ---- output --------------------------------------------------------------------

std::string number(double v) {
  char buf[32];
  const double a = std::fabs(v);
  std::snprintf(buf, sizeof buf, a >= 100 ? "%.0f" : a >= 10 ? "%.1f" : a >= 0.1 ? "%.2f" : "%.3g",
                v);
  return buf;
}

std::string cell(const std::optional<double>& v, const char* suffix = "") {
  return v ? number(*v) + suffix : "-";
}

void print_markdown(const std::vector<Row>& rows) {
  std::cout << "| metric | ours | baseline | ratio | target | pass |\n"
            << "|---|---:|---:|---:|---|---|\n";
  for (const Row& r : rows) {
    std::cout << "| " << r.metric << " | " << number(r.ours) << " | " << cell(r.baseline)
              << " | " << cell(r.ratio, "x") << " | " << r.target << " | "
              << (r.pass ? (*r.pass ? "pass" : "FAIL") : "-") << " |\n";
  }
}

std::string json_number(const std::optional<double>& v) {
  if (!v || !std::isfinite(*v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", *v);
  return buf;
}

void print_json(const std::vector<Row>& rows) {
  std::cout << "{\"intra_op_threads\": " << at::get_num_threads() << ", \"rows\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::cout << (i ? ",\n " : "\n ") << "{\"key\": \"" << r.key << "\", \"metric\": \""
              << r.metric << "\", \"ours\": " << json_number(r.ours)
              << ", \"ours_best\": " << json_number(r.ours_best)
              << ", \"baseline\": " << json_number(r.baseline)
              << ", \"baseline_best\": " << json_number(r.baseline_best)
              << ", \"ratio\": " << json_number(r.ratio) << ", \"target\": \"" << r.target
              << "\", \"pass\": " << (r.pass ? (*r.pass ? "true" : "false") : "null") << "}";
  }
  std::cout << "\n]}\n";
}

int usage(const char* argv0) {
  std::cerr << "usage: " << argv0 << " --kernels DIR [--smoke] [--json] [--only KEY]\n"
            << "  DIR holds the files written by benchmarks/cpp/render_kernels.py\n"
            << "  KEY runs one benchmark: cpp.cold_compile, cpp.launch_tiny, cpp.vector_add,\n"
            << "  cpp.tiled_matmul or cpp.barrier_alone (for profiling)\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, only;
  bool smoke = false, json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--kernels" && i + 1 < argc) dir = argv[++i];
    else if (arg == "--only" && i + 1 < argc) only = argv[++i];
    else if (arg == "--smoke") smoke = true;
    else if (arg == "--json") json = true;
    else return usage(argv[0]);
  }
  if (dir.empty()) return usage(argv[0]);

  try {
    at::manual_seed(0);
    const CoreaiOps ops;
    const int64_t add = ops.register_kernel(read_kernel(dir, "add"));
    const int64_t tiled = ops.register_kernel(read_kernel(dir, "tiled_matmul"));
    const MatmulKernels matmuls{tiled, ops.register_kernel(read_kernel(dir, "tiled_matmul_fibers")),
                                ops.register_kernel(read_kernel(dir, "simdgroup_gemm")),
                                ops.register_kernel(read_kernel(dir, "simdgroup_gemm_fibers"))};
    const BarrierKernels barriers{ops.register_kernel(read_kernel(dir, "barrier_loop")),
                                  ops.register_kernel(read_kernel(dir, "barrier_loop_fibers"))};
    const Sizes s = sizes_for(smoke);

    // Each benchmark with the key of its first row, for --only.
    const std::vector<std::pair<std::string, std::function<std::vector<Row>()>>> benchmarks{
        {"cpp.cold_compile", [&] { return std::vector<Row>{cold_compile_row(ops, add, s)}; }},
        {"cpp.launch_tiny", [&] { return std::vector<Row>{launch_row(ops, add, s)}; }},
        {"cpp.vector_add", [&] { return std::vector<Row>{vector_add_row(ops, add, s)}; }},
        {"cpp.tiled_matmul", [&] { return matmul_rows(ops, matmuls, s); }},
        {"cpp.barrier_alone", [&] { return barrier_rows(ops, barriers, s); }},
    };
    std::vector<Row> rows;
    for (const auto& [key, bench] : benchmarks) {
      if (!only.empty() && key != only) continue;
      for (Row& r : bench()) rows.push_back(std::move(r));
    }
    if (rows.empty()) throw std::runtime_error("--only " + only + " names no benchmark");

    if (json) {
      print_json(rows);
    } else {
      std::cout << "intra-op threads: " << at::get_num_threads() << "\n\n";
      print_markdown(rows);
    }
  } catch (const std::exception& e) {
    std::cerr << "coreai_torch_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
