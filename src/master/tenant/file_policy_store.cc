#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "master/tenant/policy_store.h"

namespace granary::master::tenant {
namespace {

// Closes a file descriptor when it goes out of scope (unless released).
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;
  int Release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

std::string DirName(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

absl::Status WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, "write");
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// The policy as a YAML file. Load reads the whole file; Save replaces it atomically (temporary
// file in the same directory, fsync, rename, fsync of the directory), so a concurrent Load, in
// this process or another, sees either the old or the new document, never a mix.
//
// Thread-safe: Saves are serialized by a mutex (the last Save to return is what the file
// holds); Load takes no lock. Owned by whoever created it (the master).
class FilePolicyStore final : public PolicyStore {
 public:
  explicit FilePolicyStore(std::string path) : path_(std::move(path)) {}

  absl::StatusOr<Policy> Load() override {
    int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) {
        return absl::NotFoundError(absl::StrCat("policy file '", path_, "' not found"));
      }
      return absl::ErrnoToStatus(errno, absl::StrCat("policy file '", path_, "': open"));
    }
    FdCloser closer(fd);
    std::string text;
    char buf[64 * 1024];
    while (true) {
      ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n < 0) {
        if (errno == EINTR) continue;
        return absl::ErrnoToStatus(errno, absl::StrCat("policy file '", path_, "': read"));
      }
      if (n == 0) break;
      text.append(buf, static_cast<size_t>(n));
    }
    absl::StatusOr<Policy> policy = ParsePolicy(text);
    if (!policy.ok()) {
      return absl::Status(policy.status().code(),
                          absl::StrCat("policy file '", path_, "': ", policy.status().message()));
    }
    return policy;
  }

  absl::Status Save(const Policy& policy) override {
    std::string text = SerializePolicy(policy);
    // Never write what Load would refuse (a bad name, a zero quota, a duplicate).
    if (absl::StatusOr<Policy> check = ParsePolicy(text); !check.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("refusing to save an invalid policy: ", check.status().message()));
    }
    granary::common::MutexLock lock(&save_mu_);
    std::string tmp = absl::StrCat(path_, ".tmp.XXXXXX");
    int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
    if (fd < 0) {
      return absl::ErrnoToStatus(
          errno, absl::StrCat("policy file '", path_, "': cannot create a temporary file"));
    }
    absl::Status st = WriteAndRename(fd, tmp, text);
    if (!st.ok()) {
      ::unlink(tmp.c_str());  // the old file is untouched: the rename did not happen
      return absl::Status(st.code(),
                          absl::StrCat("policy file '", path_, "': save failed: ", st.message()));
    }
    // The rename is done; the directory fsync makes it survive a crash. If that fails the new
    // policy is in place but may not be durable, which the caller must hear about.
    int dir_fd = ::open(DirName(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0 || ::fsync(dir_fd) != 0) {
      int err = errno;
      if (dir_fd >= 0) ::close(dir_fd);
      return absl::ErrnoToStatus(
          err, absl::StrCat("policy file '", path_,
                            "': written, but the directory fsync failed (may not survive a "
                            "crash)"));
    }
    ::close(dir_fd);
    return absl::OkStatus();
  }

  std::string Describe() const override { return absl::StrCat("file:", path_); }

 private:
  // Fills the temporary file (taking ownership of `fd`) and renames it over path_.
  absl::Status WriteAndRename(int fd, const std::string& tmp, const std::string& text)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(save_mu_) {
    FdCloser closer(fd);
    // mkstemp creates 0600; keep the old file's mode, or use 0644 for a new file.
    struct stat old_stat;
    mode_t mode = ::stat(path_.c_str(), &old_stat) == 0 ? (old_stat.st_mode & 07777) : 0644;
    if (::fchmod(fd, mode) != 0) return absl::ErrnoToStatus(errno, "fchmod");
    if (absl::Status st = WriteAll(fd, text); !st.ok()) return st;
    if (::fsync(fd) != 0) return absl::ErrnoToStatus(errno, "fsync");
    if (::close(closer.Release()) != 0) return absl::ErrnoToStatus(errno, "close");
    if (::rename(tmp.c_str(), path_.c_str()) != 0) return absl::ErrnoToStatus(errno, "rename");
    return absl::OkStatus();
  }

  const std::string path_;
  granary::common::Mutex save_mu_;  // serializes Save; Load does not need it
};

}  // namespace

std::unique_ptr<PolicyStore> NewFilePolicyStore(const std::string& path) {
  return std::make_unique<FilePolicyStore>(path);
}

}  // namespace granary::master::tenant
