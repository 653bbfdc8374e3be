#include "transport/ep_info.h"

#include <gtest/gtest.h>

#include <string>

namespace granary::transport {
namespace {

// ucp_ep_print_info output captured on the build machine (UCX 1.13), around the lane lines.
constexpr char kHeader[] =
    "#\n"
    "# UCP endpoint\n"
    "#\n"
    "#               peer: <no debug data>\n";
constexpr char kFooter[] =
    "#\n"
    "#                tag_send: 0..<egr/short>..8185..<egr/zcopy>..19408..<rndv>..(inf)\n"
    "#            tag_send_nbr: 0..<egr/short>..8185..<egr/bcopy>..262144..<rndv>..(inf)\n"
    "#                  am_send: 0..<egr/short>..8185..<egr/zcopy>..19408..<rndv>..(inf)\n"
    "#\n"
    "#                  rma_bw: mds [1] rndv_rkey_size 19\n"
    "#\n";

// Two tcp lanes (loopback and eth0) behind an rdmacm connection manager lane.
constexpr char kTcpLanes[] =
    "#                 lane[0]: cm rdmacm\n"
    "#                 lane[1]:  1:tcp/lo.0 md[1]                -> md[1]/tcp/sysdev[255] "
    "rma_bw#0 am am_bw#0 wireup\n"
    "#                 lane[2]:  2:tcp/eth0.0 md[1]              -> md[1]/tcp/sysdev[255] "
    "rma_bw#1\n";

// A same-host peer: shared memory for active messages, cma for bulk.
constexpr char kShmLanes[] =
    "#                 lane[0]:  3:sysv/memory.0 md[2]           -> md[2]/sysv/sysdev[255] "
    "am am_bw#0\n"
    "#                 lane[1]:  4:posix/memory.0 md[3]          -> md[3]/posix/sysdev[255]\n"
    "#                 lane[2]:  5:cma/memory.0 md[4]            -> md[4]/cma/sysdev[255] "
    "rma_bw#0\n";

std::string Wrap(const std::string& lanes) { return kHeader + lanes + kFooter; }

TEST(ParseEpInfo, TcpOnlyLanesAreASlowFallback) {
  EndpointTransports t = ParseEpInfo(Wrap(kTcpLanes));
  EXPECT_EQ(t.rma, "tcp");
  EXPECT_EQ(t.am, "tcp");
  EXPECT_TRUE(t.IsSlowFallback());
}

TEST(ParseEpInfo, SharedMemoryLanesGiveCmaForRmaAndSysvForAm) {
  EndpointTransports t = ParseEpInfo(Wrap(kShmLanes));
  EXPECT_EQ(t.rma, "cma");
  EXPECT_EQ(t.am, "sysv");
  EXPECT_FALSE(t.IsSlowFallback());
}

TEST(ParseEpInfo, LaneWithOnlyKeepaliveAndWireupCountsForNeither) {
  std::string lanes = std::string(kShmLanes) +
                      "#                 lane[3]:  1:tcp/lo.0 md[1]                -> "
                      "md[1]/tcp/sysdev[255] keepalive wireup\n";
  EndpointTransports t = ParseEpInfo(Wrap(lanes));
  EXPECT_EQ(t.rma, "cma");
  EXPECT_EQ(t.am, "sysv");
}

TEST(ParseEpInfo, EmptyTextGivesNoneForBothAndIsNotSlow) {
  EndpointTransports t = ParseEpInfo("");
  EXPECT_EQ(t.rma, "none");
  EXPECT_EQ(t.am, "none");
  EXPECT_FALSE(t.IsSlowFallback());
  EndpointTransports no_lanes = ParseEpInfo(Wrap(""));
  EXPECT_EQ(no_lanes.rma, "none");
  EXPECT_EQ(no_lanes.am, "none");
}

TEST(ParseEpInfo, SeveralRmaTransportsAreListedSortedAndTcpAmongThemIsNotSlow) {
  // InfiniBand device names carry a port after a colon; the transport is before the slash.
  std::string lanes =
      "#                 lane[0]:  8:rc_mlx5/mlx5_0:1.0 md[5]      -> md[5]/ib/sysdev[255] "
      "rma_bw#0 am am_bw#0 wireup\n"
      "#                 lane[1]:  2:tcp/eth0.0 md[1]              -> md[1]/tcp/sysdev[255] "
      "rma#0 rma_bw#1\n";
  EndpointTransports t = ParseEpInfo(Wrap(lanes));
  EXPECT_EQ(t.rma, "rc_mlx5,tcp");
  EXPECT_EQ(t.am, "rc_mlx5");
  EXPECT_FALSE(t.IsSlowFallback());
}

TEST(ParseEpInfo, AtomicLaneIsNotAnActiveMessageLane) {
  // UCX marks atomic lanes "amo#N"; only "am" and "am_bw#N" carry active messages.
  std::string lanes =
      "#                 lane[0]:  8:rc_mlx5/mlx5_0:1.0 md[5]      -> md[5]/ib/sysdev[255] "
      "rma_bw#0 amo#0\n"
      "#                 lane[1]:  9:ud_mlx5/mlx5_0:1.0 md[5]      -> md[5]/ib/sysdev[255] "
      "am wireup\n";
  EndpointTransports t = ParseEpInfo(Wrap(lanes));
  EXPECT_EQ(t.rma, "rc_mlx5");
  EXPECT_EQ(t.am, "ud_mlx5");
}

TEST(ParseEpInfo, LinesWithoutALaneAreIgnoredEvenIfTheyNameRma) {
  // The footer's "rma_bw: mds ..." line and a cm lane without a transport add nothing.
  EndpointTransports t = ParseEpInfo(Wrap("#                 lane[0]: cm rdmacm\n"));
  EXPECT_EQ(t.rma, "none");
  EXPECT_EQ(t.am, "none");
}

}  // namespace
}  // namespace granary::transport
