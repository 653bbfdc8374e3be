#include "cli/transfer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace granary::cli {

absl::Status ReadUpTo(int fd, const std::string& what, size_t limit, std::string* data,
                      Progress* progress) {
  char buf[1 << 16];
  while (data->size() < limit) {
    ssize_t n = read(fd, buf, std::min(sizeof(buf), limit - data->size()));
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat("reading ", what, ": ", strerror(errno)));
    }
    if (n == 0) break;
    data->append(buf, n);
    if (progress != nullptr) progress->Update("read", data->size());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& path, size_t limit) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat("cannot open '", path, "': ", strerror(errno)));
  }
  std::string data;
  absl::Status st = ReadUpTo(fd, "'" + path + "'", limit + 1, &data, nullptr);
  close(fd);
  if (!st.ok()) return st;
  if (data.size() > limit) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' holds more than ", limit, " bytes"));
  }
  return data;
}

absl::Status WriteAll(const std::string& path, const std::string& data, Progress* progress) {
  int fd = path == "-" ? 1 : open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    return absl::InternalError(absl::StrCat("cannot create '", path, "': ", strerror(errno)));
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = write(fd, data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (fd != 1) close(fd);
      return absl::InternalError(absl::StrCat("writing '", path, "': ", strerror(errno)));
    }
    off += n;
    if (progress != nullptr) progress->Update("written", off);
  }
  if (fd != 1) close(fd);
  return absl::OkStatus();
}

std::string Rate(uint64_t bytes, int64_t us) {
  double gbps = us > 0 ? static_cast<double>(bytes) / (us * 1e3) : 0;
  return absl::StrFormat("%s in %.3f ms (%.2f GB/s)", granary::common::FormatSize(bytes),
                         us / 1000.0, gbps);
}

}  // namespace granary::cli
