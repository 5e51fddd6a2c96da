// SPDX-License-Identifier: Apache-2.0
#include "uring.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>

namespace agentcage::kt {

int uring_one(const io_uring_sqe& sqe, unsigned setup_flags, int* res) {
  io_uring_params p{};
  p.flags = setup_flags;
  if (setup_flags & IORING_SETUP_SQPOLL) p.sq_thread_idle = 1000;
  int fd = static_cast<int>(::syscall(__NR_io_uring_setup, 4, &p));
  if (fd < 0) return errno;
  size_t sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
  size_t cq_len = p.cq_off.cqes + p.cq_entries * sizeof(io_uring_cqe);
  const bool single = (p.features & IORING_FEAT_SINGLE_MMAP) != 0;
  if (single) sq_len = cq_len = std::max(sq_len, cq_len);
  const size_t sqes_len = p.sq_entries * sizeof(io_uring_sqe);
  void* sq =
      ::mmap(nullptr, sq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_SQ_RING);
  void* cq = single ? sq
                    : ::mmap(nullptr, cq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd,
                             IORING_OFF_CQ_RING);
  void* sqes =
      ::mmap(nullptr, sqes_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_SQES);
  if (sq == MAP_FAILED || cq == MAP_FAILED || sqes == MAP_FAILED) {
    int err = errno;
    ::close(fd);
    return err;
  }
  auto at = [](void* base, unsigned off) {
    return reinterpret_cast<unsigned*>(static_cast<char*>(base) + off);
  };
  unsigned* sq_tail = at(sq, p.sq_off.tail);
  unsigned sq_mask = *at(sq, p.sq_off.ring_mask);
  unsigned* sq_array = at(sq, p.sq_off.array);
  unsigned tail = *sq_tail;
  unsigned idx = tail & sq_mask;
  static_cast<io_uring_sqe*>(sqes)[idx] = sqe;
  sq_array[idx] = idx;
  __atomic_store_n(sq_tail, tail + 1, __ATOMIC_RELEASE);

  unsigned* cq_head = at(cq, p.cq_off.head);
  unsigned* cq_tail = at(cq, p.cq_off.tail);
  unsigned cq_mask = *at(cq, p.cq_off.ring_mask);
  auto* cqes = reinterpret_cast<io_uring_cqe*>(static_cast<char*>(cq) + p.cq_off.cqes);
  unsigned enter_flags = IORING_ENTER_GETEVENTS;
  if (setup_flags & IORING_SETUP_SQPOLL) enter_flags |= IORING_ENTER_SQ_WAKEUP;
  int err = 0;
  unsigned to_submit = 1;
  for (int tries = 0; tries < 1000; ++tries) {
    if (__atomic_load_n(cq_tail, __ATOMIC_ACQUIRE) != *cq_head) break;
    if (::syscall(__NR_io_uring_enter, fd, to_submit, 1, enter_flags, nullptr, 0) < 0 && errno != EINTR) {
      err = errno;
      break;
    }
    to_submit = 0;
  }
  if (!err && __atomic_load_n(cq_tail, __ATOMIC_ACQUIRE) == *cq_head) err = ETIMEDOUT;
  if (!err) {
    *res = cqes[*cq_head & cq_mask].res;
    __atomic_store_n(cq_head, *cq_head + 1, __ATOMIC_RELEASE);
  }
  ::munmap(sqes, sqes_len);
  if (!single) ::munmap(cq, cq_len);
  ::munmap(sq, sq_len);
  ::close(fd);
  return err;
}

int uring_sendmsg(int fd, const void* to, unsigned to_len, const void* data, size_t size, int* res) {
  iovec iov{const_cast<void*>(data), size};
  msghdr msg{};
  msg.msg_name = const_cast<void*>(to);
  msg.msg_namelen = to_len;
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  io_uring_sqe sqe{};
  sqe.opcode = IORING_OP_SENDMSG;
  sqe.fd = fd;
  sqe.addr = reinterpret_cast<uint64_t>(&msg);
  sqe.len = 1;
  return uring_one(sqe, 0, res);
}

}  // namespace agentcage::kt
