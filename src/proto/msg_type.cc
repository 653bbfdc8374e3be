#include "proto/messages.h"
#include "proto/serve.h"

namespace granary::proto {

const char* MsgTypeName(uint16_t type) {
  switch (static_cast<MsgType>(type & ~kReplyBit)) {
#define GRANARY_MSG_NAME(Name, ...) \
  case MsgType::k##Name:            \
    return #Name;
    GRANARY_MESSAGES(GRANARY_MSG_NAME)
    GRANARY_RESERVED_MESSAGES(GRANARY_MSG_NAME)
#undef GRANARY_MSG_NAME
  }
  return "Unknown";
}

const char* ServerName(Server server) {
  switch (server) {
    case Server::kMaster:
      return "the master";
    case Server::kNode:
      return "a node";
    case Server::kRpc:
      return "the RPC layer";
  }
  return "nobody";
}

}  // namespace granary::proto
