#pragma once

// The wire's messages, one row each:
//
//   X(Name, number, Request, Reply, since, server)
//
//   Name     MsgType::kName, and MsgTypeName's text;
//   number   the frame header's type (a reply's is number | kReplyBit); never reuse one;
//   Request  the struct a request's body holds;
//   Reply    the struct its reply's body holds (a refused request is answered with a
//            StatusReply whatever Reply is);
//   since    the protocol version that brought the message (1: older than the version history);
//   server   who answers it: kMaster, kNode, or kRpc (the RPC layer itself).
//
// Everything that lists messages expands this table: the MsgType enum and Message<T> traits
// (messages.h), MsgTypeName (msg_type.cc), the servers' dispatch (proto::Serve, serve.h), the
// fuzz target's dispatch and seed corpus (fuzz/), the codec test's cases and the codec
// benchmark. Adding a message is a row here, its structs in messages.h, a sample in
// tests/unit/proto/message_samples.h and the handler: the compiler points at each.
#define GRANARY_MESSAGES(X)                                                         \
  X(Hello, 1, HelloRequest, HelloReply, 1, kMaster)                                 \
  X(Heartbeat, 2, HeartbeatRequest, HeartbeatReply, 1, kMaster)                     \
  X(MountSegment, 3, MountSegmentRequest, MountSegmentReply, 1, kMaster)            \
  X(UnmountSegment, 4, UnmountSegmentRequest, StatusReply, 1, kMaster)              \
  X(PutStart, 5, PutStartRequest, PutStartReply, 1, kMaster)                        \
  X(PutEnd, 6, KeyGenRequest, BatchStatusReply, 1, kMaster)                         \
  X(PutRevoke, 7, KeyGenRequest, BatchStatusReply, 1, kMaster)                      \
  X(Get, 8, GetRequest, GetReply, 1, kMaster)                                       \
  X(GetEnd, 9, KeyGenRequest, BatchStatusReply, 1, kMaster)                         \
  X(Exist, 10, KeysRequest, BatchStatusReply, 1, kMaster)                           \
  X(Remove, 11, RemoveRequest, BatchStatusReply, 1, kMaster)                        \
  X(List, 12, ListRequest, ListReply, 1, kMaster)                                   \
  X(Segments, 13, SegmentsRequest, SegmentsReply, 1, kMaster)                       \
  X(CopyStart, 15, CopyStartRequest, CopyStartReply, 1, kMaster)                    \
  X(CopyEnd, 16, CopyEndRequest, BatchStatusReply, 1, kMaster)                      \
  X(CopyRevoke, 17, CopyEndRequest, BatchStatusReply, 1, kMaster)                   \
  X(MoveStart, 18, CopyStartRequest, CopyStartReply, 1, kMaster)                    \
  X(MoveEnd, 19, CopyEndRequest, BatchStatusReply, 1, kMaster)                      \
  X(MoveRevoke, 20, CopyEndRequest, BatchStatusReply, 1, kMaster)                   \
  /* client -> destination node: read a replica from the source node */             \
  X(Fetch, 21, FetchRequest, StatusReply, 1, kNode)                                 \
  X(LookupPrefix, 22, LookupPrefixRequest, LookupPrefixReply, 1, kMaster)           \
  /* client -> node: values written into the client's registered buffer (tcp) */    \
  X(Push, 23, PushRequest, PushReply, 1, kNode)                                     \
  /* node -> master: a long poll for the commit and free records of its segments */ \
  X(InventorySync, 24, InventorySyncRequest, InventorySyncReply, 5, kMaster)        \
  /* node -> master, after re-mounting: the committed objects it holds */           \
  X(InventoryReport, 25, InventoryReportRequest, InventoryReportReply, 5, kMaster)  \
  /* client -> node, over tcp: small values returned in the reply */                \
  X(Read, 26, ReadRequest, ReadReply, 12, kNode)                                    \
  /* client -> node, over tcp: small values carried in the request */               \
  X(Write, 27, WriteRequest, StatusReply, 12, kNode)                                \
  /* the first frame on a connection's endpoint (transport/rpc_server.h) */         \
  X(Attach, 0x7E02, AttachRequest, StatusReply, 13, kRpc)

// Numbers that name no message: never reuse them. 14 (Stat) is reserved and answered as an
// unknown type; 0x7E01 (ShmOffer, protocols 2-12) is retired.
#define GRANARY_RESERVED_MESSAGES(X) X(Stat, 14)
