#pragma once

// Shared by the device backend tests and their helper process: the bytes both sides expect, and
// a child process with pipes.

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"

extern char** environ;

namespace granary::device::testing {

// n bytes that differ for every seed and at every offset (mod 251).
inline std::vector<unsigned char> Pattern(size_t n, uint8_t seed) {
  std::vector<unsigned char> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>((i * 7 + seed * 13 + 1) % 251);
  return b;
}

// The bytes of a hex string; false when it is not one (odd length or a non-hex character).
inline bool FromHex(const std::string& hex, std::string* bytes) {
  if (hex.empty() || hex.size() % 2 != 0 ||
      hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
    return false;
  }
  *bytes = absl::HexStringToBytes(hex);
  return true;
}

// A child process with its stdin, stdout and stderr on pipes. Owned by one test; Wait() reaps it
// (the destructor closes the pipes and reaps it too).
class Child {
 public:
  // Runs args[0] with args, in this process's environment less GRANARY_DEVICE_BACKEND and the
  // variables `env` ("NAME=value") sets. ok() is false when the spawn failed.
  Child(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
    int in[2], out[2], err[2];
    if (pipe(in) != 0 || pipe(out) != 0 || pipe(err) != 0) return;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_adddup2(&actions, err[1], 2);
    for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1]}) {
      posix_spawn_file_actions_addclose(&actions, fd);
    }
    std::vector<std::string> replaced = {"GRANARY_DEVICE_BACKEND="};
    for (const std::string& e : env) replaced.push_back(e.substr(0, e.find('=') + 1));
    std::vector<std::string> environment;
    for (char** e = environ; *e != nullptr; ++e) {
      bool keep = true;
      for (const std::string& name : replaced) {
        keep = keep && std::strncmp(*e, name.c_str(), name.size()) != 0;
      }
      if (keep) environment.push_back(*e);
    }
    environment.insert(environment.end(), env.begin(), env.end());
    std::vector<char*> argv, envp;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (const std::string& e : environment) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    const int rc = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    close(in[0]);
    close(out[1]);
    close(err[1]);
    stdin_ = in[1];
    stdout_ = fdopen(out[0], "r");
    stderr_ = err[0];
    if (rc != 0) pid_ = -1;
  }
  ~Child() {
    CloseStdin();
    Wait();
    if (stdout_ != nullptr) fclose(stdout_);
    if (stderr_ >= 0) close(stderr_);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  bool ok() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

  // One line of the child's stdout without its newline; "" at EOF.
  std::string ReadLine() {
    char buf[4096];
    if (stdout_ == nullptr || fgets(buf, sizeof(buf), stdout_) == nullptr) return "";
    std::string line(buf);
    if (!line.empty() && line.back() == '\n') line.pop_back();
    return line;
  }
  void WriteLine(const std::string& line) {
    const std::string text = line + "\n";
    if (stdin_ >= 0 && write(stdin_, text.data(), text.size()) < 0) CloseStdin();
  }
  void CloseStdin() {
    if (stdin_ >= 0) close(stdin_);
    stdin_ = -1;
  }
  // Everything the child wrote to stderr, once it has closed it (call after Wait()).
  std::string ReadStderr() {
    std::string all;
    char buf[4096];
    ssize_t n;
    while (stderr_ >= 0 && (n = read(stderr_, buf, sizeof(buf))) > 0) all.append(buf, n);
    return all;
  }
  // The exit code, 128 + signal when killed, -1 when there is no child.
  int Wait() {
    if (pid_ <= 0) return exit_code_;
    int status = 0;
    if (waitpid(pid_, &status, 0) == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    pid_ = 0;
    return exit_code_;
  }

 private:
  pid_t pid_ = -1;
  int exit_code_ = -1;
  int stdin_ = -1;
  FILE* stdout_ = nullptr;
  int stderr_ = -1;
};

}  // namespace granary::device::testing
