// SPDX-License-Identifier: Apache-2.0
// The annotations agentcage reads from a container's config.json, and the
// rule for a container id. Annotation values are written by whoever starts
// the container (a pod author under Kubernetes): they may pick a policy by
// name, never a path.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "util/result.h"

namespace agentcage::oci {

// The policy a container is confined by: a policy NAME the daemon loaded.
inline constexpr std::string_view kPolicyAnnotation = "io.agentcage.policy";
// The container path (a bind mount's destination) that is the policy's ${workspace}.
inline constexpr std::string_view kWorkspaceAnnotation = "io.agentcage.workspace";

// Whether the container `id` with these annotations is a pod's sandbox
// (pause) container, which carries the pod's annotations too (containerd's
// pod_annotations go to both) and is never confined: containerd's
// io.kubernetes.cri.container-type or CRI-O's io.kubernetes.cri-o.ContainerType
// is "sandbox", AND the same runtime's sandbox id (io.kubernetes.cri.sandbox-id,
// io.kubernetes.cri-o.SandboxID) is the container's own id: a pod's sandbox
// is the container its runtime made under the sandbox's id. The marker alone
// is not enough: podman before 4.6 copies an image's own annotations into
// config.json, and Docker takes any --annotation, so a workload could mark
// itself a sandbox; its random id it cannot know in advance.
bool is_sandbox_container(const std::map<std::string, std::string>& annotations, std::string_view id);

// The rule in words, for messages and docs.
inline constexpr std::string_view kContainerIdRule =
    "1 to 128 bytes of letters, digits, '_', '.' and '-', not starting with '.' or '-'";
inline constexpr size_t kMaxContainerIdBytes = 128;

// A container id agentcage accepts (runc's own rule, and every 64-hex id of
// podman, Docker and CRI). The error says what is wrong and quotes the id.
Status check_container_id(std::string_view id);

}  // namespace agentcage::oci
