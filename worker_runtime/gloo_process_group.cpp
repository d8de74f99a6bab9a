#include "worker_runtime/gloo_process_group.hpp"

#include <arpa/inet.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "rendezvous/store/prefix_store.hpp"
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

struct GlooProcessGroup::Impl {
  int rank = 0;
  int size = 1;
  size_t direct_max_bytes = 0;
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> context;
  std::unique_ptr<DirectMesh> mesh;  // small collectives (null: disabled or world of one)
  // Runner-only state (the comm thread or an inline call, never both at once):
  std::vector<float> flat;       // coalesced all-reduce buffer
  std::vector<std::byte> slots;  // every rank's payload of a direct all-reduce
  uint32_t next_tag = 0;
  std::string broken;    // first failure; later collectives refuse to run
  std::string endpoint;  // "rank R/W" for messages
  CommQueue queue;       // last: destroyed (joined) before the context

  // Every rank sends its payload to each of the size-1 peers, so the threshold counts the
  // bytes one rank sends in all.
  [[nodiscard]] bool direct(size_t bytes) const {
    return mesh != nullptr && bytes * static_cast<size_t>(size - 1) <= direct_max_bytes;
  }

  // In place: data becomes the reduction over ranks. Small buffers: one direct exchange,
  // reduced in rank order (so every rank gets the same bits); large ones: Gloo's ring.
  void all_reduce(void* data, size_t count, DataType type, ReduceOp op, Duration timeout,
                  uint32_t tag, const std::string& what) {
    const size_t bytes = count * element_size(type);
    if (count == 0) {
      return;
    }
    const ReduceFunction fn = reduce_function(type, op);
    if (direct(bytes)) {
      slots.resize(bytes * static_cast<size_t>(size));
      std::vector<std::span<std::byte>> recv(static_cast<size_t>(size));
      for (int r = 0; r < size; ++r) {
        recv[static_cast<size_t>(r)] = {slots.data() + bytes * static_cast<size_t>(r), bytes};
      }
      auto* own = static_cast<std::byte*>(data);
      mesh->exchange({own, bytes}, recv, timeout, what);
      if (size == 2 && (op == ReduceOp::kSum || op == ReduceOp::kAvg)) {
        // a + b == b + a bit for bit: add the peer's payload in place, no copies.
        fn(own, own, recv[static_cast<size_t>(1 - rank)].data(), count);
      } else {
        // Rank order (r0 op r1 op ...) so every rank computes the same bits.
        std::memcpy(recv[static_cast<size_t>(rank)].data(), own, bytes);
        std::memcpy(own, slots.data(), bytes);
        for (int r = 1; r < size; ++r) {
          fn(own, own, recv[static_cast<size_t>(r)].data(), count);
        }
      }
    } else {
      dispatch(type, [&](auto* typed) {
        using T = std::remove_pointer_t<decltype(typed)>;
        gloo::AllreduceOptions opts(context);
        opts.setOutput(static_cast<T*>(data), count);
        opts.setReduceFunction(fn);
        opts.setTag(tag);
        opts.setTimeout(timeout);
        gloo::allreduce(opts);
      });
    }
    if (op == ReduceOp::kAvg) {
      dispatch(type, [&](auto* typed) {
        divide(static_cast<std::remove_pointer_t<decltype(typed)>*>(data), count, size);
      });
    }
  }

  void broadcast(void* data, size_t count, DataType type, int root, Duration timeout, uint32_t tag,
                 const std::string& what) {
    const size_t bytes = count * element_size(type);
    if (count == 0) {
      return;
    }
    if (direct(bytes)) {
      // Only the root sends; the others send empty frames (which keep the sequence aligned).
      std::vector<std::span<std::byte>> recv(static_cast<size_t>(size));
      if (rank != root) {
        recv[static_cast<size_t>(root)] = {static_cast<std::byte*>(data), bytes};
      }
      const std::span<const std::byte> send =
          rank == root ? std::span<const std::byte>(static_cast<const std::byte*>(data), bytes)
                       : std::span<const std::byte>();
      mesh->exchange(send, recv, timeout, what);
      return;
    }
    dispatch(type, [&](auto* typed) {
      using T = std::remove_pointer_t<decltype(typed)>;
      gloo::BroadcastOptions opts(context);
      opts.setOutput(static_cast<T*>(data), count);
      opts.setRoot(root);
      opts.setTag(tag);
      opts.setTimeout(timeout);
      gloo::broadcast(opts);
    });
  }

  void all_gather(const void* send, void* recv, size_t count, DataType type, Duration timeout,
                  uint32_t tag, const std::string& what) {
    const size_t bytes = count * element_size(type);
    if (count == 0) {
      return;
    }
    if (direct(bytes)) {
      std::vector<std::span<std::byte>> slices(static_cast<size_t>(size));
      for (int r = 0; r < size; ++r) {
        slices[static_cast<size_t>(r)] = {
            static_cast<std::byte*>(recv) + bytes * static_cast<size_t>(r), bytes};
      }
      mesh->exchange({static_cast<const std::byte*>(send), bytes}, slices, timeout, what);
      std::memcpy(slices[static_cast<size_t>(rank)].data(), send, bytes);
      return;
    }
    dispatch(type, [&](auto* typed) {
      using T = std::remove_pointer_t<decltype(typed)>;
      gloo::AllgatherOptions opts(context);
      // Gloo's input buffer is non-const but only read.
      opts.setInput(const_cast<T*>(static_cast<const T*>(send)), count);
      opts.setOutput(static_cast<T*>(recv), count * static_cast<size_t>(size));
      opts.setTag(tag);
      opts.setTimeout(timeout);
      gloo::allgather(opts);
    });
  }

  void barrier(Duration timeout, uint32_t tag, const std::string& what) {
    if (direct(0)) {
      mesh->exchange({}, std::vector<std::span<std::byte>>(static_cast<size_t>(size)), timeout,
                     what);
      return;
    }
    gloo::BarrierOptions opts(context);
    opts.setTag(tag);
    opts.setTimeout(timeout);
    gloo::barrier(opts);
  }

  // job wrapped so any failure becomes a CollectiveError naming what, rank and timeout, and
  // marks the group broken (the pairs are unusable after a timeout or a lost peer).
  std::function<void()> guarded(std::string what, Duration timeout,
                                std::function<void(uint32_t, const std::string&)> job) {
    return [this, what = std::move(what), timeout, job = std::move(job)] {
      if (!broken.empty()) {
        throw CollectiveError("gloo " + what + " on " + endpoint +
                              " refused: the group failed earlier (" + broken + ")");
      }
      try {
        job(next_tag++, what);
      } catch (const std::exception& e) {
        broken = what + ": " + e.what();
        throw CollectiveError("gloo " + what + " on " + endpoint + " failed (timeout " +
                              std::to_string(timeout.count()) + " ms): " + e.what());
      }
    };
  }
  // Asynchronous: on the comm thread.
  std::unique_ptr<Work> submit(std::string what, Duration timeout,
                               std::function<void(uint32_t, const std::string&)> job) {
    return queue.submit(guarded(std::move(what), timeout, std::move(job)));
  }
  // Blocking: inline when the comm thread is idle, else behind the queued work.
  void run(std::string what, Duration timeout,
           std::function<void(uint32_t, const std::string&)> job) {
    queue.run_blocking(guarded(std::move(what), timeout, std::move(job)));
  }
};

GlooProcessGroup::GlooProcessGroup(std::shared_ptr<rendezvous::Store> store,
                                   const GlooOptions& options)
    : ProcessGroup(options.rank, options.size, options.timeout), impl_(std::make_unique<Impl>()) {
  impl_->rank = options.rank;
  impl_->size = options.size;
  impl_->direct_max_bytes = options.direct_max_bytes;
  impl_->endpoint = "rank " + std::to_string(options.rank) + "/" + std::to_string(options.size);
  const std::string bind =
      options.bind_addr.empty() ? local_address_for(options.route_to) : options.bind_addr;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = bind;
    impl_->device = gloo::transport::tcp::CreateDevice(attr);
    impl_->context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
    impl_->context->setTimeout(options.connect_timeout);
    auto prefixed = std::make_shared<rendezvous::PrefixStore>(options.store_prefix, store);
    GlooStoreAdapter adapter(prefixed, options.connect_timeout);
    impl_->context->connectFullMesh(adapter, impl_->device);
    impl_->context->setTimeout(options.timeout);
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

namespace {

std::string all_reduce_text(ReduceOp op, DataType type, size_t count) {
  return std::string("all_reduce(") + to_string(op) + ", " + to_string(type) + " x " +
         std::to_string(count) + ")";
}

}  // namespace

std::unique_ptr<Work> GlooProcessGroup::do_all_reduce(void* data, size_t count, DataType type,
                                                      ReduceOp op, Duration timeout) {
  return impl_->submit(
      all_reduce_text(op, type, count), timeout,
      [impl = impl_.get(), data, count, type, op, timeout](uint32_t tag, const std::string& what) {
        impl->all_reduce(data, count, type, op, timeout, tag, what);
      });
}

void GlooProcessGroup::do_all_reduce_blocking(void* data, size_t count, DataType type, ReduceOp op,
                                              Duration timeout) {
  impl_->run(
      all_reduce_text(op, type, count), timeout,
      [impl = impl_.get(), data, count, type, op, timeout](uint32_t tag, const std::string& what) {
        impl->all_reduce(data, count, type, op, timeout, tag, what);
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
  return impl_->submit(std::move(what), timeout,
                       [impl = impl_.get(), buffers = std::move(buffers), total, op, timeout](
                           uint32_t tag, const std::string& what_) {
                         auto& flat = impl->flat;
                         flat.resize(total);
                         auto out = flat.begin();
                         for (const auto& b : buffers) {
                           out = std::copy(b.begin(), b.end(), out);
                         }
                         impl->all_reduce(flat.data(), total, DataType::kFloat32, op, timeout, tag,
                                          what_);
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
             [impl = impl_.get(), data, count, type, root, timeout](uint32_t tag,
                                                                    const std::string& what_) {
               impl->broadcast(data, count, type, root, timeout, tag, what_);
             });
}

void GlooProcessGroup::do_all_gather(const void* send, void* recv, size_t count, DataType type,
                                     Duration timeout) {
  std::string what =
      std::string("all_gather(") + to_string(type) + " x " + std::to_string(count) + ")";
  impl_->run(std::move(what), timeout,
             [impl = impl_.get(), send, recv, count, type, timeout](uint32_t tag,
                                                                    const std::string& what_) {
               impl->all_gather(send, recv, count, type, timeout, tag, what_);
             });
}

void GlooProcessGroup::do_barrier(Duration timeout) {
  impl_->run("barrier", timeout,
             [impl = impl_.get(), timeout](uint32_t tag, const std::string& what) {
               impl->barrier(timeout, tag, what);
             });
}

}  // namespace ddp::worker_runtime
