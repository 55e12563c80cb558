import type { AuthPolicy, PrincipalKind } from '../auth/authenticate.js';

/** The credentials of the API, as the OpenAPI document names them. */
export const SECURITY_SCHEMES = {
  ApiKey: { type: 'http', scheme: 'bearer', description: 'Workspace API key `svc_ai_…`' },
  SessionToken: {
    type: 'http',
    scheme: 'bearer',
    description: 'Session token `svc_ss_…` of a signed-in person (`POST /auth/sign-in`, OIDC)',
  },
  SessionCookie: {
    type: 'apiKey',
    in: 'cookie',
    name: 'aisuite_session',
    description:
      'The same session as an HTTP-only cookie (browsers). State-changing requests must come from a trusted origin (`Origin`/`Referer`).',
  },
  WidgetToken: {
    type: 'http',
    scheme: 'bearer',
    description: 'Widget token `svc_wt_…` (Apps endpoints only, from browser widgets)',
  },
} as const;

type SchemeName = keyof typeof SECURITY_SCHEMES;

const SCHEMES_OF: Record<PrincipalKind, SchemeName[]> = {
  apiKey: ['ApiKey'],
  session: ['SessionToken', 'SessionCookie'],
  widget: ['WidgetToken'],
};

/**
 * An operation's `security`: one alternative per credential its principal kinds allow; `[]`
 * for a public operation.
 */
export function securityFor(policy: AuthPolicy | readonly PrincipalKind[]): Record<string, string[]>[] {
  const kinds = 'kinds' in policy ? policy.kinds : policy;
  return kinds.flatMap((k) => SCHEMES_OF[k].map((name) => ({ [name]: [] })));
}

/** The principal kinds an operation's `security` names (the inverse of `securityFor`). */
export function kindsOfSecurity(security: Record<string, string[]>[] | undefined): PrincipalKind[] {
  const names = new Set((security ?? []).flatMap((s) => Object.keys(s)));
  return (Object.keys(SCHEMES_OF) as PrincipalKind[]).filter((k) => SCHEMES_OF[k].some((n) => names.has(n)));
}
