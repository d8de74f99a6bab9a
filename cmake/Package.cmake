# cpack -G DEB (docs/install.md): one package, ddplaunch, holding what cmake --install puts in
# place, under /usr. Its Depends names the Debian 12 packages of every shared library the
# programs load; tests/package/deb_test.sh checks that list against the unpacked binaries, so
# a new library without a new dependency fails there. CUDA and NCCL are not declared: NVIDIA
# ships them, often outside dpkg (docs/install.md says what a GPU build needs).
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME ddplaunch)
set(CPACK_PACKAGE_VENDOR "ddplaunch")
set(CPACK_PACKAGE_CONTACT "ddplaunch maintainers <ddplaunch@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "native torchrun: launch and supervise data-parallel training workers")
string(CONCAT CPACK_PACKAGE_DESCRIPTION
       "ddplaunch starts one worker per GPU or CPU slot with torchrun's environment contract, "
       "hosts or joins a TCP rendezvous store, and restarts the group when a worker fails or "
       "nodes join or leave. Includes ddpstore (a standalone store server), the example "
       "trainer, the Python modules ddplaunch_recovery (in-place recovery for PyTorch DDP scripts) "
       "and ddplaunch_progress, and the worker runtime library with its headers and CMake package for native "
       "trainers.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)  # the programs; the static libraries lose only their debug info:
set(CPACK_DDP_STRIP ${CMAKE_STRIP})
set(CPACK_PRE_BUILD_SCRIPTS ${PROJECT_SOURCE_DIR}/cmake/CPackStripArchives.cmake)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(_ddp_deb_depends
    "libc6" "libstdc++6" "libgcc-s1" "libboost-filesystem1.81.0" "libgloo0" "libssl3"
    "zlib1g" "libblas3 | libblas.so.3" "libhwloc15")
if(DDP_HAVE_IO_URING)
  list(APPEND _ddp_deb_depends "liburing2")
endif()
list(JOIN _ddp_deb_depends ", " CPACK_DEBIAN_PACKAGE_DEPENDS)
# Building against the installed worker runtime (find_package(ddplaunch)) needs the headers
# and CMake files of these.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS
    "cmake, libboost-system1.81-dev, nlohmann-json3-dev, libgloo-dev, zlib1g-dev, libssl-dev")
if(DDP_HAVE_IO_URING)
  string(APPEND CPACK_DEBIAN_PACKAGE_SUGGESTS ", liburing-dev")
endif()
include(CPack)
