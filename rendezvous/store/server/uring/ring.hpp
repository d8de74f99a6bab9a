#pragma once
// The store server's io_uring: one ring (SINGLE_ISSUER + DEFER_TASKRUN: only the thread that
// created it submits, and completions run as its work inside io_uring_enter) and one ring of
// provided receive buffers that multishot recvs take from. Every request carries a tag in
// its user_data: the owner's address with the operation in the low 3 bits.
#include <liburing.h>

#include <cstdint>
#include <memory>
#include <string_view>

namespace ddp::rendezvous {

enum class UringOp : uint64_t {
  kIgnore = 0,
  kAccept = 1,
  kWake = 2,
  kTimer = 3,
  kRecv = 4,
  kSend = 5,
  kPoll = 6,
  kSweep = 7,  // the FrameDeadlines sweep's timeout
};

inline uint64_t uring_tag(const void* owner, UringOp op) {
  return reinterpret_cast<uintptr_t>(owner) | static_cast<uint64_t>(op);
}
inline UringOp uring_op(uint64_t user_data) {
  return static_cast<UringOp>(user_data & 7U);
}
template <class T>
T* uring_owner(uint64_t user_data) {
  // The kernel hands back the 64 bits it was given; they were an address (uring_tag).
  return reinterpret_cast<T*>(  // NOLINT(performance-no-int-to-ptr)
      static_cast<uintptr_t>(user_data & ~uint64_t{7}));
}

class UringRing {
 public:
  // sq_entries and buffers are powers of two. Throws IoUringUnavailable naming the call the
  // kernel refused and why (no io_uring, disabled by sysctl or seccomp, older than 6.1).
  UringRing(unsigned sq_entries, unsigned cq_entries, unsigned buffers, unsigned buffer_bytes);
  ~UringRing();
  UringRing(const UringRing&) = delete;
  UringRing& operator=(const UringRing&) = delete;

  // A free submission entry; submits what is queued first when the queue is full.
  io_uring_sqe* sqe();
  // Queues a multishot recv on fd that selects provided buffers; completions carry user_data.
  void arm_multishot_recv(int fd, uint64_t user_data);
  // Submits what is queued now (for requests that must be issued before the caller goes on).
  void submit();
  // Submits what is queued and waits for at least one completion. 0 or -errno.
  int submit_and_wait();
  [[nodiscard]] io_uring* raw() { return &ring_; }

  // Provided receive buffers: the group multishot recvs select from, a buffer by the id a
  // completion names, and giving it back to the kernel once its bytes are used.
  [[nodiscard]] static constexpr uint16_t buffer_group() { return 0; }
  [[nodiscard]] char* buffer(unsigned id) { return buffers_.get() + size_t{id} * buffer_bytes_; }
  void recycle(unsigned id);

 private:
  io_uring ring_{};
  io_uring_buf_ring* buffer_ring_ = nullptr;
  unsigned buffer_count_ = 0;
  unsigned buffer_bytes_ = 0;
  std::unique_ptr<char[]> buffers_;  // not initialised: pages are touched only when used
};

// The provided buffer a recv completion carries (if any), given back to the kernel when this
// goes away, however the handler is left.
class ProvidedBuffer {
 public:
  ProvidedBuffer(UringRing& ring, const io_uring_cqe& cqe)
      : ring_(ring),
        has_(((cqe.flags & IORING_CQE_F_BUFFER) != 0)),
        id_(cqe.flags >> IORING_CQE_BUFFER_SHIFT),
        size_(has_ && cqe.res > 0 ? static_cast<size_t>(cqe.res) : 0) {}
  ~ProvidedBuffer() {
    if (has_) ring_.recycle(id_);
  }
  ProvidedBuffer(const ProvidedBuffer&) = delete;
  ProvidedBuffer& operator=(const ProvidedBuffer&) = delete;

  // The bytes received (empty for a completion without data).
  [[nodiscard]] std::string_view bytes() const { return {ring_.buffer(id_), size_}; }

 private:
  UringRing& ring_;
  bool has_;
  unsigned id_;
  size_t size_;
};

}  // namespace ddp::rendezvous
