#include "cpu/subprocess.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

extern char** environ;

namespace coreai_torch::cpu {

ProcessResult run_process(const std::vector<std::string>& argv) {
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

  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    result.error = std::strerror(rc);
    return result;
  }
  result.started = true;
  char buffer[4096];
  while (true) {
    const ssize_t got = read(fds[0], buffer, sizeof(buffer));
    if (got > 0) {
      result.output.append(buffer, static_cast<size_t>(got));
    } else if (got == 0 || errno != EINTR) {
      break;
    }
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  // posix_spawnp reports a missing program through the child on some systems.
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
    if (result.exit_code == 127 && result.output.empty()) {
      result.started = false;
      result.error = "not found";
    }
  }
  return result;
}

}  // namespace coreai_torch::cpu
