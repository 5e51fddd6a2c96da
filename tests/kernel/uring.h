// SPDX-License-Identifier: Apache-2.0
// io_uring without liburing, for the kernel tests and their probes: one
// submission on a fresh ring, its completion's result.
#pragma once

#include <linux/io_uring.h>

#include <cstddef>

namespace agentcage::kt {

// Submit `sqe` on a new ring (setup_flags: 0 or IORING_SETUP_SQPOLL), wait
// for its completion and store the CQE's result in *res. Returns 0, or the
// errno of the step that failed to set the ring up or submit.
int uring_one(const io_uring_sqe& sqe, unsigned setup_flags, int* res);

// An IORING_OP_SENDMSG of `size` bytes on socket `fd` to the address `to`
// (`to_len` bytes), through uring_one.
int uring_sendmsg(int fd, const void* to, unsigned to_len, const void* data, size_t size, int* res);

}  // namespace agentcage::kt
