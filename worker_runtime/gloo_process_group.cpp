#include "worker_runtime/gloo_process_group.hpp"

#include <arpa/inet.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/tcp/pair.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/sigpipe.hpp"
#include "rendezvous/store/prefix_store.hpp"
#include "worker_runtime/collective_backend.hpp"
#include "worker_runtime/comm_queue.hpp"
#include "worker_runtime/direct_mesh.hpp"
#include "worker_runtime/gloo_store_adapter.hpp"
#include "worker_runtime/reduce_kernels.hpp"

namespace ddp::worker_runtime {
namespace {

template <class T>
void divide(T* data, size_t count, int size) {
  const T divisor = static_cast<T>(size);
  for (size_t i = 0; i < count; ++i) {
    data[i] /= divisor;
  }
}

// Calls fn with a typed null pointer of type's element type (dispatch on DataType).
template <class Fn>
void dispatch(DataType type, Fn&& fn) {
  switch (type) {
    case DataType::kFloat32:
      fn(static_cast<float*>(nullptr));
      return;
    case DataType::kFloat64:
      fn(static_cast<double*>(nullptr));
      return;
    case DataType::kInt64:
      fn(static_cast<int64_t*>(nullptr));
      return;
  }
}

}  // namespace

std::string local_address_for(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* result = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), "9", &hints, &result);
  if (rc != 0) {
    throw ConfigError("cannot resolve '" + host +
                      "' to choose the Gloo interface: " + ::gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(result, &::freeaddrinfo);
  std::string errors;
  for (addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, SOCK_DGRAM, 0);
    if (fd < 0) {
      errors += " socket: " + errno_text(errno) + ";";
      continue;
    }
    // A UDP connect sends nothing; it only asks the kernel for the route's source address.
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    const bool ok = ::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
                    ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
    const int err = errno;
    ::close(fd);
    if (!ok) {
      errors += " route: " + errno_text(err) + ";";
      continue;
    }
    char buf[INET6_ADDRSTRLEN] = {};
    const void* addr =
        local.ss_family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
            : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr);
    if (::inet_ntop(local.ss_family, addr, buf, sizeof(buf)) != nullptr) {
      return buf;
    }
  }
  throw ConfigError("no local address routes to '" + host + "':" + errors);
}

namespace {

// Gloo's own algorithms (ring all-reduce, ...) over the transport's pairs.
class GlooCollectives final : public CollectiveBackend {
 public:
  std::shared_ptr<gloo::rendezvous::Context> context;

  void all_reduce(void* data, size_t count, DataType type, ReduceOp op,
                  const CollectiveCall& call) override {
    dispatch(type, [&](auto* typed) {
      using T = std::remove_pointer_t<decltype(typed)>;
      gloo::AllreduceOptions opts(context);
      opts.setOutput(static_cast<T*>(data), count);
      opts.setReduceFunction(reduce_function(type, op));
      opts.setTag(call.tag);
      opts.setTimeout(call.timeout);
      gloo::allreduce(opts);
    });
  }

  void broadcast(void* data, size_t count, DataType type, int root,
                 const CollectiveCall& call) override {
    dispatch(type, [&](auto* typed) {
      using T = std::remove_pointer_t<decltype(typed)>;
      gloo::BroadcastOptions opts(context);
      opts.setOutput(static_cast<T*>(data), count);
      opts.setRoot(root);
      opts.setTag(call.tag);
      opts.setTimeout(call.timeout);
      gloo::broadcast(opts);
    });
  }

  void all_gather(const void* send, void* recv, size_t count, DataType type,
                  const CollectiveCall& call) override {
    dispatch(type, [&](auto* typed) {
      using T = std::remove_pointer_t<decltype(typed)>;
      gloo::AllgatherOptions opts(context);
      // Gloo's input buffer is non-const but only read.
      opts.setInput(const_cast<T*>(static_cast<const T*>(send)), count);
      opts.setOutput(static_cast<T*>(recv), count * static_cast<size_t>(context->size));
      opts.setTag(call.tag);
      opts.setTimeout(call.timeout);
      gloo::allgather(opts);
    });
  }

  void barrier(const CollectiveCall& call) override {
    gloo::BarrierOptions opts(context);
    opts.setTag(call.tag);
    opts.setTimeout(call.timeout);
    gloo::barrier(opts);
  }
};

// tcp::Pair::signalExceptionExternal is protected; a pointer to it, taken inside a class
// derived from Pair (never instantiated), calls it on any Pair. It is the one Gloo call that
// wakes this process's waiters: close() only closes the socket and leaves them blocked.
struct PairAbort : gloo::transport::tcp::Pair {
  static constexpr auto kSignal = &PairAbort::signalExceptionExternal;
};

void signal_pairs(gloo::Context& context, const std::string& why) {
  for (int r = 0; r < context.size; ++r) {
    if (r == context.rank) continue;
    auto* pair = dynamic_cast<gloo::transport::tcp::Pair*>(context.getPair(r).get());
    if (pair == nullptr) continue;
    try {
      (pair->*PairAbort::kSignal)(why);
    } catch (const std::exception&) {
      // Already in an error state: its waiters were woken then.
    }
  }
}

}  // namespace

struct GlooProcessGroup::Impl {
  int rank = 0;
  int size = 1;
  size_t direct_max_bytes = 0;
  std::shared_ptr<gloo::transport::Device> device;
  GlooCollectives gloo;
  std::unique_ptr<DirectMesh> mesh;  // small collectives (null: disabled or world of one)
  // Runner-only state (the comm thread or an inline call, never both at once):
  std::vector<float> flat;  // coalesced all-reduce buffer
  uint32_t next_tag = 0;
  std::string broken;    // first failure; later collectives refuse to run
  std::string endpoint;  // "rank R/W" for messages
  // Set once by abort() from any thread; every collective checks it before it starts.
  std::atomic<bool> aborted{false};
  std::mutex abort_mu;
  std::string abort_reason;  // guarded by abort_mu
  CommQueue queue;           // last: destroyed (joined) before the context

  // The one routing decision: a collective whose payload, sent to each of the size-1 peers,
  // is at most direct_max_bytes in all runs on the direct mesh and never touches Gloo.
  CollectiveBackend& pick(size_t bytes) {
    const bool direct =
        mesh != nullptr && bytes * static_cast<size_t>(size - 1) <= direct_max_bytes;
    return direct ? static_cast<CollectiveBackend&>(*mesh) : gloo;
  }

  // In place: data becomes the reduction over ranks (kAvg: the sum divided here).
  void all_reduce(void* data, size_t count, DataType type, ReduceOp op,
                  const CollectiveCall& call) {
    if (count == 0) {
      return;
    }
    pick(count * element_size(type)).all_reduce(data, count, type, op, call);
    if (op == ReduceOp::kAvg) {
      dispatch(type, [&](auto* typed) {
        divide(static_cast<std::remove_pointer_t<decltype(typed)>*>(data), count, size);
      });
    }
  }

  void broadcast(void* data, size_t count, DataType type, int root, const CollectiveCall& call) {
    if (count != 0) {
      pick(count * element_size(type)).broadcast(data, count, type, root, call);
    }
  }

  void all_gather(const void* send, void* recv, size_t count, DataType type,
                  const CollectiveCall& call) {
    if (count != 0) {
      pick(count * element_size(type)).all_gather(send, recv, count, type, call);
    }
  }

  void barrier(const CollectiveCall& call) { pick(0).barrier(call); }

  using Job = std::function<void(const CollectiveCall&)>;

  // job wrapped so any failure becomes a CollectiveError naming what, rank and timeout, and
  // marks the group broken (the pairs are unusable after a timeout or a lost peer).
  std::function<void()> guarded(std::string what, Duration timeout, Job job) {
    return [this, what = std::move(what), timeout, job = std::move(job)] {
      if (aborted.load()) {
        std::lock_guard lock(abort_mu);
        throw CollectiveError("gloo " + what + " on " + endpoint + " aborted: " + abort_reason);
      }
      if (!broken.empty()) {
        throw CollectiveError("gloo " + what + " on " + endpoint +
                              " refused: the group failed earlier (" + broken + ")");
      }
      try {
        job(CollectiveCall{timeout, next_tag++, what});
      } catch (const std::exception& e) {
        broken = what + ": " + e.what();
        if (aborted.load()) {
          std::lock_guard lock(abort_mu);
          throw CollectiveError("gloo " + what + " on " + endpoint + " aborted: " + abort_reason +
                                " (" + e.what() + ")");
        }
        throw CollectiveError("gloo " + what + " on " + endpoint + " failed (timeout " +
                              std::to_string(timeout.count()) + " ms): " + e.what());
      }
    };
  }
  // Asynchronous: on the comm thread.
  std::unique_ptr<Work> submit(std::string what, Duration timeout, Job job) {
    return queue.submit(guarded(std::move(what), timeout, std::move(job)));
  }
  // Blocking: inline when the comm thread is idle, else behind the queued work.
  void run(std::string what, Duration timeout, Job job) {
    queue.run_blocking(guarded(std::move(what), timeout, std::move(job)));
  }
};

GlooProcessGroup::GlooProcessGroup(const std::shared_ptr<rendezvous::Store>& store,
                                   const GlooOptions& options)
    : ProcessGroup(options.rank, options.size, options.timeout), impl_(std::make_unique<Impl>()) {
  impl_->rank = options.rank;
  impl_->size = options.size;
  impl_->direct_max_bytes = options.direct_max_bytes;
  impl_->endpoint = "rank " + std::to_string(options.rank) + "/" + std::to_string(options.size);
  const std::string bind =
      options.bind_addr.empty() ? local_address_for(options.route_to) : options.bind_addr;
  // Gloo's tcp::Pair writes with writev(2): a peer that aborted or exited first must fail the
  // collective, not kill a native worker with SIGPIPE (Python workers ignore it already).
  survive_sigpipe();
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = bind;
    impl_->device = gloo::transport::tcp::CreateDevice(attr);
    impl_->gloo.context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
    impl_->gloo.context->setTimeout(options.connect_timeout);
    auto prefixed = std::make_shared<rendezvous::PrefixStore>(options.store_prefix, store);
    GlooStoreAdapter adapter(prefixed, options.connect_timeout);
    impl_->gloo.context->connectFullMesh(adapter, impl_->device);
    impl_->gloo.context->setTimeout(options.timeout);
    if (options.size > 1 && options.direct_max_bytes > 0) {
      DirectMeshOptions mesh;
      mesh.rank = options.rank;
      mesh.size = options.size;
      mesh.bind_addr = bind;
      mesh.connect_timeout = options.connect_timeout;
      impl_->mesh = std::make_unique<DirectMesh>(*prefixed, mesh);
    }
  } catch (const std::exception& e) {
    throw CollectiveError("gloo connect of " + impl_->endpoint + " (bound to " + bind + ", store " +
                          store->describe() + ", prefix '" + options.store_prefix + "', timeout " +
                          std::to_string(options.connect_timeout.count()) +
                          " ms) failed: " + e.what());
  }
}

GlooProcessGroup::~GlooProcessGroup() = default;

void GlooProcessGroup::abort(const std::string& why) {
  {
    std::lock_guard lock(impl_->abort_mu);
    if (impl_->aborted.load()) return;
    impl_->abort_reason = why;
    impl_->aborted.store(true);
  }
  if (impl_->mesh) impl_->mesh->abort();
  if (impl_->gloo.context) signal_pairs(*impl_->gloo.context, "aborted: " + why);
}

namespace {

std::string all_reduce_text(ReduceOp op, DataType type, size_t count) {
  return std::string("all_reduce(") + to_string(op) + ", " + to_string(type) + " x " +
         std::to_string(count) + ")";
}

}  // namespace

std::unique_ptr<Work> GlooProcessGroup::do_all_reduce(void* data, size_t count, DataType type,
                                                      ReduceOp op, Duration timeout) {
  return impl_->submit(all_reduce_text(op, type, count), timeout,
                       [impl = impl_.get(), data, count, type, op](const CollectiveCall& call) {
                         impl->all_reduce(data, count, type, op, call);
                       });
}

void GlooProcessGroup::do_all_reduce_blocking(void* data, size_t count, DataType type, ReduceOp op,
                                              Duration timeout) {
  impl_->run(all_reduce_text(op, type, count), timeout,
             [impl = impl_.get(), data, count, type, op](const CollectiveCall& call) {
               impl->all_reduce(data, count, type, op, call);
             });
}

std::unique_ptr<Work> GlooProcessGroup::do_all_reduce_coalesced(
    std::vector<std::span<float>> buffers, ReduceOp op, Duration timeout) {
  size_t total = 0;
  for (const auto& b : buffers) {
    total += b.size();
  }
  std::string what = std::string("all_reduce_coalesced(") + to_string(op) + ", " +
                     std::to_string(buffers.size()) + " buffers, float32 x " +
                     std::to_string(total) + ")";
  return impl_->submit(
      std::move(what), timeout,
      [impl = impl_.get(), buffers = std::move(buffers), total, op](const CollectiveCall& call) {
        auto& flat = impl->flat;
        flat.resize(total);
        auto out = flat.begin();
        for (const auto& b : buffers) {
          out = std::copy(b.begin(), b.end(), out);
        }
        impl->all_reduce(flat.data(), total, DataType::kFloat32, op, call);
        auto in = flat.cbegin();
        for (const auto& b : buffers) {
          std::copy_n(in, b.size(), b.begin());
          in += static_cast<std::ptrdiff_t>(b.size());
        }
      });
}

void GlooProcessGroup::do_broadcast(void* data, size_t count, DataType type, int root,
                                    Duration timeout) {
  std::string what = std::string("broadcast(") + to_string(type) + " x " + std::to_string(count) +
                     ", root " + std::to_string(root) + ")";
  impl_->run(std::move(what), timeout,
             [impl = impl_.get(), data, count, type, root](const CollectiveCall& call) {
               impl->broadcast(data, count, type, root, call);
             });
}

void GlooProcessGroup::do_all_gather(const void* send, void* recv, size_t count, DataType type,
                                     Duration timeout) {
  std::string what =
      std::string("all_gather(") + to_string(type) + " x " + std::to_string(count) + ")";
  impl_->run(std::move(what), timeout,
             [impl = impl_.get(), send, recv, count, type](const CollectiveCall& call) {
               impl->all_gather(send, recv, count, type, call);
             });
}

void GlooProcessGroup::do_barrier(Duration timeout) {
  impl_->run("barrier", timeout,
             [impl = impl_.get()](const CollectiveCall& call) { impl->barrier(call); });
}

}  // namespace ddp::worker_runtime
