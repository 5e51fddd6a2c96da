// SPDX-License-Identifier: Apache-2.0
// A shared library opened when a program first needs it (dlopen), not linked:
// for libraries only some of its paths use. The agentcage program starts every
// direct run, and each library linked in is loaded and relocated on every
// start (bench/README.md, section 3); libsystemd (util/log.cpp) and ldns with
// OpenSSL under it (dns/ldns_api.h) are opened this way. A library opened is
// never closed: the functions taken from it stay valid for the process.
#pragma once

#include <dlfcn.h>

#include <string>

#include "util/result.h"

namespace agentcage {

class SharedLibrary {
 public:
  // dlopen(soname, RTLD_NOW | RTLD_LOCAL): every symbol resolved now, none
  // visible to other libraries. The error names the library and says why.
  static Result<SharedLibrary> open(const char* soname) {
    void* handle = ::dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* why = ::dlerror();
      return Error{std::string("cannot load ") + soname + ": " + (why ? why : "unknown error")};
    }
    return SharedLibrary(handle, soname);
  }

  // The function `name` as the type it is declared with (Fn is
  // decltype(&name) of the library's header, so the two cannot disagree);
  // nullptr when the library has none of that name.
  template <class Fn>
  Fn function(const char* name) const {
    return reinterpret_cast<Fn>(::dlsym(handle_, name));
  }
  const std::string& soname() const { return soname_; }

 private:
  SharedLibrary(void* handle, std::string soname) : handle_(handle), soname_(std::move(soname)) {}
  void* handle_;
  std::string soname_;
};

}  // namespace agentcage
