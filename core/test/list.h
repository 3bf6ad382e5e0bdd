/*
 * list.h - every C test, once. X(name, timeout_seconds)
 */
#define TY_TEST_LIST(X)                                                        \
  X(alloc_remote_home, 10)                                                     \
  X(alloc_stress, 120)                                                         \
  X(inject_fifo, 10)                                                           \
  X(inject_batch, 10)                                                          \
  X(inject_stress, 120)                                                        \
  X(spawnq_basic, 10)                                                          \
  X(spawnq_overflow, 10)                                                       \
  X(spawnq_steal, 10)                                                          \
  X(spawnq_chained_steal, 10)                                                  \
  X(spawnq_stress, 300)                                                        \
  X(mesh_basic, 10)                                                            \
  X(mesh_full, 10)                                                             \
  X(mesh_stress, 300)                                                          \
  X(wheel_basic, 10)                                                           \
  X(wheel_cancel, 10)                                                          \
  X(wheel_levels, 10)                                                          \
  X(wheel_stress, 60)                                                          \
  X(wheel_ticks, 30)                                                           \
  X(rt_start_stop, 30)                                                         \
  X(rt_spawn, 60)                                                              \
  X(rt_spawn_external, 60)                                                     \
  X(rt_run_here, 60)                                                           \
  X(rt_pingpong, 60)                                                           \
  X(rt_park_stress, 300)                                                       \
  X(rt_fifo_stress, 300)                                                       \
  X(rt_pending_messages, 30)                                                   \
  X(rt_dead_pid, 30)                                                           \
  X(rt_timers, 60)                                                             \
  X(rt_stop_with_actors, 30)                                                   \
  X(wd_slice, 30)                                                              \
  X(wd_kill_interrupts_only_target, 30)                                        \
  X(wd_kill_interrupts_fork, 30)                                               \
  X(wd_kill_stress, 120)                                                       \
  X(wd_stale_requests, 120)                                                    \
  X(wd_stuck, 30)                                                              \
  X(wd_blocked, 30)                                                            \
  X(wd_stop_abandons, 30)                                                      \
  X(rt_spawn_hook, 120)                                                        \
  X(mtimer_once, 30)                                                           \
  X(mtimer_interval, 30)                                                       \
  X(mtimer_no_burst, 30)                                                       \
  X(mtimer_owner_ends, 30)                                                     \
  X(mtimer_ownership, 30)                                                      \
  X(mtimer_storm, 120)                                                         \
  X(port_stress, 300)                                                          \
  X(port_leftovers, 30)                                                        \
  X(rt_mailbox_limit_stress, 300)                                              \
  X(rt_awaited_reply, 30)                                                      \
  X(list_ops, 10)                                                              \
  TY_TEST_LIST_IO(X)                                                           \
  TY_TEST_LIST_POOL(X)

/* The I/O backends' tests (core/test/test_io*.c). */
#define TY_TEST_LIST_IO(X)                                                     \
  X(io_wake_uring, 30)                                                         \
  X(io_wake_epoll, 30)                                                         \
  X(io_tcp_uring, 30)                                                          \
  X(io_tcp_epoll, 30)                                                          \
  X(io_bigsend_uring, 60)                                                      \
  X(io_bigsend_epoll, 60)                                                      \
  X(io_enobufs_uring, 30)                                                      \
  X(io_enobufs_epoll, 30)                                                      \
  X(io_cancel_uring, 30)                                                       \
  X(io_cancel_epoll, 30)                                                       \
  X(io_runtime_uring, 60)                                                      \
  X(io_runtime_epoll, 60)                                                      \
  X(io_udp_uring, 30)                                                          \
  X(io_udp_epoll, 30)                                                          \
  X(io_udp_stream_uring, 60)                                                   \
  X(io_udp_stream_epoll, 60)                                                   \
  X(io_submit_send_uring, 30)                                                  \
  X(io_submit_send_epoll, 30)                                                  \
  X(io_poll_ready_uring, 30)                                                   \
  X(io_poll_ready_epoll, 30)

/* The blocking pool's tests (core/test/test_pool*.c). */
#define TY_TEST_LIST_POOL(X)                                                   \
  X(pool_saturation, 30)                                                       \
  X(pool_queue_full, 30)                                                       \
  X(pool_queue_zero, 30)                                                       \
  X(pool_retire, 30)                                                           \
  X(pool_one_thread, 300)                                                      \
  X(pool_shutdown_queued, 30)                                                  \
  X(pool_stress, 300)                                                          \
  X(pool_abandons_hung_job, 30)                                                \
  X(shtab_basic, 10)                                                           \
  X(shtab_lru, 10)                                                             \
  X(shtab_ttl_lists, 10)                                                       \
  X(shtab_stress, 300)                                                         \
  X(shtab_fix_grow, 10)                                                        \
  X(shtab_fix_push, 10)                                                        \
  X(shtab_fix_refused, 10)                                                     \
  X(shtab_fix_cas, 10)                                                         \
  X(shtab_fix_stress, 300)                                                     \
  X(shtab_fix_overshoot, 300)
