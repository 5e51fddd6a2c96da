# SPDX-License-Identifier: Apache-2.0
# cmake -DOBJECT=agentcage.bpf.o -DHEADER=agentcage.digest.h -P object_digest.cmake
# The digest of the BPF object the skeleton embeds, computed when it is
# built: it names the pinned set's directory (/sys/fs/bpf/agentcage/DIGEST),
# and every run asks for it, so it is not hashed again per run.
file(SHA256 "${OBJECT}" digest)
string(SUBSTRING "${digest}" 0 16 digest)
file(WRITE "${HEADER}.tmp"
     "// Generated from agentcage.bpf.o by cmake/object_digest.cmake: the first 16 hex\n"
     "// digits of its SHA-256.\n"
     "#pragma once\n"
     "#define AGENTCAGE_BPF_OBJECT_DIGEST \"${digest}\"\n")
file(RENAME "${HEADER}.tmp" "${HEADER}")
