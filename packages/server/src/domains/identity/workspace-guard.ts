import type { Principal } from '../../auth/principal.js';
import { ACCESS_DENIED_TO_WORKSPACE } from './service.js';

/**
 * `{workspaceId}` of a session-only workspace path must be the workspace the session acts in:
 * 403 `Access denied to workspace` otherwise (switch first with `POST /auth/workspace`). A
 * session of workspace A never acts in B by changing a path id.
 */
export function assertSessionWorkspace(principal: Principal, pathWorkspaceId: unknown): void {
  if (typeof pathWorkspaceId !== 'string' || pathWorkspaceId !== principal.workspaceId) {
    throw ACCESS_DENIED_TO_WORKSPACE();
  }
}
