// The fake backend's memfd mappings and IPC handle (fake_memory.h).

#include "device/fake/fake_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace granary::device::internal {
namespace {

// The blob: this fixed header and FakeIpcHandle's fields, native byte order (both ends run on
// one host).
constexpr char kMagic[8] = {'G', 'R', 'F', 'A', 'K', 'E', 'I', '1'};

struct Wire {
  char magic[8];
  int64_t pid;
  uint64_t start_time;
  int32_t fd;
  int32_t device;
  uint64_t inode;
  uint64_t offset;
  uint64_t size;
  uint8_t uuid[16];
};
static_assert(sizeof(Wire) <= kMaxIpcBlobBytes);

absl::Status SystemError(absl::string_view what, int err) {
  const std::string message = absl::StrCat("fake device: ", what, ": ", std::strerror(err));
  if (err == ENOMEM || err == EMFILE || err == ENFILE || err == ENOSPC || err == EFBIG) {
    return absl::ResourceExhaustedError(message);
  }
  return absl::InternalError(message);
}

size_t RoundToPages(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

}  // namespace

absl::StatusOr<FakeMapping> MapFakeFd(int fd, size_t bytes) {
  FakeMapping m;
  m.fd = fd;
  m.bytes = bytes;
  m.mapped = RoundToPages(bytes);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    UnmapFake(m);
    return SystemError("fstat of the memfd", err);
  }
  m.inode = st.st_ino;
  if (static_cast<size_t>(st.st_size) < m.mapped) {
    UnmapFake(m);
    return absl::InvalidArgumentError(absl::StrCat("fake device: the memfd holds ", st.st_size,
                                                   " bytes, fewer than the ", bytes, " asked for"));
  }
  void* alias = mmap(nullptr, m.mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (alias == MAP_FAILED) {
    const int err = errno;
    UnmapFake(m);
    return SystemError(absl::StrCat("mmap of ", m.mapped, " bytes (alias)"), err);
  }
  m.alias = static_cast<unsigned char*>(alias);
  void* view = mmap(nullptr, m.mapped, PROT_NONE, MAP_SHARED, fd, 0);
  if (view == MAP_FAILED) {
    const int err = errno;
    UnmapFake(m);
    return SystemError(absl::StrCat("mmap of ", m.mapped, " bytes (PROT_NONE view)"), err);
  }
  m.view = view;
  return m;
}

absl::StatusOr<FakeMapping> MapNewFake(size_t bytes, bool device_view) {
  const int fd = memfd_create("granary-fake-device", MFD_CLOEXEC);
  if (fd < 0) return SystemError("memfd_create", errno);
  if (ftruncate(fd, static_cast<off_t>(RoundToPages(bytes))) != 0) {
    const int err = errno;
    close(fd);
    return SystemError(absl::StrCat("ftruncate of the memfd to ", bytes, " bytes"), err);
  }
  if (device_view) return MapFakeFd(fd, bytes);
  FakeMapping m;
  m.fd = fd;
  m.bytes = bytes;
  m.mapped = RoundToPages(bytes);
  void* p = mmap(nullptr, m.mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    UnmapFake(m);
    return SystemError(absl::StrCat("mmap of ", m.mapped, " bytes"), err);
  }
  m.alias = static_cast<unsigned char*>(p);
  m.view = p;
  return m;
}

void UnmapFake(FakeMapping& m) {
  if (m.view != nullptr && m.view != m.alias) munmap(m.view, m.mapped);
  if (m.alias != nullptr) munmap(m.alias, m.mapped);
  if (m.fd >= 0) close(m.fd);
  m = FakeMapping{};
}

std::string EncodeFakeIpc(const FakeIpcHandle& h) {
  Wire w{};
  std::memcpy(w.magic, kMagic, sizeof(kMagic));
  w.pid = h.pid;
  w.start_time = h.start_time;
  w.fd = h.fd;
  w.device = h.device;
  w.inode = h.inode;
  w.offset = h.offset;
  w.size = h.size;
  std::memcpy(w.uuid, h.uuid.data(), sizeof(w.uuid));
  return std::string(reinterpret_cast<const char*>(&w), sizeof(w));
}

absl::StatusOr<FakeIpcHandle> DecodeFakeIpc(absl::string_view blob) {
  if (blob.size() != sizeof(Wire)) {
    return absl::InvalidArgumentError(
        absl::StrCat("fake IPC handle must be ", sizeof(Wire), " bytes, got ", blob.size()));
  }
  Wire w;
  std::memcpy(&w, blob.data(), sizeof(w));
  if (std::memcmp(w.magic, kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError(
        "fake IPC handle has the wrong magic (not made by the fake backend's ExportIpc)");
  }
  FakeIpcHandle h;
  h.pid = w.pid;
  h.start_time = w.start_time;
  h.fd = w.fd;
  h.device = w.device;
  h.inode = w.inode;
  h.offset = w.offset;
  h.size = w.size;
  std::memcpy(h.uuid.data(), w.uuid, sizeof(w.uuid));
  if (h.pid <= 0 || h.fd < 0 || h.size == 0 || h.offset >= h.size) {
    return absl::InvalidArgumentError(absl::StrCat("fake IPC handle is inconsistent: pid=", h.pid,
                                                   " fd=", h.fd, " offset=", h.offset,
                                                   " size=", h.size));
  }
  return h;
}

absl::StatusOr<uint64_t> ProcessStartTime(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!in || !std::getline(in, line)) {
    return absl::UnavailableError(absl::StrCat("fake IPC: exporter pid ", pid, " has exited"));
  }
  // Field 2 (comm) may hold spaces and parentheses: count fields from the last ')'.
  const size_t close = line.rfind(')');
  std::istringstream rest(close == std::string::npos ? std::string() : line.substr(close + 2));
  std::string field;
  // Fields 3..21, then 22 (starttime).
  for (int i = 3; i < 22 && rest >> field; ++i) {
  }
  uint64_t start = 0;
  if (!(rest >> start)) {
    return absl::InternalError(absl::StrCat("fake IPC: cannot parse /proc/", pid, "/stat"));
  }
  return start;
}

absl::StatusOr<int> OpenExportedFd(const FakeIpcHandle& h) {
  const pid_t pid = static_cast<pid_t>(h.pid);
  absl::StatusOr<uint64_t> start = ProcessStartTime(pid);
  if (!start.ok()) return start.status();
  if (*start != h.start_time) {
    return absl::UnavailableError(absl::StrCat(
        "fake IPC: exporter pid ", pid, " has exited (the pid now belongs to another process)"));
  }
  const std::string path = absl::StrCat("/proc/", pid, "/fd/", h.fd);
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) {
      // Either the process died just now or it closed the fd (freed the allocation).
      absl::StatusOr<uint64_t> again = ProcessStartTime(pid);
      if (!again.ok()) return again.status();
      return absl::UnavailableError(absl::StrCat("fake IPC: exporter pid ", pid,
                                                 " no longer holds the allocation (", path,
                                                 " is gone: freed)"));
    }
    if (err == EACCES || err == EPERM) {
      return absl::FailedPreconditionError(
          absl::StrCat("fake IPC: may not open ", path, ": ", std::strerror(err),
                       " (the opener needs the exporter's user and PID namespace)"));
    }
    return SystemError(absl::StrCat("open ", path), err);
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_ino != h.inode) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("fake IPC: ", path,
                                               " is no longer the exported allocation (freed, "
                                               "and the fd number reused)"));
  }
  return fd;
}

}  // namespace granary::device::internal
