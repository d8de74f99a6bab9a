#pragma once
// Stand-in for gloo/common/memory.h, which Debian's libgloo-dev (0.0~git20220518) leaves out
// although gloo/transport/tcp/pair.h includes it. Only gloo_process_group.cpp includes
// pair.h, to name tcp::Pair::signalExceptionExternal for ProcessGroup::abort(); it never
// creates, copies or reads a Pair's members, so these declarations only have to make the
// headers complete, not match the library's layout. Used only when the system header is
// missing (cmake/Dependencies.cmake).
#include <memory>

namespace gloo {

// A strong reference that does not own the object's lifetime policy (declaration only).
template <class T>
class NonOwningPtr {
 public:
  NonOwningPtr() = default;
  explicit NonOwningPtr(std::shared_ptr<T> ptr) : ptr_(std::move(ptr)) {}
  T* get() const { return ptr_.get(); }
  explicit operator bool() const { return ptr_ != nullptr; }

 private:
  std::shared_ptr<T> ptr_;
};

// What an object holds so that weak references to it can be handed out.
template <class T>
class ShareableNonOwningPtr {
 public:
  ShareableNonOwningPtr() = default;
  explicit ShareableNonOwningPtr(T* ptr) : ptr_(ptr, [](T*) {}) {}
  [[nodiscard]] const std::shared_ptr<T>& shared() const { return ptr_; }

 private:
  std::shared_ptr<T> ptr_;
};

// A weak reference to an object holding a ShareableNonOwningPtr.
template <class T>
class WeakNonOwningPtr {
 public:
  WeakNonOwningPtr() = default;
  explicit WeakNonOwningPtr(const ShareableNonOwningPtr<T>& ptr) : ptr_(ptr.shared()) {}
  NonOwningPtr<T> lock() const { return NonOwningPtr<T>(ptr_.lock()); }

 private:
  std::weak_ptr<T> ptr_;
};

}  // namespace gloo
