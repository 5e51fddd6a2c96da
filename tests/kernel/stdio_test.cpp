// SPDX-License-Identifier: Apache-2.0
// What the caller pointed the run's stdin, stdout and stderr at stays the
// caller's (run/stdio.h): a regular-file stdout can only be appended to, a
// read-write stdin is never written, and a terminal's input cannot be
// pushed into (hook tty).
#include <fcntl.h>
#include <grp.h>
#include <pty.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "kernel_env.h"
#include "run_helpers.h"

namespace agentcage::kt {
namespace {

namespace fs = std::filesystem;

// Writes ARGV[1] chunks of 64 KiB of 'x' to stdout; exits 3 on EPIPE.
const char* const kChunkWriter =
    "import os, sys\n"
    "chunk = b'x' * 65536\n"
    "try:\n"
    "    for i in range(int(sys.argv[1])):\n"
    "        os.write(1, chunk)\n"
    "except BrokenPipeError:\n"
    "    sys.exit(3)\n";

class Stdio : public ::testing::Test {
 protected:
  void SetUp() override { AC_REQUIRE_ENFORCER(); }
};

// The run_helpers start() points stdout at a regular file opened without
// O_APPEND (as `>` does). Everything the run tries against it: seek back
// and rewrite, pwrite, truncate, punch a hole, clear O_APPEND, reopen
// through /proc/self/fd, fchmod. The file must hold exactly what it wrote,
// in order.
TEST_F(Stdio, RegularFileStdoutIsOnlyAppendedTo) {
  Ran r =
      run(py("import os, sys\n"
             "os.write(1, b'first line\\n')\n"
             "tries = []\n"
             "def attempt(name, f):\n"
             "    try:\n"
             "        f()\n"
             "        tries.append(name)\n"
             "    except OSError:\n"
             "        pass\n"
             "attempt('lseek', lambda: (os.lseek(1, 0, os.SEEK_SET), os.write(1, b'XXXXX')))\n"
             "attempt('pwrite', lambda: os.pwrite(1, b'YYYYY', 0))\n"
             "attempt('ftruncate', lambda: os.ftruncate(1, 0))\n"
             "import ctypes\n"
             "libc = ctypes.CDLL(None, use_errno=True)\n"
             "def punch():\n"
             "    # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE\n"
             "    if libc.fallocate(1, 3, ctypes.c_long(0), ctypes.c_long(4096)) != 0:\n"
             "        raise OSError(ctypes.get_errno(), 'fallocate')\n"
             "attempt('punch', punch)\n"
             "attempt('reopen', lambda: os.open('/proc/self/fd/1', os.O_WRONLY | os.O_TRUNC))\n"
             "attempt('fchmod', lambda: os.fchmod(1, 0o777))\n"
             "os.write(1, b'last line\\n')\n"
             "os.write(2, b'first err\\n')\n"
             "attempt('lseek', lambda: (os.lseek(2, 0, os.SEEK_SET), os.write(2, b'XXXXX')))\n"
             "attempt('pwrite', lambda: os.pwrite(2, b'YYYYY', 0))\n"
             "attempt('ftruncate', lambda: os.ftruncate(2, 0))\n"
             "attempt('reopen', lambda: os.open('/proc/self/fd/2', os.O_WRONLY | os.O_TRUNC))\n"
             "os.write(2, b'last err\\n')\n"));
  EXPECT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(r.out, "first line\nlast line\n") << r.describe();
  // stderr goes through the same relay (agentcage's own lines share it).
  EXPECT_NE(r.err.find("first err\nlast err\n"), std::string::npos) << r.describe();
  EXPECT_EQ(r.err.find("XXXXX"), std::string::npos) << r.describe();
  EXPECT_EQ(r.err.find("YYYYY"), std::string::npos) << r.describe();
}

// Output the run writes into the caller's files reaches the host's disk:
// limits.disk bounds it (stdout and stderr together). 4 MiB against a 1 MiB
// limit: the file holds exactly the limit, the run's write past it fails
// with EPIPE, the result and a warning say so. Half the limit arrives whole.
TEST_F(Stdio, OutputToFilesIsBoundedByTheDiskLimit) {
  auto args = [&](const char* chunks) {
    std::vector<std::string> a = py(kChunkWriter, {"--disk", "1Mi"});
    a.push_back(chunks);
    return a;
  };
  Ran big = run(args("64"));
  EXPECT_EQ(big.code, 3) << big.describe();
  EXPECT_EQ(big.out.size(), 1u << 20) << big.describe();
  EXPECT_EQ(big.out.find_first_not_of('x'), std::string::npos);
  EXPECT_EQ(big.result.value("output_truncated", false), true) << big.describe();
  EXPECT_NE(big.err.find("reached the disk limit"), std::string::npos) << big.err;

  Ran small = run(args("8"));
  EXPECT_EQ(small.code, 0) << small.describe();
  EXPECT_EQ(small.out.size(), 8u * 65536) << small.describe();
  EXPECT_EQ(small.result.value("output_truncated", true), false) << small.describe();
}

// The run's output relayed into the caller's file is written as the run's
// uid would write it for space (agentcage itself is root): it stops where an
// unprivileged writer's would, with ENOSPC, and never takes the blocks ext4
// keeps for root. A 16 MiB file system with half its blocks reserved: 12
// MiB of output stop short of 8 MiB, root can still write into its reserve
// afterwards, and a small output arrives whole.
TEST_F(Stdio, OutputToFilesNeverTakesTheBlocksReservedForRoot) {
  const fs::path dir = "/tmp/ac-stdio-reserved", image = "/tmp/ac-stdio-reserved.img";
  fs::create_directories(dir);
  const std::string make = "modprobe loop 2>/dev/null; truncate -s 16M " + image.string() +
                           " && mkfs.ext4 -q -F -m 50 " + image.string() + " && mount -o loop " +
                           image.string() + " " + dir.string();
  ASSERT_EQ(std::system(make.c_str()), 0) << make << " (needs e2fsprogs and the loop module)";
  struct Unmount {
    std::string cmd;
    ~Unmount() { (void)!std::system(cmd.c_str()); }
  } unmount{"umount " + dir.string() + "; rm -f " + image.string()};
  auto to_file = [](const fs::path& path) {
    SpawnOptions o;
    o.in_child = [path] {
      const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0 || ::dup2(fd, 1) < 0) ::_exit(97);
    };
    return o;
  };
  auto args = [&](const char* chunks) {
    std::vector<std::string> a = py(kChunkWriter, {"--disk", "64Mi"});
    a.push_back(chunks);
    return a;
  };
  Ran big = run(args("192"), to_file(dir / "big.out"));
  EXPECT_EQ(big.code, 3) << big.describe();
  const auto written = fs::file_size(dir / "big.out");
  EXPECT_GT(written, 4u << 20) << big.describe();
  EXPECT_LT(written, 8u << 20) << big.describe();
  EXPECT_NE(big.err.find("relaying the run's stdout: No space left on device"), std::string::npos)
      << big.describe();
  // The reserve is whole: root's own write of 4 MiB goes in.
  {
    std::ofstream more(dir / "root.bin", std::ios::binary);
    const std::string mib(1u << 20, 'r');
    for (int i = 0; i < 4; ++i) more << mib;
    more.flush();
    EXPECT_TRUE(more.good()) << "root could not write into its reserve";
  }
  fs::remove(dir / "big.out");
  fs::remove(dir / "root.bin");
  Ran small = run(args("8"), to_file(dir / "small.out"));
  EXPECT_EQ(small.code, 0) << small.describe();
  EXPECT_EQ(fs::file_size(dir / "small.out"), 8u * 65536) << small.describe();
  fs::remove(dir / "small.out");

  // A reserve given to a group (resgid, as `tune2fs -g` gives it) that
  // agentcage's caller is in is not the run's either.
  const std::string group = "mount -o remount,resgid=4242 " + dir.string();
  ASSERT_EQ(std::system(group.c_str()), 0) << group;
  SpawnOptions in_group = to_file(dir / "group.out");
  in_group.in_child = [inner = in_group.in_child] {
    const gid_t groups[] = {0, 4242};
    if (::setgroups(2, groups) != 0) ::_exit(96);
    inner();
  };
  Ran grouped = run(args("192"), in_group);
  EXPECT_EQ(grouped.code, 3) << grouped.describe();
  EXPECT_LT(fs::file_size(dir / "group.out"), 8u << 20) << grouped.describe();
  EXPECT_NE(grouped.err.find("relaying the run's stdout: No space left on device"), std::string::npos)
      << grouped.describe();
}

TEST_F(Stdio, OutputOrderAndIsattyOfPipesAndFilesStayUsual) {
  // Interleaved writes to stdout and stderr, both files: each in its order.
  Ran r =
      run(py("import os, sys\n"
             "for i in range(200):\n"
             "    os.write(1, b'%d\\n' % i)\n"
             "    os.write(2, b'e%d\\n' % i)\n"
             "print(os.isatty(1), file=sys.stderr)\n"));
  ASSERT_EQ(r.code, 0) << r.describe();
  std::string expect;
  for (int i = 0; i < 200; ++i) expect += std::to_string(i) + "\n";
  EXPECT_EQ(r.out, expect);
  EXPECT_NE(r.err.find("e199\nFalse\n"), std::string::npos) << r.err;
}

// A stdin opened read-write (`<>file`): the run reads it, but cannot write
// into it, truncate it or move the caller's offset.
TEST_F(Stdio, ReadWriteStdinIsNeverWritten) {
  const std::string path = "/tmp/ac-stdio-stdin.txt";
  std::ofstream(path) << "caller data\n";
  ::chmod(path.c_str(), 0666);  // DAC would let anyone write: only agentcage stops it
  SpawnOptions o;
  o.in_child = [path] {
    int fd = ::open(path.c_str(), O_RDWR);
    ::dup2(fd, 0);
  };
  Ran r = run(py("import os, sys\n"
                 "data = os.read(0, 100)\n"
                 "tries = []\n"
                 "for name, f in [('write', lambda: os.write(0, b'PWNED')),\n"
                 "                ('pwrite', lambda: os.pwrite(0, b'PWNED', 0)),\n"
                 "                ('ftruncate', lambda: os.ftruncate(0, 0)),\n"
                 "                ('reopen', lambda: os.open('/proc/self/fd/0', os.O_RDWR))]:\n"
                 "    try:\n"
                 "        f()\n"
                 "        tries.append(name)\n"
                 "    except OSError:\n"
                 "        pass\n"
                 "print(data.decode().strip(), '|', ' '.join(tries))\n"),
              o);
  EXPECT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(r.out, "caller data | \n") << r.describe();
  EXPECT_EQ(slurp(path), "caller data\n");
  ::unlink(path.c_str());
}

// A terminal without a session (a pty the caller opened, as agent frameworks
// do): the run, a session leader, can make it its controlling terminal, and
// then TIOCSTI would type into it. Denied in every scope, on 6.1 as on 6.12.
TEST_F(Stdio, NoInputPushedIntoTheCallersTerminal) {
  int master = -1, slave = -1;
  ASSERT_EQ(::openpty(&master, &slave, nullptr, nullptr, nullptr), 0) << std::strerror(errno);
  struct termios t {};
  ASSERT_EQ(::tcgetattr(slave, &t), 0);
  ::cfmakeraw(&t);
  ASSERT_EQ(::tcsetattr(slave, TCSANOW, &t), 0);
  SpawnOptions o;
  o.in_child = [slave] { ::dup2(slave, 0); };
  Ran r = run(py("import fcntl, termios, os\n"
                 "res = []\n"
                 "for name, req, arg in [('ctty', termios.TIOCSCTTY, 0), ('sti', termios.TIOCSTI, b'x')]:\n"
                 "    try:\n"
                 "        fcntl.ioctl(0, req, arg)\n"
                 "        res.append(name + ':ok')\n"
                 "    except OSError as e:\n"
                 "        res.append(name + ':' + str(e.errno))\n"
                 "print(os.isatty(0), ' '.join(res))\n"),
              o);
  EXPECT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(r.out.substr(0, 5), "True ") << r.describe();
  EXPECT_EQ(r.out.find("sti:ok"), std::string::npos) << r.describe();
  EXPECT_GE(denied(r, "tty"), 1u) << r.result.dump(2);
  // Nothing arrived in the terminal's input.
  ::fcntl(slave, F_SETFL, O_NONBLOCK);
  char c;
  EXPECT_EQ(::read(slave, &c, 1), -1);
  ::close(master);
  ::close(slave);
}

}  // namespace
}  // namespace agentcage::kt
