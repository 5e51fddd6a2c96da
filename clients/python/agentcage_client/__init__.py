# SPDX-License-Identifier: Apache-2.0
"""agentcage's Python client: run code under the daemon's policies.

    from agentcage_client import run_python
    r = run_python("print(open('/etc/passwd').read())")
    r.exit_code, r.stdout, r.denials, r.artifacts
"""

from .client import (
    PROTOCOL,
    AgentcageError,
    AsyncClient,
    Client,
    RunResult,
    build_request,
    default_socket,
    run,
    run_python,
)

__all__ = [
    "PROTOCOL",
    "AgentcageError",
    "AsyncClient",
    "Client",
    "RunResult",
    "build_request",
    "default_socket",
    "run",
    "run_python",
]
__version__ = "0.1.0"
