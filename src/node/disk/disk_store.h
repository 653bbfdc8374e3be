#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "node/disk/disk_file.h"
#include "node/disk/disk_record.h"

namespace granary::node {

// Objects on one disk tier: each a record (node/disk/disk_record.h) at an offset the master
// allocated in the tier (a multiple of kDiskBlock, DiskRecordBytes long).
//
// - Put writes records in one batch: each preamble and value is staged into an aligned buffer
//   (one copy; the value's checksum is computed on the way) and written with the file's queue
//   depth.
// - Get reads records in one batch into aligned staging and checks each against what the
//   caller expects of it (the master's generation, key hash and length): another object there
//   (the space was freed and reused) is UNAVAILABLE, as a memory replica's header mismatch is;
//   a preamble or value that fails its checksum is DATA_LOSS, counted in checksum_failures(),
//   and its bytes never reach `out`.
// - Peek reads one record's preamble (a restart's inventory).
//
// Each op's status is reported separately (a batch does not fail as a whole for one bad
// record); an I/O error fails the ops of its batch. Thread-safe (DiskFile serializes batches).
class DiskStore {
 public:
  struct PutOp {
    uint64_t offset = 0;
    DiskRecordMeta meta;  // value_length and value_checksum are set by Put
    absl::Span<const unsigned char> value;
  };
  struct GetOp {
    uint64_t offset = 0;
    // The object expected there; generation 0: whichever object of out.size() bytes is there
    // (the caller checks `found`, as a client checks a memory replica's header).
    uint64_t generation = 0;
    uint64_t key_hash = 0;
    absl::Span<unsigned char> out;    // value_length bytes
    DiskRecordMeta* found = nullptr;  // when set: the record's meta, on success
  };

  explicit DiskStore(std::unique_ptr<DiskFile> file) : file_(std::move(file)) {}

  // statuses[i] is op i's result (resized to ops.size()).
  void Put(absl::Span<PutOp> ops, std::vector<absl::Status>* statuses);
  void Get(absl::Span<const GetOp> ops, std::vector<absl::Status>* statuses);
  [[nodiscard]] absl::StatusOr<DiskRecordMeta> Peek(uint64_t offset);
  // The preambles of the records at `offsets`, read in one batch with the file's queue depth
  // (a second one for those longer than a block): (*out)[i] is record i's meta, or why not
  // (DATA_LOSS for a preamble that fails its check, or no record there; an I/O error fails
  // the batch's every record).
  void PeekMany(absl::Span<const uint64_t> offsets,
                std::vector<absl::StatusOr<DiskRecordMeta>>* out);

  DiskFile& file() { return *file_; }
  uint64_t checksum_failures() const { return checksum_failures_.load(std::memory_order_relaxed); }

 private:
  std::unique_ptr<DiskFile> file_;
  std::atomic<uint64_t> checksum_failures_{0};
};

}  // namespace granary::node
