#include "cpu/disk_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <limits>
#include <mutex>
#include <random>
#include <set>
#include <string_view>
#include <vector>

#include "cpu/sha256.h"

namespace coreai_torch::cpu {
namespace {

constexpr char kMagic[16] = {'c', 'o', 'r', 'e', 'a', 'i', '-', 'k',
                             'e', 'r', 'n', 'e', 'l', '-', 'v', '1'};
constexpr size_t kDigestChars = 64;  // hex SHA-256
constexpr size_t kFieldsBytes = sizeof(kMagic) + 3 * sizeof(int64_t);
constexpr size_t kTrailerBytes = kFieldsBytes + kDigestChars;

constexpr int64_t kDefaultLimitBytes = int64_t{1} << 30;
// A temporary file this old belongs to a process that died while compiling.
constexpr time_t kStaleTemporarySeconds = 3600;

timespec modification_time(const struct stat& st) {
#ifdef __APPLE__
  return st.st_mtimespec;
#else
  return st.st_mtim;
#endif
}

void put_int64(char* out, int64_t value) {
  const auto bits = static_cast<uint64_t>(value);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((bits >> (8 * i)) & 0xff);
}

int64_t get_int64(const char* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<unsigned char>(in[i])} << (8 * i);
  return static_cast<int64_t>(v);
}

bool read_whole_file(const std::string& path, std::string& out, std::string& why) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    why = std::strerror(errno);
    return false;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    why = std::strerror(errno);
    close(fd);
    return false;
  }
  out.resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t got = read(fd, out.data() + done, out.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    done += static_cast<size_t>(got);
  }
  close(fd);
  out.resize(done);
  return true;
}

std::string fields_digest(std::string_view payload, const char* fields) {
  return Sha256().update(payload).update(std::string_view(fields, kFieldsBytes)).hex_digest();
}

std::string file_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Names of the artifacts this process has used: never evicted by it.
std::mutex g_in_use_mutex;
std::set<std::string>& in_use() {
  static std::set<std::string> names;
  return names;
}

// The artifacts of the cache (disk_cache.h) and the source kept beside each.
struct ArtifactKind {
  std::string_view extension;
  std::string_view kept_source;  // empty: none
};
constexpr ArtifactKind kArtifactKinds[] = {
    {".so", ".cpp"}, {".ptx", ".cu"}, {".cubin", ""}, {".pch", ""}};

// The kind of `<64 hex digits><extension>`, or nullptr for any other name.
const ArtifactKind* artifact_kind(const std::string& name) {
  if (name.size() <= kDigestChars ||
      !std::all_of(name.begin(), name.begin() + kDigestChars,
                   [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; })) {
    return nullptr;
  }
  const std::string_view extension = std::string_view(name).substr(kDigestChars);
  for (const ArtifactKind& kind : kArtifactKinds) {
    if (kind.extension == extension) return &kind;
  }
  return nullptr;
}

bool starts_with(const std::string& s, std::string_view prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

void write_private_file(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  out.close();
  TORCH_CHECK(out, "coreai_torch: cannot write ", path, ": ", std::strerror(errno));
  chmod(path.c_str(), 0600);
}

std::string unique_suffix() {
  static std::atomic<uint64_t> counter{0};
  std::random_device entropy;
  return std::to_string(getpid()) + "-" + std::to_string(counter++) + "-" +
         std::to_string(entropy());
}

bool seal_cache_file(const std::string& path, const StackNeeds& needs, std::string& error) {
  std::string payload;
  if (!read_whole_file(path, payload, error)) return false;
  char trailer[kTrailerBytes];
  std::memcpy(trailer, kMagic, sizeof(kMagic));
  put_int64(trailer + 16, static_cast<int64_t>(payload.size()));
  put_int64(trailer + 24, needs.thread_bytes);
  put_int64(trailer + 32, needs.group_bytes);
  const std::string digest = fields_digest(payload, trailer);
  std::memcpy(trailer + kFieldsBytes, digest.data(), kDigestChars);
  const int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) {
    error = std::strerror(errno);
    return false;
  }
  size_t done = 0;
  while (done < kTrailerBytes) {
    const ssize_t wrote = write(fd, trailer + done, kTrailerBytes - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) {
      error = std::strerror(errno);
      close(fd);
      return false;
    }
    done += static_cast<size_t>(wrote);
  }
  if (close(fd) != 0) {
    error = std::strerror(errno);
    return false;
  }
  return true;
}

namespace {

// The payload of an intact sealed file and its trailer's fields.
struct Sealed {
  std::string bytes;  // the whole file
  size_t payload_bytes = 0;
  StackNeeds needs;
};

std::optional<Sealed> read_sealed(const std::string& path, std::string& why) {
  Sealed out;
  std::string& bytes = out.bytes;
  if (!read_whole_file(path, bytes, why)) return std::nullopt;
  if (bytes.size() < kTrailerBytes) {
    why = "shorter than its trailer (" + std::to_string(bytes.size()) + " bytes)";
    return std::nullopt;
  }
  const char* trailer = bytes.data() + bytes.size() - kTrailerBytes;
  if (std::memcmp(trailer, kMagic, sizeof(kMagic)) != 0) {
    why = "no coreai_torch trailer (truncated, or written by another version)";
    return std::nullopt;
  }
  const int64_t payload_bytes = get_int64(trailer + 16);
  if (payload_bytes != static_cast<int64_t>(bytes.size() - kTrailerBytes)) {
    why = "holds " + std::to_string(bytes.size() - kTrailerBytes) + " bytes of code where " +
          std::to_string(payload_bytes) + " were written";
    return std::nullopt;
  }
  const std::string_view payload(bytes.data(), static_cast<size_t>(payload_bytes));
  if (fields_digest(payload, trailer) !=
      std::string_view(trailer + kFieldsBytes, kDigestChars)) {
    why = "its SHA-256 differs from the one recorded when it was written (damaged)";
    return std::nullopt;
  }
  out.payload_bytes = static_cast<size_t>(payload_bytes);
  out.needs = StackNeeds{get_int64(trailer + 24), get_int64(trailer + 32)};
  return out;
}

}  // namespace

std::optional<StackNeeds> check_sealed_file(const std::string& path, std::string& why) {
  std::optional<Sealed> sealed = read_sealed(path, why);
  if (!sealed) return std::nullopt;
  return sealed->needs;
}

std::optional<std::string> read_sealed_file(const std::string& path, std::string& why) {
  std::optional<Sealed> sealed = read_sealed(path, why);
  if (!sealed) return std::nullopt;
  sealed->bytes.resize(sealed->payload_bytes);
  return std::move(sealed->bytes);
}

void note_cache_file_in_use(const std::string& path) {
  utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // best effort: only an eviction hint
  std::lock_guard<std::mutex> lock(g_in_use_mutex);
  in_use().insert(file_name(path));
}

int64_t cache_limit_bytes() {
  const char* text = std::getenv("COREAI_TORCH_CACHE_MAX_BYTES");
  if (text == nullptr || *text == '\0') return kDefaultLimitBytes;
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

void evict_least_recently_used(const std::string& dir) {
  struct Artifact {
    std::string name;
    std::string kept_source;  // its name, or empty
    int64_t bytes;            // the artifact and its kept source
    timespec used;
  };
  const int64_t limit = cache_limit_bytes();
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  std::vector<Artifact> artifacts;
  int64_t total = 0;
  const time_t now = std::time(nullptr);
  while (const dirent* entry = readdir(d)) {
    const std::string name = entry->d_name;
    const std::string path = dir + "/" + name;
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (const ArtifactKind* kind = artifact_kind(name)) {
      std::string kept;
      int64_t bytes = st.st_size;
      if (!kind->kept_source.empty()) {
        kept = name.substr(0, kDigestChars) + std::string(kind->kept_source);
        struct stat source {};
        if (stat((dir + "/" + kept).c_str(), &source) == 0) bytes += source.st_size;
      }
      artifacts.push_back({name, kept, bytes, modification_time(st)});
      total += bytes;
    } else if ((starts_with(name, ".tmp-") || starts_with(name, "probe-")) &&
               now - st.st_mtime > kStaleTemporarySeconds) {
      unlink(path.c_str());
    }
  }
  closedir(d);
  if (total <= limit) return;
  std::sort(artifacts.begin(), artifacts.end(), [](const Artifact& a, const Artifact& b) {
    return a.used.tv_sec != b.used.tv_sec ? a.used.tv_sec < b.used.tv_sec
                                          : a.used.tv_nsec < b.used.tv_nsec;
  });
  std::lock_guard<std::mutex> lock(g_in_use_mutex);
  for (const Artifact& artifact : artifacts) {
    if (total <= limit) break;
    if (in_use().count(artifact.name) != 0) continue;
    // Another process may have evicted it first: ENOENT changes nothing. A
    // process that has a library loaded keeps its mapping.
    unlink((dir + "/" + artifact.name).c_str());
    if (!artifact.kept_source.empty()) unlink((dir + "/" + artifact.kept_source).c_str());
    total -= artifact.bytes;
  }
}

}  // namespace coreai_torch::cpu
