// Test tool: allocates with PutStart and then hangs without PutEnd, so that a test can kill -9
// a writer between the two phases. Prints "STARTED <bytes>" once the allocation exists.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "client/client_impl.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: put_start_hang MASTER TENANT KEY SIZE\n");
    return 2;
  }
  granary::ClientOptions o;
  o.master_server_address = argv[1];
  o.tenant_id = argv[2];
  auto c = granary::client::ClientImpl::Create(o);
  if (!c.ok()) {
    fprintf(stderr, "%s\n", c.status().ToString().c_str());
    return 2;
  }
  uint64_t size = std::strtoull(argv[4], nullptr, 10);
  auto rep = (*c)->PutStart({argv[3]}, {size});
  if (!rep.ok() || !rep->results[0].status.ToStatus().ok()) {
    fprintf(stderr, "PutStart failed: %s\n",
            rep.ok() ? rep->results[0].status.message.c_str() : rep.status().ToString().c_str());
    return 1;
  }
  printf("STARTED %llu\n", static_cast<unsigned long long>(size));
  fflush(stdout);
  while (true) pause();
}
