/** Who is calling, resolved once per request by the authentication layer. */
export interface Principal {
  workspaceId: string;
  workspaceName: string;
  via: 'apiKey' | 'widget' | 'session';
  keyId?: string;
  keyName?: string | null;
  userId?: string;
  role?: 'owner' | 'admin' | 'member';
  /** Set for app-scoped widget tokens. */
  appId?: string;
  /** Set for widget tokens: the token's id, for per-token caps. */
  widgetTokenId?: string;
  /** Set for widget tokens bound to one end user: only that user's threads are visible. */
  widgetSubject?: string;
}
