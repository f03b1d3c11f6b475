#include "jit/cache_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>

#include "jit/seal.h"
#include "jit/sha256.h"

namespace coreai_torch::jit {
namespace {

constexpr size_t kKeyChars = 64;
constexpr int64_t kDefaultLimitBytes = int64_t{1} << 30;
// A temporary file this old belongs to a process that died while compiling.
constexpr time_t kStaleTemporarySeconds = 3600;
constexpr const char* kWhatToDo =
    "Set COREAI_TORCH_CACHE_DIR to a new directory (it is created private to you)";

// A mutex that fork() never copies while another thread holds it: each is
// taken before a fork and released on both sides after (short critical
// sections only).
std::mutex& registry_mutex() {
  static std::mutex* m = [] {
    auto* created = new std::mutex();
    pthread_atfork([] { registry_mutex().lock(); }, [] { registry_mutex().unlock(); },
                   [] { registry_mutex().unlock(); });
    return created;
  }();
  return *m;
}

std::string getenv_string(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string mode_text(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof(text), "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

std::string configured_path(const std::string& backend) {
  std::string dir = getenv_string("COREAI_TORCH_CACHE_DIR");
  if (!dir.empty()) return dir;
  const std::string xdg = getenv_string("XDG_CACHE_HOME");
  if (!xdg.empty() && xdg[0] == '/') return xdg + "/coreai_torch";
  const std::string home = getenv_string("HOME");
  TORCH_CHECK(!home.empty(), "coreai_torch ", backend,
              " backend: neither COREAI_TORCH_CACHE_DIR, XDG_CACHE_HOME nor HOME is set; set "
              "COREAI_TORCH_CACHE_DIR to a directory for compiled kernels");
  return home + "/.cache/coreai_torch";
}

// mkdir -p, private for the directories it creates.
void make_directories(const std::string& dir, const std::string& backend) {
  struct stat st {};
  if (stat(dir.c_str(), &st) == 0) return;
  const size_t slash = dir.find_last_of('/');
  if (slash != std::string::npos && slash > 0) make_directories(dir.substr(0, slash), backend);
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    TORCH_CHECK(false, "coreai_torch ", backend, " backend: cannot create the kernel cache ",
                "directory ", dir, ": ", std::strerror(errno),
                ". Set COREAI_TORCH_CACHE_DIR to a writable directory.");
  }
}

// Why a directory that leads to the cache could let another user swap what
// is below it; empty if it cannot.
std::string unsafe_ancestor(const struct stat& st) {
  if (st.st_uid != 0 && st.st_uid != geteuid()) {
    return "is owned by another user (uid " + std::to_string(st.st_uid) + ")";
  }
  if ((st.st_mode & 0022) != 0 && (st.st_mode & S_ISVTX) == 0) {
    return "is writable by others (mode " + mode_text(st.st_mode) + ") without the sticky bit";
  }
  return {};
}

void check_ancestors(int dir, const std::string& path, const std::string& backend) {
  Fd current(dup(dir));
  struct stat st {};
  fstat(current.get(), &st);
  std::string name = path;
  for (int depth = 0; depth < 256; ++depth) {
    Fd parent(openat(current.get(), "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    struct stat up {};
    if (!parent || fstat(parent.get(), &up) != 0) return;  // unreadable: nothing to check
    if (up.st_dev == st.st_dev && up.st_ino == st.st_ino) return;  // the root
    const size_t slash = name.find_last_of('/');
    name = slash == std::string::npos || slash == 0 ? std::string("/") : name.substr(0, slash);
    const std::string why = unsafe_ancestor(up);
    TORCH_CHECK(why.empty(), "coreai_torch ", backend, " backend: the kernel cache directory ",
                path, " lies under a directory that ", why, " (", name,
                "): another user could put a directory of theirs in its place. ", kWhatToDo,
                " below a directory only you (or root) can write to.");
    current = std::move(parent);
    st = up;
  }
}

int64_t parse_limit(const char* text) {
  char* end = nullptr;
  errno = 0;
  const long long number = std::strtoll(text, &end, 10);
  int shift = 0;
  if (end != text && *end != '\0' && end[1] == '\0') {
    switch (std::toupper(static_cast<unsigned char>(*end))) {
      case 'K': shift = 10; ++end; break;
      case 'M': shift = 20; ++end; break;
      case 'G': shift = 30; ++end; break;
      default: break;
    }
  }
  TORCH_CHECK(end != text && *end == '\0' && errno == 0 && number > 0 &&
                  number <= (std::numeric_limits<int64_t>::max() >> shift),
              "COREAI_TORCH_CACHE_MAX_BYTES=", text,
              " is not a positive size; give a number of bytes, optionally with a K, M or G "
              "suffix (e.g. 512M), or unset it for the default of 1G");
  return static_cast<int64_t>(number) << shift;
}

bool is_key(const std::string& name) {
  return name.size() > kKeyChars &&
         std::all_of(name.begin(), name.begin() + kKeyChars, [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

bool is_temporary(const std::string& name) {
  return name.size() > 17 && name[16] == '-' &&
         std::all_of(name.begin(), name.begin() + 16, [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

timespec modification_time(const struct stat& st) {
#ifdef __APPLE__
  return st.st_mtimespec;
#else
  return st.st_mtim;
#endif
}

// The names in an open directory.
std::vector<std::string> names_in(int dir) {
  std::vector<std::string> out;
  const int copy = dup(dir);
  if (copy < 0) return out;
  DIR* d = fdopendir(copy);
  if (d == nullptr) {
    close(copy);
    return out;
  }
  while (const dirent* entry = readdir(d)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") out.push_back(name);
  }
  closedir(d);
  return out;
}

// Names (by cache directory) of the entries this process has used.
std::set<std::string>& in_use() {
  static std::set<std::string> names;
  return names;
}

}  // namespace

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.release();
  }
  return *this;
}

Fd::~Fd() {
  if (fd_ >= 0) close(fd_);
}

int Fd::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

CacheDir::CacheDir(std::string path, Fd dir, Fd temporaries, bool through_proc)
    : path_(std::move(path)),
      dir_(std::move(dir)),
      temporaries_(std::move(temporaries)),
      through_proc_(through_proc) {}

const CacheDir& CacheDir::current(const std::string& backend) {
  const std::string path = configured_path(backend);
  std::lock_guard<std::mutex> lock(registry_mutex());
  // Opened once per path and kept for the life of the process.
  static std::map<std::string, std::unique_ptr<CacheDir>>* opened =
      new std::map<std::string, std::unique_ptr<CacheDir>>();
  if (auto it = opened->find(path); it != opened->end()) return *it->second;

  struct stat seen {};
  if (lstat(path.c_str(), &seen) == 0) {
    TORCH_CHECK(!S_ISLNK(seen.st_mode), "coreai_torch ", backend,
                " backend: the kernel cache directory ", path,
                " is a symbolic link, which another user could point elsewhere; set "
                "COREAI_TORCH_CACHE_DIR to the directory itself.");
    TORCH_CHECK(S_ISDIR(seen.st_mode), "coreai_torch ", backend,
                " backend: the kernel cache directory ", path,
                " is not a directory (a file is there). Set COREAI_TORCH_CACHE_DIR to a "
                "directory.");
  } else {
    make_directories(path, backend);
  }
  Fd dir(open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  TORCH_CHECK(dir, "coreai_torch ", backend, " backend: cannot open the kernel cache directory ",
              path, ": ", std::strerror(errno), ". ", kWhatToDo, ".");
  struct stat st {};
  TORCH_CHECK(fstat(dir.get(), &st) == 0, "coreai_torch ", backend, " backend: cannot stat ",
              path, ": ", std::strerror(errno));
  TORCH_CHECK(st.st_uid == geteuid(), "coreai_torch ", backend,
              " backend: the kernel cache directory ", path, " is owned by another user (uid ",
              st.st_uid, "), who could replace the compiled kernels this process loads. ",
              kWhatToDo, ".");
  // Whatever another user put there while they could write to it would stay
  // after a chmod: such a directory is not adopted at all.
  TORCH_CHECK((st.st_mode & 0022) == 0, "coreai_torch ", backend,
              " backend: the kernel cache directory ", path, " is writable by others (mode ",
              mode_text(st.st_mode),
              "): files in it could have been planted by another user, and making it private "
              "now would not remove them, so it is not used. ",
              kWhatToDo, ".");
  check_ancestors(dir.get(), path, backend);

  // The temporaries' directory; a read-only cache has none (it can still be read).
  if (mkdirat(dir.get(), kTemporariesDir, 0700) != 0 && errno != EEXIST) errno = 0;
  Fd temporaries(openat(dir.get(), kTemporariesDir,
                        O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (temporaries) {
    struct stat t {};
    if (fstat(temporaries.get(), &t) != 0 || t.st_uid != geteuid() || (t.st_mode & 0022) != 0) {
      temporaries = Fd();
    }
  }

  // Programs reach the open directory through /proc where there is one.
  const std::string proc = "/proc/" + std::to_string(getpid()) + "/fd/" +
                           std::to_string(dir.get());
  struct stat through {};
  const bool through_proc = stat(proc.c_str(), &through) == 0 && through.st_dev == st.st_dev &&
                            through.st_ino == st.st_ino;
  auto* made = new CacheDir(path, std::move(dir), std::move(temporaries), through_proc);
  opened->emplace(path, std::unique_ptr<CacheDir>(made));
  return *made;
}

std::string CacheDir::path_of(const std::string& name) const {
  if (through_proc_) {
    return "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(dir_.get()) + "/" +
           name;
  }
  return path_ + "/" + name;
}

std::optional<Fd> CacheDir::open_entry(const std::string& name) const {
  Fd fd(openat(dir_.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return std::nullopt;
  struct stat st {};
  if (fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      (st.st_mode & 0077) != 0) {
    return std::nullopt;
  }
  return fd;
}

std::string CacheDir::read_all(int fd) {
  std::string out;
  struct stat st {};
  if (fstat(fd, &st) == 0 && st.st_size > 0) out.reserve(static_cast<size_t>(st.st_size));
  char buffer[1 << 16];
  off_t at = 0;
  while (true) {
    const ssize_t got = pread(fd, buffer, sizeof(buffer), at);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    out.append(buffer, static_cast<size_t>(got));
    at += got;
  }
  return out;
}

std::string CacheDir::temporary(const std::string& key, const std::string& suffix) const {
  static std::atomic<uint64_t> counter{0};
  std::random_device entropy;
  return std::string(kTemporariesDir) + "/" + key.substr(0, 16) + "-" + std::to_string(getpid()) +
         "-" + std::to_string(counter++) + "-" + std::to_string(entropy()) + suffix;
}

void CacheDir::write_new(const std::string& name, const std::string& contents,
                         const std::string& kernel) const {
  TORCH_CHECK(temporaries_, "kernel '", kernel, "': cannot write to the kernel cache directory ",
              path_, " (its ", kTemporariesDir, " directory could not be created: is the file ",
              "system read-only?). Set COREAI_TORCH_CACHE_DIR to a writable directory.");
  Fd fd(openat(dir_.get(), name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
               0600));
  int error = fd ? 0 : errno;
  size_t done = 0;
  while (fd && done < contents.size()) {
    const ssize_t wrote = write(fd.get(), contents.data() + done, contents.size() - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) {
      error = wrote < 0 ? errno : ENOSPC;
      break;
    }
    done += static_cast<size_t>(wrote);
  }
  if (fd && error == 0 && close(fd.release()) != 0) error = errno;
  if (error != 0) {
    remove(name);
    TORCH_CHECK(false, "kernel '", kernel, "': cannot write to the kernel cache directory ",
                path_, ": ", std::strerror(error),
                ". Free space there, or set COREAI_TORCH_CACHE_DIR to a writable directory "
                "with room.");
  }
}

std::optional<std::string> CacheDir::read_note(const std::string& name) const {
  std::optional<Fd> fd = open_entry(name);
  if (!fd) return std::nullopt;
  return read_all(fd->get());
}

void CacheDir::write_note(const std::string& name, const std::string& contents) const {
  const std::string tmp = temporary(sha256_hex(name), ".txt");
  try {
    write_new(tmp, contents, "(cache note " + name + ")");
  } catch (const c10::Error&) {
    return;
  }
  if (!rename(tmp, name)) remove(tmp);
}

bool CacheDir::append(const std::string& name, const std::string& contents,
                      std::string& why) const {
  Fd fd(openat(dir_.get(), name.c_str(), O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC));
  size_t done = 0;
  while (fd && done < contents.size()) {
    const ssize_t wrote = write(fd.get(), contents.data() + done, contents.size() - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) {
      why = wrote < 0 ? std::strerror(errno) : std::strerror(ENOSPC);
      return false;
    }
    done += static_cast<size_t>(wrote);
  }
  if (!fd || close(fd.release()) != 0) {
    why = std::strerror(errno);
    return false;
  }
  return true;
}

void CacheDir::make_private(const std::string& name) const {
  fchmodat(dir_.get(), name.c_str(), 0600, 0);
}

bool CacheDir::rename(const std::string& from, const std::string& to) const {
  return renameat(dir_.get(), from.c_str(), dir_.get(), to.c_str()) == 0;
}

void CacheDir::remove(const std::string& name) const { unlinkat(dir_.get(), name.c_str(), 0); }

void CacheDir::note_in_use(const std::string& name) const {
  // Best effort: only an eviction hint.
  utimensat(dir_.get(), name.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);
  std::lock_guard<std::mutex> lock(registry_mutex());
  in_use().insert(path_ + "/" + name.substr(0, kKeyChars));
}

bool CacheDir::allows_executables() const {
  struct statvfs fs {};
  return fstatvfs(dir_.get(), &fs) != 0 || (fs.f_flag & ST_NOEXEC) == 0;
}

void CacheDir::evict() const {
  const time_t now = std::time(nullptr);
  if (temporaries_) {
    for (const std::string& name : names_in(temporaries_.get())) {
      struct stat st {};
      if (!is_temporary(name) ||
          fstatat(temporaries_.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
          !S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
        continue;
      }
      if (now - st.st_mtime > kStaleTemporarySeconds) unlinkat(temporaries_.get(), name.c_str(), 0);
    }
  }
  // The sealed entries of each key (an artifact and the source kept beside it).
  struct Entry {
    std::vector<std::string> names;
    int64_t bytes = 0;
    timespec used{};
  };
  std::map<std::string, Entry> by_key;
  int64_t total = 0;
  const size_t tail = seal_line_bytes();
  for (const std::string& name : names_in(dir_.get())) {
    if (!is_key(name)) continue;
    std::optional<Fd> fd = open_entry(name);
    if (!fd) continue;
    struct stat st {};
    fstat(fd->get(), &st);
    if (st.st_size < static_cast<off_t>(tail)) continue;
    std::string end(tail, '\0');
    if (pread(fd->get(), end.data(), tail, st.st_size - static_cast<off_t>(tail)) !=
            static_cast<ssize_t>(tail) ||
        !has_seal_of(end, st.st_size, name.substr(0, kKeyChars))) {
      continue;  // not written by the cache: never deleted
    }
    Entry& e = by_key[name.substr(0, kKeyChars)];
    e.names.push_back(name);
    e.bytes += st.st_size;
    const timespec m = modification_time(st);
    if (m.tv_sec > e.used.tv_sec || (m.tv_sec == e.used.tv_sec && m.tv_nsec > e.used.tv_nsec)) {
      e.used = m;
    }
    total += st.st_size;
  }
  const int64_t limit = cache_limit_bytes();
  if (total <= limit) return;
  std::vector<std::pair<std::string, Entry*>> order;
  for (auto& [key, e] : by_key) order.emplace_back(key, &e);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    const timespec x = a.second->used, y = b.second->used;
    return x.tv_sec != y.tv_sec ? x.tv_sec < y.tv_sec : x.tv_nsec < y.tv_nsec;
  });
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (const auto& [key, e] : order) {
    if (total <= limit) break;
    if (in_use().count(path_ + "/" + key) != 0) continue;
    // Another process may have evicted it first; one that has a library
    // loaded keeps its mapping.
    for (const std::string& name : e->names) remove(name);
    total -= e->bytes;
  }
}

int64_t cache_limit_bytes() {
  const char* text = std::getenv("COREAI_TORCH_CACHE_MAX_BYTES");
  if (text == nullptr || *text == '\0') return kDefaultLimitBytes;
  return parse_limit(text);
}

}  // namespace coreai_torch::jit
