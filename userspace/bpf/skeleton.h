// SPDX-License-Identifier: Apache-2.0
// The generated skeleton (agentcage.skel.h) for the Enforcer's source files.
// It is C: keep our warning set for our own code only.
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wpedantic"
#pragma GCC diagnostic ignored "-Wcast-align"
#include "agentcage.skel.h"
#pragma GCC diagnostic pop
