// SPDX-License-Identifier: Apache-2.0
#include "dns/ldns_api.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "util/shared_library.h"

namespace agentcage::dns {
namespace {

struct Loaded {
  LdnsApi api;
  Status status;
};

const Loaded& loaded() {
  static const Loaded once = [] {
    Loaded l;
    auto lib = SharedLibrary::open("libldns.so.3");
    if (!lib) {
      l.status = Error{"the resolver of a policy's domain rules needs ldns (Debian package libldns3): " +
                           lib.error().message,
                       ELIBACC};
      return l;
    }
#define AGENTCAGE_LDNS_TAKE(name)                                                                 \
  l.api.name = lib->function<decltype(&::ldns_##name)>("ldns_" #name);                           \
  if (!l.api.name && l.status.ok())                                                              \
    l.status = Error{lib->soname() + " has no function ldns_" #name +                            \
                     ": the resolver of a policy's domain rules needs ldns 1.8 (Debian package libldns3)",  \
                     ELIBACC};
    AGENTCAGE_LDNS_FUNCTIONS(AGENTCAGE_LDNS_TAKE)
#undef AGENTCAGE_LDNS_TAKE
    return l;
  }();
  return once;
}

}  // namespace

Status load_ldns() { return loaded().status; }

const LdnsApi& ldns() {
  const Loaded& l = loaded();
  if (!l.status.ok()) {
    std::fprintf(stderr, "agentcage: internal error: ldns used without load_ldns(): %s\n",
                 l.status.error().message.c_str());
    std::abort();
  }
  return l.api;
}

}  // namespace agentcage::dns
