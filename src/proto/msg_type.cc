#include "proto/messages.h"

namespace granary::proto {

const char* MsgTypeName(uint16_t type) {
  switch (static_cast<MsgType>(type & ~kReplyBit)) {
    case MsgType::kHello:
      return "Hello";
    case MsgType::kHeartbeat:
      return "Heartbeat";
    case MsgType::kMountSegment:
      return "MountSegment";
    case MsgType::kUnmountSegment:
      return "UnmountSegment";
    case MsgType::kPutStart:
      return "PutStart";
    case MsgType::kPutEnd:
      return "PutEnd";
    case MsgType::kPutRevoke:
      return "PutRevoke";
    case MsgType::kGet:
      return "Get";
    case MsgType::kGetEnd:
      return "GetEnd";
    case MsgType::kExist:
      return "Exist";
    case MsgType::kRemove:
      return "Remove";
    case MsgType::kList:
      return "List";
    case MsgType::kSegments:
      return "Segments";
    case MsgType::kStat:
      return "Stat";
    case MsgType::kCopyStart:
      return "CopyStart";
    case MsgType::kCopyEnd:
      return "CopyEnd";
    case MsgType::kCopyRevoke:
      return "CopyRevoke";
    case MsgType::kMoveStart:
      return "MoveStart";
    case MsgType::kMoveEnd:
      return "MoveEnd";
    case MsgType::kMoveRevoke:
      return "MoveRevoke";
    case MsgType::kFetch:
      return "Fetch";
    case MsgType::kLookupPrefix:
      return "LookupPrefix";
    case MsgType::kPush:
      return "Push";
    case MsgType::kInventorySync:
      return "InventorySync";
    case MsgType::kInventoryReport:
      return "InventoryReport";
    case MsgType::kRead:
      return "Read";
    case MsgType::kWrite:
      return "Write";
    case MsgType::kAttach:
      return "Attach";
  }
  return "Unknown";
}

}  // namespace granary::proto
