# SLURM defaults and hostlists (owned by "multinode"); included by launcher/CMakeLists.txt.
target_sources(ddp_launcher PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/hostlist.cpp
  ${CMAKE_CURRENT_LIST_DIR}/slurm_env.cpp
)
