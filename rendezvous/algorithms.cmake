# Rendezvous algorithms (static and dynamic), written against Store; owned by "multinode".
target_sources(ddp_rendezvous PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/rdzv_assignment.cpp
  ${CMAKE_CURRENT_LIST_DIR}/rdzv_changes.cpp
  ${CMAKE_CURRENT_LIST_DIR}/rdzv_watcher.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dynamic_rendezvous.cpp
)
target_sources(ddp_rendezvous PRIVATE ${CMAKE_CURRENT_LIST_DIR}/static_rendezvous.cpp)
target_sources(ddp_rendezvous PRIVATE ${CMAKE_CURRENT_LIST_DIR}/rdzv_conf.cpp)
target_sources(ddp_rendezvous PRIVATE ${CMAKE_CURRENT_LIST_DIR}/rdzv_exit_barrier.cpp)
target_sources(ddp_rendezvous PRIVATE ${CMAKE_CURRENT_LIST_DIR}/rdzv_connect.cpp)
