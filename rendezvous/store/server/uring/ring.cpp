#include "rendezvous/store/server/uring/ring.hpp"

#include <cerrno>
#include <cstdlib>
#include <string>

#include "common/error.hpp"
#include "rendezvous/store/server/uring/loop.hpp"

namespace ddp::rendezvous {
namespace {

[[noreturn]] void unavailable(const std::string& call, int err) {
  std::string why = errno_text(err);
  if (err == EPERM) why += " (disabled by sysctl kernel.io_uring_disabled or a seccomp filter)";
  if (err == EINVAL) why += " (needs Linux 6.1 or newer)";
  throw IoUringUnavailable(call + ": " + why);
}

}  // namespace

UringRing::UringRing(unsigned sq_entries, unsigned cq_entries, unsigned buffers,
                     unsigned buffer_bytes)
    : buffer_count_(buffers), buffer_bytes_(buffer_bytes) {
  io_uring_params params{};
  params.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_SUBMIT_ALL |
                 IORING_SETUP_CQSIZE;
  params.cq_entries = cq_entries;
  if (const int rc = io_uring_queue_init_params(sq_entries, &ring_, &params); rc < 0) {
    unavailable("io_uring_setup", -rc);
  }
  void* memory = nullptr;
  if (::posix_memalign(&memory, 4096, sizeof(io_uring_buf) * buffers) != 0) {
    io_uring_queue_exit(&ring_);
    throw IoUringUnavailable("cannot allocate the provided-buffer ring");
  }
  buffer_ring_ = static_cast<io_uring_buf_ring*>(memory);
  io_uring_buf_reg reg{};
  reg.ring_addr = reinterpret_cast<uintptr_t>(buffer_ring_);
  reg.ring_entries = buffers;
  reg.bgid = buffer_group();
  if (const int rc = io_uring_register_buf_ring(&ring_, &reg, 0); rc < 0) {
    io_uring_queue_exit(&ring_);
    std::free(buffer_ring_);
    unavailable("io_uring_register_buf_ring", -rc);
  }
  buffers_.reset(new char[size_t{buffers} * buffer_bytes]);
  io_uring_buf_ring_init(buffer_ring_);
  for (unsigned id = 0; id < buffers; ++id) {
    io_uring_buf_ring_add(buffer_ring_, buffer(id), buffer_bytes, static_cast<unsigned short>(id),
                          io_uring_buf_ring_mask(buffers), static_cast<int>(id));
  }
  io_uring_buf_ring_advance(buffer_ring_, static_cast<int>(buffers));
}

UringRing::~UringRing() {
  io_uring_queue_exit(&ring_);  // cancels whatever is still in flight
  std::free(buffer_ring_);
}

io_uring_sqe* UringRing::sqe() {
  io_uring_sqe* entry = io_uring_get_sqe(&ring_);
  if (entry != nullptr) return entry;
  const int rc = io_uring_submit(&ring_);
  entry = io_uring_get_sqe(&ring_);
  if (entry == nullptr) {
    throw StoreError("io_uring submission queue is full and cannot be submitted: " +
                     errno_text(rc < 0 ? -rc : EBUSY));
  }
  return entry;
}

void UringRing::arm_multishot_recv(int fd, uint64_t user_data) {
  io_uring_sqe* entry = sqe();
  io_uring_prep_recv_multishot(entry, fd, nullptr, 0, 0);
  entry->flags |= IOSQE_BUFFER_SELECT;
  entry->buf_group = buffer_group();
  io_uring_sqe_set_data64(entry, user_data);
}

void UringRing::submit() {
  io_uring_submit(&ring_);
}

int UringRing::submit_and_wait() {
  const int rc = io_uring_submit_and_wait(&ring_, 1);
  return rc < 0 ? rc : 0;
}

void UringRing::recycle(unsigned id) {
  io_uring_buf_ring_add(buffer_ring_, buffer(id), buffer_bytes_, static_cast<unsigned short>(id),
                        io_uring_buf_ring_mask(buffer_count_), 0);
  io_uring_buf_ring_advance(buffer_ring_, 1);
}

}  // namespace ddp::rendezvous
