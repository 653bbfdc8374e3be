#include "client/planner.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/quote.h"
#include "common/util.h"

namespace granary::client {

using proto::AllocHeader;
using proto::kAllocHeaderSize;

bool Inline(PlanInputs* inputs, const transport::RemoteSegment& segment, uint64_t size,
            int device) {
  if (segment.disk) return DiskValueError(size, device).ok();
  if (device >= 0 || segment.gpu) return false;
  if (inputs->MessagesOnly(segment)) return size <= proto::kMaxMessageValue;
  return size <= proto::kMaxInlineValue && inputs->TcpOnly(segment.node_address);
}

absl::Status DiskValueError(uint64_t size, int device) {
  if (device >= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("a disk-tier replica moves to and from host memory only, not device ", device,
                     "'s: read it into host memory, or put it on the host or gpu tier"));
  }
  if (size > proto::kMaxDiskValue) {
    return absl::FailedPreconditionError(
        absl::StrCat("a value of ", size, " bytes is over the ", proto::kMaxDiskValue,
                     " bytes a disk-tier replica holds (one Read or Write message)"));
  }
  return absl::OkStatus();
}

void AddInline(const std::string& node, proto::InlineEntry entry, void* header, void* value,
               size_t key, std::vector<InlineGroup>* groups, bool other_host,
               const std::string* name, bool alone) {
  const bool disk = name != nullptr;
  auto g = std::find_if(groups->rbegin(), groups->rend(), [&](const InlineGroup& x) {
    return x.node == node && x.disk == disk && !x.alone;
  });
  InlineGroup* group = g == groups->rend() ? nullptr : &*g;
  // A disk tier's node submits a message's records together, with its queue depth: its
  // messages are as large as a frame takes (a value, its header and its key each, with the
  // node's margin: NodeService::CheckInline), not kMaxInlineMessage.
  const uint64_t limit = disk ? proto::kMaxDiskValue : proto::kMaxInlineMessage;
  const uint64_t extra = disk ? proto::kAllocHeaderSize + 4 + name->size() : 0;
  const uint64_t bytes = entry.length + extra;
  if (alone || group == nullptr || group->value_bytes + bytes > limit) {
    group = &groups->emplace_back();
    group->node = node;
    // A disk tier's messages go over a tcp connection even to a same-host node: a late answer
    // (after the node's disk I/O) over UCX 1.13's shared-memory transports could reach a
    // client that had gone to sleep without waking it, and a put of a few MiB then timed out
    // (bench/disk_tier.sh). Same-host memory never takes this path (mapped copies).
    group->other_host = other_host || disk;
    group->disk = disk;
    group->alone = alone;
  }
  if (disk) group->names.push_back(*name);
  group->value_bytes += bytes;
  group->entries.push_back(entry);
  group->headers.push_back(header);
  group->values.push_back(value);
  group->keys.push_back(key);
}

void PlanPut(absl::Span<const std::string> keys, absl::Span<const void* const> data,
             absl::Span<const size_t> sizes, const proto::PutStartReply& started,
             PlanInputs* inputs, std::vector<AllocHeader>* headers, std::vector<absl::Status>* out,
             PutPlan* plan, const std::vector<int>* devices) {
  const size_t n = keys.size();
  plan->ops.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) {
    const auto& res = started.results[i];
    (*out)[i] = res.status.ToStatus();
    if (!(*out)[i].ok()) continue;
    AllocHeader& h = (*headers)[i];
    h.generation = res.generation;
    h.key_hash = common::HashBytes(keys[i]);
    h.value_length = sizes[i];
    const int device = devices != nullptr ? (*devices)[i] : -1;
    const RegisteredRange reg =
        device < 0 ? inputs->Registered(data[i], sizes[i]) : RegisteredRange{};
    const size_t first_op = plan->ops.size();
    struct InlineWrite {
      std::string node;
      proto::InlineEntry entry;
      bool other_host;
      bool disk;
    };
    std::vector<InlineWrite> inline_writes;
    for (const auto& r : res.replicas) {
      auto seg = inputs->Segment(r.segment_id);
      if (!seg.ok()) {
        (*out)[i] = seg.status();
        break;
      }
      if (Inline(inputs, **seg, sizes[i], device)) {
        inline_writes.push_back(
            {(*seg)->node_address, {r.address, sizes[i]}, !(*seg)->same_host, (*seg)->disk});
        continue;
      }
      if ((*seg)->disk) {
        (*out)[i] = DiskValueError(sizes[i], device);
        break;
      }
      transport::RmaOp value;
      value.is_put = true;
      value.local = const_cast<void*>(data[i]);
      value.length = sizes[i];
      value.memh = reg.memh;
      value.remote_addr = r.address + kAllocHeaderSize;
      value.segment = *std::move(seg);
      value.device = device;
      plan->ops.push_back(value);
      transport::RmaOp hdr = std::move(value);
      hdr.local = &h;
      hdr.length = kAllocHeaderSize;
      hdr.memh = nullptr;
      hdr.device = -1;
      hdr.remote_addr = r.address;
      hdr.header = true;
      plan->ops.push_back(std::move(hdr));
    }
    if (!(*out)[i].ok()) {
      // Not every replica can be written: write none, and give the place back.
      plan->ops.erase(plan->ops.begin() + first_op, plan->ops.end());
      plan->revoke.entries.push_back({keys[i], res.generation});
      continue;
    }
    for (const InlineWrite& w : inline_writes) {
      AddInline(w.node, w.entry, &h, const_cast<void*>(data[i]), i, &plan->writes, w.other_host,
                w.disk ? &keys[i] : nullptr);
    }
    plan->commit.entries.push_back({keys[i], res.generation});
  }
}

namespace {

// Adds key i to the push group of (node, registration), making the group if needed.
void AddToPush(size_t i, const std::string& node, const proto::ReplicaDesc& r, void* where,
               uint64_t size, const RegisteredRange& reg, PlanInputs* inputs, GetPlan* plan) {
  auto g = std::find_if(plan->pushes.begin(), plan->pushes.end(), [&](const PushGroup& p) {
    return p.node == node && p.req.dest.segment_id == reg.id;
  });
  if (g == plan->pushes.end()) {
    // The buffer's full description (rkey, worker address) is built once per group.
    g = plan->pushes.insert(plan->pushes.end(), PushGroup{node, {}, {}});
    g->req.dest = inputs->PushTarget(reg);
  }
  g->req.entries.push_back({r.address + kAllocHeaderSize, reinterpret_cast<uint64_t>(where), size});
  g->req.headers.push_back(r.address);
  g->keys.push_back(i);
}

// Which of `replicas` round `attempt` reads for batch index i: (attempt + i) % n, so retries
// skip a dead node and a batch spreads over the replicas. With a tier preference the replicas
// on that tier come first: the first round reads one of them (spread by i among them), later
// rounds go on to the others.
size_t ReplicaChoice(int attempt, size_t i, const std::vector<proto::ReplicaDesc>& replicas,
                     PlanInputs* inputs, std::optional<bool> prefer_gpu) {
  const size_t n = replicas.size();
  if (!prefer_gpu.has_value() || n == 1) return (attempt + i) % n;
  std::vector<size_t> order, others;  // order: the preferred tier's replicas, then the others
  for (size_t r = 0; r < n; ++r) {
    auto seg = inputs->Segment(replicas[r].segment_id);
    (seg.ok() && (*seg)->gpu == *prefer_gpu ? order : others).push_back(r);
  }
  const size_t preferred = order.size();
  order.insert(order.end(), others.begin(), others.end());
  const size_t first = preferred == 0 ? i % n : i % preferred;
  return order[(first + attempt) % n];
}

}  // namespace

void PlanGet(int attempt, absl::Span<const std::string> keys, absl::Span<const size_t> pending,
             const proto::GetReply& reply, const DestFn& dest, PlanInputs* inputs,
             std::vector<AllocHeader>* headers, std::vector<absl::StatusOr<size_t>>* out,
             GetPlan* plan, const std::vector<int>* devices, std::optional<bool> prefer_gpu) {
  const size_t n = keys.size();
  plan->gens.assign(n, 0);
  plan->lens.assign(n, 0);
  for (size_t j = 0; j < pending.size(); ++j) {
    const size_t i = pending[j];
    const auto& res = reply.results[j];
    absl::Status st = res.status.ToStatus();
    if (st.ok() && res.replicas.empty()) {
      st = absl::NotFoundError(
          absl::StrCat("key ", common::QuotedKey(keys[i]), " has no live replica"));
    }
    if (!st.ok()) {
      (*out)[i] = st;
      continue;
    }
    plan->release.entries.push_back({keys[i], res.generation, res.lease_token});
    auto where = dest(i, res.size);
    if (!where.ok()) {
      (*out)[i] = where.status();
      continue;
    }
    // Rotate through the replicas on retries, so a dead node is skipped.
    const auto& r = res.replicas[ReplicaChoice(attempt, i, res.replicas, inputs, prefer_gpu)];
    auto seg = inputs->Segment(r.segment_id);
    if (!seg.ok()) {
      (*out)[i] = seg.status();
      continue;
    }
    plan->gens[i] = res.generation;
    plan->lens[i] = res.size;
    plan->fetched.push_back(i);
    const int device = devices != nullptr ? (*devices)[i] : -1;
    // A retry reads one-sided: it works against any node, one that refused the Read or the
    // Push too. Not from a node that takes messages only: a one-sided read would connect to
    // its worker address (see proto::kMaxMessageValue).
    const std::string& node = (*seg)->node_address;
    // A disk tier is read in Read messages only, on every attempt.
    if ((attempt == 0 || inputs->MessagesOnly(**seg) || (*seg)->disk) &&
        Inline(inputs, **seg, res.size, device)) {
      // A retry of a disk read goes alone: a record that fails its checksum fails its own
      // message, not its neighbours'.
      AddInline(node, {r.address, res.size}, &(*headers)[i], *where, i, &plan->reads,
                !(*seg)->same_host, (*seg)->disk ? &keys[i] : nullptr, attempt > 0 && (*seg)->disk);
      continue;
    }
    if ((*seg)->disk) {
      (*out)[i] = DiskValueError(res.size, device);
      plan->fetched.pop_back();
      continue;
    }
    const RegisteredRange reg =
        device < 0 ? inputs->Registered(*where, res.size) : RegisteredRange{};
    // A GPU segment is never read over UCX, so never pushed from either.
    if (attempt == 0 && !(*seg)->gpu && reg.registered() && inputs->TcpOnly(node)) {
      AddToPush(i, node, r, *where, res.size, reg, inputs, plan);
      continue;
    }
    transport::RmaOp hdr;
    hdr.local = &(*headers)[i];
    hdr.length = kAllocHeaderSize;
    hdr.remote_addr = r.address;
    hdr.segment = *seg;
    hdr.header = true;
    plan->ops.push_back(hdr);
    transport::RmaOp value = std::move(hdr);
    value.header = false;
    value.local = *where;
    value.length = res.size;
    value.memh = reg.memh;
    value.remote_addr = r.address + kAllocHeaderSize;
    value.device = device;
    plan->ops.push_back(std::move(value));
  }
}

}  // namespace granary::client
