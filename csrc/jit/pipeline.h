// The one compile pipeline of every target (CPU, CUDA): from a kernel's
// translation unit to a sealed artifact in the disk cache.
//
//   fidelity scan of the rendering (what Metal refuses is refused first)
//   -> cache key: target, compiler, flags, the headers' digest, the unit
//   -> disk cache: the sealed entry `<key><suffix>`, if intact (a hit)
//   -> the prelude (coreai_msl.h) precompiled for these flags, kept in the
//      cache; while it is built (once per machine and flags) a kernel is
//      compiled with the prelude parsed from source
//   -> the compiler, on private temporaries; its errors mapped to the
//      user's lines as a MetalCompileError, other failures raised as they are
//   -> for a target that links (the CPU's shared libraries), the linker, run
//      directly with the command line the compiler's driver would run
//   -> the target's finishing step (stack needs; the PTX from LLVM IR)
//   -> seal, rename into place, keep the unit beside it, evict
//
// Targets supply the flags, the translation unit (entry code included) and a
// loader for the artifact; everything between is here, with one set of
// counters per target.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "jit/cache_dir.h"
#include "jit/compiler.h"
#include "jit/seal.h"
#include "jit/subprocess.h"

namespace coreai_torch::jit {

struct CompileRequest {
  std::string kernel;   // the user's kernel name, for messages
  std::string entry;    // its entry function, for messages
  std::string backend;  // "CPU" or "CUDA", for messages and counters
  std::string suffix;   // the artifact's file suffix (".so", ".ptx")
  std::string source_suffix;  // the kept translation unit's (".cpp", ".cu")
  const Compiler* compiler = nullptr;
  std::vector<std::string> language_flags;  // the prelude is precompiled with exactly these
  std::vector<std::string> codegen_flags;   // the kernel's compile adds these
  std::vector<std::string> output_flags;    // what to write (-c, -S), before -o
  // Non-empty: the compiler writes an object (output_flags hold -c), which
  // the driver's link command for these flags (-shared, -fuse-ld=...) turns
  // into the artifact.
  std::vector<std::string> link_flags;
  std::string key_salt;                     // the target's ABI version and the like
  std::string translation_unit;             // includes <coreai_msl.h> first
  std::string rendering;                    // the Metal source, for the fidelity scan
  std::vector<std::string> prelude_flags;   // how the prelude is precompiled
  // Run on a successful compile of this request: `artifact` is the output's
  // cache-relative name (a temporary), `unit` the translation unit's. Returns
  // what to seal with it; may rewrite the artifact.
  std::function<SealNotes(const struct CompileRequest& request, const CacheDir& cache,
                          const std::string& artifact, const std::string& unit)>
      finish;
};

// The request every target starts from: compile `rendering` (kernel
// `kernel`, entry `entry`) for `backend` into `<key><suffix>`, keeping its
// unit as `<key><source_suffix>`, with `language_flags` followed, while the
// Metal-fidelity checks are on, by theirs. The target adds the rest.
CompileRequest kernel_request(std::string kernel, std::string entry, std::string backend,
                              std::string suffix, std::string source_suffix,
                              const Compiler& compiler, std::vector<std::string> language_flags,
                              std::string rendering);

// A sealed artifact of the disk cache, opened.
struct CachedArtifact {
  std::string name;  // `<key><suffix>` in the cache directory
  Fd fd;             // the sealed file (the dynamic loader maps it through this)
  std::string payload;  // its bytes without the seal (read only if asked)
  SealNotes notes;
  bool cached = false;  // found in the disk cache, not compiled now
};

// The cache key of the artifact of `request` (no compile).
std::string artifact_key(const CompileRequest& request);

// The artifact of `request`, from the disk cache or compiled (`fresh`:
// compiled, whatever the cache holds, as after a cached artifact the target
// could not use). `read_payload`: also return its bytes. Throws
// "MetalCompileError: ..." for an error in the kernel's source, a c10::Error
// naming the kernel for anything else.
CachedArtifact compile(const CompileRequest& request, bool read_payload, bool fresh = false);

// A small artifact derived from another (a GPU's machine code from PTX),
// stored sealed under `key` as `<key><suffix>`: looked up, or stored.
std::optional<std::string> cached_blob(const std::string& backend, const std::string& key,
                                       const std::string& suffix);
void store_blob(const std::string& backend, const std::string& kernel, const std::string& key,
                const std::string& suffix, const std::string& bytes);

// The message of a MetalCompileError: the kernel, its entry, the backend it
// does not compile for, and why (the compiler's output, mapped to the user's
// lines by the rendering's #line directives).
std::string compile_error(const std::string& kernel, const std::string& entry,
                          const std::string& backend, const std::string& what);

// The cache key of `parts`, domain-separated by `what`.
std::string cache_key(const std::string& what, const std::vector<std::string>& parts);

// The directory holding coreai_msl.h: $COREAI_TORCH_MSL_DIR; else msl/ next to
// the loaded _C library (an installed wheel); else csrc/msl of the source
// tree the library sits in (an extension built in place, wherever the tree
// was moved); else the source tree it was built from. Errors name `backend`.
std::string msl_directory(const std::string& backend);

// A digest of every file under the msl directory: a header edit changes every
// cache key, even without a version bump.
const std::string& headers_digest(const std::string& msl_dir);

// Counters of a target, for tests: compiler runs and disk cache hits.
int64_t compile_count(const std::string& backend);
int64_t disk_cache_hits(const std::string& backend);

}  // namespace coreai_torch::jit
