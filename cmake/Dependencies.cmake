# Third-party packages (all from Debian; scripts/setup.sh installs them).
# Their headers are SYSTEM includes so their warnings never count against ours.
find_package(Threads REQUIRED)
find_package(Boost 1.81 REQUIRED COMPONENTS system filesystem)
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(ZLIB REQUIRED)
# OpenSSL (Debian's libssl-dev): libcrypto for the job secret's HMAC; libssl for HTTPS to etcd
# members (Boost.Beast's ssl_stream).
find_package(OpenSSL REQUIRED)
find_package(BLAS REQUIRED)
# hwloc (Debian's libhwloc-dev): the machine's CPU, cache, NUMA and socket topology for
# --numa_binding (docs/binding.md); found through its pkg-config file, hwloc.pc.
find_package(PkgConfig REQUIRED)
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc>=2)

# Gloo: Debian ships headers and libgloo.so without a CMake config.
find_path(GLOO_INCLUDE_DIR gloo/context.h REQUIRED)
find_library(GLOO_LIBRARY gloo REQUIRED)
add_library(ddp_gloo INTERFACE)
target_include_directories(ddp_gloo SYSTEM INTERFACE ${GLOO_INCLUDE_DIR})
target_link_libraries(ddp_gloo INTERFACE ${GLOO_LIBRARY} Threads::Threads)
# Debian's package leaves out gloo/common/memory.h, which tcp/pair.h includes (needed by
# ProcessGroup::abort); a stand-in fills the gap only when it is missing.
if(NOT EXISTS ${GLOO_INCLUDE_DIR}/gloo/common/memory.h)
  target_include_directories(ddp_gloo SYSTEM INTERFACE
                             $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/worker_runtime/gloo_compat>)
endif()

add_library(ddp_boost INTERFACE)
target_link_libraries(ddp_boost INTERFACE Boost::boost Boost::system Threads::Threads)
# Boost.Process v2 uses Boost.Filesystem paths.
add_library(ddp_boost_process INTERFACE)
target_link_libraries(ddp_boost_process INTERFACE ddp_boost Boost::filesystem)
target_compile_definitions(ddp_boost INTERFACE BOOST_ASIO_NO_DEPRECATED)

# liburing (Debian's liburing-dev): the store server's io_uring loop. Optional: without it
# the server serves with epoll only.
option(DDP_ENABLE_IO_URING "Build the store server's io_uring loop when liburing is found" ON)
set(DDP_HAVE_IO_URING OFF)
if(DDP_ENABLE_IO_URING)
  find_path(URING_INCLUDE_DIR liburing.h)
  find_library(URING_LIBRARY uring)
  if(URING_INCLUDE_DIR AND URING_LIBRARY)
    set(DDP_HAVE_IO_URING ON)
    add_library(ddp_uring INTERFACE)
    target_include_directories(ddp_uring SYSTEM INTERFACE ${URING_INCLUDE_DIR})
    target_link_libraries(ddp_uring INTERFACE ${URING_LIBRARY})
  else()
    message(STATUS "liburing not found: the store server will use epoll only "
                   "(install liburing-dev for its io_uring loop)")
  endif()
endif()

if(DDP_BUILD_TESTS)
  find_package(Catch2 2 REQUIRED)
endif()
