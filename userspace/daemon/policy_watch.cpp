// SPDX-License-Identifier: Apache-2.0
#include "daemon/policy_watch.h"

#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/policy_dir.h"
#include "util/log.h"

namespace agentcage::daemon {

Status PolicyWatch::watch() {
  if (!fd_) {
    fd_.reset(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
    if (!fd_) return Error::from_errno("inotify");
  }
  if (watch_ >= 0) return {};
  // Whole writes (close after write, rename into place), removals, and the
  // directory itself going away. No IN_MODIFY: a half-written file is never
  // read. IN_CREATE only for symbolic links (read() checks): a link is
  // whole when it appears, and a kubelet links a ConfigMap's new key after
  // its ..data switch.
  watch_ = ::inotify_add_watch(fd_.get(), dir_.c_str(),
                               IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_DELETE_SELF |
                                   IN_MOVE_SELF | IN_ATTRIB | IN_CREATE | IN_ONLYDIR);
  if (watch_ < 0) return Error::from_errno("policy directory " + dir_);
  return {};
}

bool PolicyWatch::is_created_link(const std::string& name) const {
  struct stat st {};
  return is_policy_file_name(name) && ::lstat((dir_ + "/" + name).c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

PolicyDirChanges PolicyWatch::read() {
  PolicyDirChanges out;
  alignas(inotify_event) char buf[16384];
  for (;;) {
    ssize_t len = ::read(fd_.get(), buf, sizeof buf);
    if (len <= 0) break;
    for (char* p = buf; p < buf + len;) {
      auto* ev = reinterpret_cast<inotify_event*>(p);
      p += sizeof(inotify_event) + ev->len;
      if (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) {
        if (watch_ >= 0)
          log::warn("policy directory " + dir_ + " went away; its policies stay loaded until it is back");
        if (watch_ >= 0) ::inotify_rm_watch(fd_.get(), watch_);
        watch_ = -1;
        continue;
      }
      if (ev->mask & IN_Q_OVERFLOW) out.rescan = true;
      std::string name = ev->len ? std::string(ev->name) : std::string();
      if ((ev->mask & IN_CREATE) && !is_created_link(name)) continue;  // its IN_CLOSE_WRITE follows
      if (is_policy_file_name(name))
        out.files.insert(name);
      else if (!name.empty() && name[0] == '.')
        out.rescan = true;  // e.g. a ConfigMap's ..data swap
    }
  }
  return out;
}

}  // namespace agentcage::daemon
