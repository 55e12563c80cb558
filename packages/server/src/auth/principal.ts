/** A person's role in a workspace. */
export type Role = 'owner' | 'admin' | 'member';

/** Who is calling, resolved once per request by the authentication layer. */
export interface Principal {
  workspaceId: string;
  workspaceName: string;
  via: 'apiKey' | 'widget' | 'session';
  keyId?: string;
  keyName?: string | null;
  /** Set for sessions: the person signed in, their role in the workspace, the session's id. */
  userId?: string;
  role?: Role;
  sessionId?: string;
  /** Set for app-scoped widget tokens. */
  appId?: string;
  /** Set for widget tokens: the token's id, for per-token caps. */
  widgetTokenId?: string;
  /** Set for widget tokens bound to one end user: only that user's threads are visible. */
  widgetSubject?: string;
}

/** The principal of an API key row (`k.id`, `k.name`, `k.workspace_id`, `w.name as workspace_name`). */
export function apiKeyPrincipal(row: {
  id: string;
  name: string | null;
  workspace_id: string;
  workspace_name: string;
}): Principal {
  return {
    via: 'apiKey',
    workspaceId: row.workspace_id,
    workspaceName: row.workspace_name,
    keyId: row.id,
    keyName: row.name,
  };
}
