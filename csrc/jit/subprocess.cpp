#include "jit/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

extern char** environ;

namespace coreai_torch::jit {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kPollMilliseconds = 50;

}  // namespace

ProcessResult run_process(const std::vector<std::string>& argv, const ProcessLimits& limits) {
  ProcessResult result;
  // Both ends close on exec, so that a child spawned at the same time by
  // another thread cannot hold the write end open (the dup2 below gives this
  // child its own, inheritable copy).
  int fds[2];
#ifdef __linux__
  const int piped = pipe2(fds, O_CLOEXEC);
#else
  const int piped = pipe(fds);
  if (piped == 0) {
    fcntl(fds[0], F_SETFD, FD_CLOEXEC);
    fcntl(fds[1], F_SETFD, FD_CLOEXEC);
  }
#endif
  if (piped != 0) {
    result.error = std::string("pipe: ") + std::strerror(errno);
    return result;
  }

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attributes, 0);

  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &actions, &attributes, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    result.error = std::strerror(rc);
    return result;
  }
  result.started = true;

  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(limits.timeout_seconds));
  // True (and the process group killed) once the run must end early.
  auto must_stop = [&]() {
    if (!result.timed_out && !result.stopped) {
      if (limits.timeout_seconds > 0 && Clock::now() >= deadline) {
        result.timed_out = true;
      } else if (limits.should_stop && limits.should_stop()) {
        result.stopped = true;
      }
      if (result.timed_out || result.stopped) kill(-pid, SIGKILL);
    }
    return result.timed_out || result.stopped;
  };

  char buffer[4096];
  bool open = true;
  while (open && !must_stop()) {
    pollfd p{fds[0], POLLIN, 0};
    const int ready = poll(&p, 1, kPollMilliseconds);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    const ssize_t got = read(fds[0], buffer, sizeof(buffer));
    if (got > 0) {
      result.output.append(buffer, static_cast<size_t>(got));
    } else if (got == 0 || errno != EINTR) {
      open = false;
    }
  }
  close(fds[0]);
  int status = 0;
  // The output ends as the process exits, usually a moment before it can be
  // reaped: wait a millisecond first, longer only for a process that lives on.
  for (int wait_ms = 1;; wait_ms = std::min(2 * wait_ms, kPollMilliseconds)) {
    const pid_t done = waitpid(pid, &status, must_stop() ? 0 : WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) break;
    if (done == 0) poll(nullptr, 0, wait_ms);
  }
  if (result.timed_out || result.stopped) return result;
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
    // posix_spawnp reports a missing program through the child on some systems.
    if (result.exit_code == 127 && result.output.empty()) {
      result.started = false;
      result.error = "not found";
    }
  } else if (WIFSIGNALED(status)) {
    result.term_signal = WTERMSIG(status);
  }
  return result;
}

}  // namespace coreai_torch::jit
