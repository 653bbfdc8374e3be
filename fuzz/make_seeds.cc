// Writes the fuzz_frame seed corpus: one request frame and one reply frame for every row of
// proto/message_table.h (their samples from tests/unit/proto/message_samples.h), and a refusal.
// The fuzz build runs it (fuzz/CMakeLists.txt, target fuzz_frame_seeds) into
// build-fuzz/corpus/frame, so the seeds always carry this tree's protocol version and messages;
// nothing is committed.
//
//   make_seeds OUT_DIR

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "common/error_reason.h"
#include "proto/messages.h"
#include "tests/unit/proto/message_samples.h"

using namespace granary::proto;  // NOLINT

namespace {

std::string g_dir;
int g_written = 0;

template <typename T>
void Emit(const std::string& name, uint16_t type, const T& m) {
  std::ofstream out(g_dir + "/" + name, std::ios::binary | std::ios::trunc);
  out << EncodeFrame(type, 42, m);
  if (!out) {
    std::fprintf(stderr, "make_seeds: cannot write %s/%s\n", g_dir.c_str(), name.c_str());
    std::exit(1);
  }
  ++g_written;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  g_dir = argv[1];
  ForEachMessage([](auto tag) {
    using M = Message<decltype(tag)::value>;
    const auto type = static_cast<uint16_t>(decltype(tag)::value);
    const std::string name = absl::AsciiStrToLower(M::kName);
    Emit(name + "_req", type, samples::Sample<typename M::Request>());
    Emit(name + "_rep", type | kReplyBit, samples::Sample<typename M::Reply>());
  });
  Emit("unmount_refused_rep", static_cast<uint16_t>(MsgType::kUnmountSegment) | kReplyBit,
       StatusReply{WireStatus::From(
           granary::common::WithReason(absl::FailedPreconditionError("NOT_LEADER: standby"),
                                       granary::ErrorReason::kNotLeader))});
  std::printf("make_seeds: %d frames in %s\n", g_written, g_dir.c_str());
  return 0;
}
