#include "node/inventory_journal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "device/checksum.h"
#include "proto/frame.h"
#include "proto/messages.h"

namespace granary::node {

namespace {

constexpr uint64_t kMagic = 0x314E524A59524E47ULL;  // "GNRYJRN1"
constexpr size_t kFileHeader = 16;
constexpr size_t kRecordHeader = 12;  // u32 length, u64 checksum
// A body longer than this is no record of ours (a record is well under 5 KB).
constexpr uint32_t kMaxBody = 64 << 10;

std::string FileHeader(uint16_t version) {
  std::string h(kFileHeader, '\0');
  std::memcpy(h.data(), &kMagic, 8);
  std::memcpy(h.data() + 8, &version, 2);
  return h;
}

absl::Status WriteAll(int fd, absl::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::ErrnoToStatus(n < 0 ? errno : EIO, "write");
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

void AppendRecord(const proto::InventoryRecord& r, std::string* out) {
  std::string body;
  proto::Writer w(&body);
  proto::Encode(r, w);
  const uint32_t len = static_cast<uint32_t>(body.size());
  const uint64_t sum = device::ChecksumCpu(body.data(), body.size());
  out->append(reinterpret_cast<const char*>(&len), 4);
  out->append(reinterpret_cast<const char*>(&sum), 8);
  out->append(body);
}

std::string ReadWhole(int fd) {
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

}  // namespace

absl::Status InventoryJournal::Error(const char* op, int err) const {
  return absl::UnavailableError(
      absl::StrCat("inventory journal ", path_, ": ", op, ": ", std::strerror(err)));
}

absl::StatusOr<std::unique_ptr<InventoryJournal>> InventoryJournal::Open(const std::string& path,
                                                                         Replay* replay) {
  *replay = Replay();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("inventory journal ", path, ": open: ", std::strerror(errno)));
  }
  std::unique_ptr<InventoryJournal> j(new InventoryJournal(path, fd, 0));
  const std::string data = ReadWhole(fd);
  if (data.empty()) {
    if (absl::Status s = WriteAll(fd, FileHeader(proto::kProtocolVersion)); !s.ok()) {
      return absl::UnavailableError(absl::StrCat("inventory journal ", path, ": ", s.message()));
    }
    j->bytes_ = kFileHeader;
    GRANARY_RETURN_IF_ERROR(j->Sync());
    return j;
  }
  uint64_t magic = 0;
  uint16_t version = 0;
  if (data.size() >= kFileHeader) {
    std::memcpy(&magic, data.data(), 8);
    std::memcpy(&version, data.data() + 8, 2);
  }
  if (magic != kMagic) {
    return absl::InvalidArgumentError(
        absl::StrCat("inventory journal ", path, " is not a journal (bad magic); move it away"));
  }
  if (version < proto::kMinProtocolVersion || version > proto::kProtocolVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("inventory journal ", path, " is in protocol ", version, "; this build reads ",
                     proto::kMinProtocolVersion, "..", proto::kProtocolVersion));
  }
  std::map<std::pair<uint64_t, uint64_t>, proto::InventoryRecord> live;
  size_t at = kFileHeader;
  while (at < data.size()) {
    uint32_t len = 0;
    uint64_t sum = 0;
    if (data.size() - at < kRecordHeader) break;
    std::memcpy(&len, data.data() + at, 4);
    std::memcpy(&sum, data.data() + at + 4, 8);
    if (len > kMaxBody || data.size() - at - kRecordHeader < len) break;
    const absl::string_view body(data.data() + at + kRecordHeader, len);
    if (device::ChecksumCpu(body.data(), body.size()) != sum) break;
    absl::StatusOr<proto::InventoryRecord> r =
        proto::DecodeBody<proto::InventoryRecord>(body, version);
    if (!r.ok()) break;
    const std::pair<uint64_t, uint64_t> slot{r->segment_id, r->offset};
    auto it = live.find(slot);
    if (r->op == proto::InventoryOp::kCommit) {
      if (it == live.end() || it->second.generation < r->generation) live[slot] = std::move(*r);
    } else if (it != live.end() && it->second.generation == r->generation) {
      live.erase(it);
    }
    ++replay->records;
    at += kRecordHeader + len;
  }
  if (at < data.size()) {
    replay->torn_bytes = data.size() - at;
    if (::ftruncate(fd, static_cast<off_t>(at)) != 0) return j->Error("truncate", errno);
  }
  if (::lseek(fd, static_cast<off_t>(at), SEEK_SET) < 0) return j->Error("seek", errno);
  j->bytes_ = at;
  replay->live.reserve(live.size());
  for (auto& [slot, r] : live) replay->live.push_back(std::move(r));
  return j;
}

InventoryJournal::~InventoryJournal() { ::close(fd_); }

absl::Status InventoryJournal::Append(absl::Span<const proto::InventoryRecord> records) {
  std::string out;
  for (const proto::InventoryRecord& r : records) AppendRecord(r, &out);
  if (absl::Status s = WriteAll(fd_, out); !s.ok()) {
    // Cut off what part of it was written, so that later appends follow good records.
    if (::ftruncate(fd_, static_cast<off_t>(bytes_)) == 0) {
      ::lseek(fd_, static_cast<off_t>(bytes_), SEEK_SET);
    }
    return absl::UnavailableError(
        absl::StrCat("inventory journal ", path_, ": append: ", s.message()));
  }
  bytes_ += out.size();
  return absl::OkStatus();
}

absl::Status InventoryJournal::Sync() {
  if (::fdatasync(fd_) != 0) return Error("fdatasync", errno);
  return absl::OkStatus();
}

absl::Status InventoryJournal::Compact(absl::Span<const proto::InventoryRecord> live) {
  const std::string tmp = path_ + ".compact";
  const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Error("open for compaction", errno);
  std::string out = FileHeader(proto::kProtocolVersion);
  for (const proto::InventoryRecord& r : live) AppendRecord(r, &out);
  absl::Status s = WriteAll(fd, out);
  if (s.ok() && ::fdatasync(fd) != 0) s = Error("fdatasync for compaction", errno);
  if (s.ok() && ::rename(tmp.c_str(), path_.c_str()) != 0) s = Error("rename", errno);
  if (!s.ok()) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  }
  // The directory entry must be durable too, or a crash could bring the old file back.
  const std::string dir = path_.substr(0, path_.find_last_of('/') + 1);
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  ::close(fd_);
  fd_ = fd;
  if (::lseek(fd_, 0, SEEK_END) < 0) return Error("seek", errno);
  bytes_ = out.size();
  return absl::OkStatus();
}

}  // namespace granary::node
