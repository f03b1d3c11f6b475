// The kernel cache directory: opened once, checked once, and from then on
// used only through its file descriptor, so that nobody can swap another
// directory in under its path.
//
// What it protects against (docs/internals.md, "The kernel cache"): other
// users of the machine planting code that this user's process would load. A
// directory is adopted only if it is owned by the user and was never
// writable by others, and every directory above it is owned by the user or
// root and writable by nobody else (or sticky, as /tmp). Every file is read,
// created, renamed, deleted and loaded relative to the descriptor, without
// following symbolic links; a cached file is used only if it is a regular file
// owned by the user, private (0600), and sealed under its key (seal.h).
// Programs that need a path (the compiler, the dynamic loader) get one that
// goes through the open descriptor (/proc/<pid>/fd/<n>/..., Linux); where
// there is no /proc, the checked path itself.
//
// Layout: sealed entries `<64 hex digits><suffix>` at the top (artifacts,
// kept sources, precompiled preludes), the compiler check's note
// `compiler-<32 hex>.txt`, and the directory `coreai-tmp/` of temporaries,
// named `<16 hex>-<pid>-<n>-<random><suffix>`.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace coreai_torch::jit {

// An open file descriptor, closed with the object.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd();
  int get() const { return fd_; }
  int release();
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

class CacheDir {
 public:
  // The directory of $COREAI_TORCH_CACHE_DIR, else $XDG_CACHE_HOME/coreai_torch,
  // else ~/.cache/coreai_torch, created private (0700) if missing, opened and
  // checked the first time this process uses that path. Errors name
  // `backend`, the directory, why it is refused and what to do.
  static const CacheDir& current(const std::string& backend);

  const std::string& path() const { return path_; }

  // A path naming `name` (relative to the directory) through the open
  // descriptor, for another program or the dynamic loader.
  std::string path_of(const std::string& name) const;

  // The cached file `name` if it is a regular file owned by this user with no
  // permission for others, opened without following links; nullopt if it is
  // missing or not such a file (it is then built again, over it).
  std::optional<Fd> open_entry(const std::string& name) const;

  // Reads a whole open file.
  static std::string read_all(int fd);

  // A new private temporary name (in coreai-tmp/) for `key`, ending in `suffix`.
  std::string temporary(const std::string& key, const std::string& suffix) const;

  // Writes `contents` to the new file `name` (0600), or throws a c10::Error
  // naming `kernel`, the file and the reason (a full disk, a read-only one).
  void write_new(const std::string& name, const std::string& contents,
                 const std::string& kernel) const;

  // A note (a small file the cache keeps to save later processes work, never
  // evicted): its contents, if it is a file open_entry() accepts.
  std::optional<std::string> read_note(const std::string& name) const;

  // Writes the note `name` whole (a temporary renamed over it). Only an
  // optimisation: a note that cannot be written is not written.
  void write_note(const std::string& name, const std::string& contents) const;

  // Appends to an existing file; false with `why` on failure.
  bool append(const std::string& name, const std::string& contents, std::string& why) const;

  // Gives a file this process wrote (a compiler's output) private permissions.
  void make_private(const std::string& name) const;

  // Renames `from` over `to` (both relative to the directory); false on failure.
  bool rename(const std::string& from, const std::string& to) const;

  // Deletes `name`; a missing file is not an error.
  void remove(const std::string& name) const;

  // Marks `name` as just used (the least-recently-used clock) and as used by
  // this process, which never evicts it afterwards.
  void note_in_use(const std::string& name) const;

  // Deletes least-recently-used sealed entries until the directory holds at
  // most cache_limit_bytes(), never one this process used; also deletes
  // temporaries a killed process left behind (over an hour old). Only files
  // the cache wrote are deleted: recognised by their name and their seal.
  void evict() const;

  // Whether code in this directory can be mapped executable (not a noexec mount).
  bool allows_executables() const;

 private:
  CacheDir(std::string path, Fd dir, Fd temporaries, bool through_proc);

  std::string path_;
  Fd dir_;
  Fd temporaries_;    // coreai-tmp/
  bool through_proc_;  // /proc/<pid>/fd/<n> reaches the open directory
};

// The disk cache limit: $COREAI_TORCH_CACHE_MAX_BYTES (a number of bytes,
// optionally with a K, M or G suffix: powers of 1024), else 1 GiB.
int64_t cache_limit_bytes();

// The name of the cache's temporaries directory (inside the cache directory).
inline constexpr const char* kTemporariesDir = "coreai-tmp";

}  // namespace coreai_torch::jit
