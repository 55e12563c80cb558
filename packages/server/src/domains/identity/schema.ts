import { z } from 'zod';

export const RoleSchema = z.enum(['owner', 'admin', 'member']).meta({ id: 'Role' });

export const WorkspaceMembershipSchema = z
  .object({ id: z.string(), name: z.string(), role: RoleSchema })
  .meta({ id: 'WorkspaceMembership' });

export const AuthUserSchema = z
  .object({ id: z.string(), email: z.string(), name: z.string().nullable() })
  .meta({ id: 'AuthUser' });

export const AuthSessionSchema = z
  .object({
    session: z.object({
      id: z.string(),
      method: z.enum(['password', 'oidc', 'invitation', 'signup']),
      createdAt: z.string(),
      expiresAt: z.string().describe('Absolute end of the session'),
      idleExpiresAt: z.string().describe('When the session ends if it is not used before'),
    }),
    user: AuthUserSchema,
    workspace: WorkspaceMembershipSchema.nullable().describe(
      'The workspace the session acts in (null: none chosen, or the membership is gone)',
    ),
    workspaces: z.array(WorkspaceMembershipSchema).describe('Every workspace the user belongs to'),
  })
  .meta({ id: 'AuthSession' });
export type AuthSessionDto = z.infer<typeof AuthSessionSchema>;

export const SignedInSchema = AuthSessionSchema.extend({
  token: z
    .string()
    .describe(
      'The session token (`svc_ss_…`), shown once: send it as `Authorization: Bearer …`. Browsers get the same session as an HTTP-only cookie.',
    ),
}).meta({ id: 'SignedIn' });
export type SignedInDto = z.infer<typeof SignedInSchema>;

const Email = z
  .string({ error: 'email is required' })
  .trim()
  .min(1, 'email is required')
  .max(320, 'email must be 320 characters or less');
const Password = z
  .string({ error: 'password is required' })
  .min(1, 'password is required')
  .max(1024, 'password must be 1024 characters or less');

export const SignInInput = z.object({
  email: Email,
  password: Password,
  workspaceId: z.string().optional().describe('The workspace to act in; default: the first the user joined'),
});

export const SwitchWorkspaceInput = z.object({
  workspaceId: z.string({ error: 'workspaceId is required' }).min(1, 'workspaceId is required'),
});

export const SessionListItemSchema = z
  .object({
    id: z.string(),
    method: z.enum(['password', 'oidc', 'invitation', 'signup']),
    workspaceId: z.string().nullable(),
    createdAt: z.string(),
    lastSeenAt: z.string(),
    expiresAt: z.string(),
    ip: z.string().nullable(),
    userAgent: z.string().nullable(),
    current: z.boolean().describe('The session of this request'),
  })
  .meta({ id: 'SessionListItem' });
export type SessionListItemDto = z.infer<typeof SessionListItemSchema>;

export const AuthProvidersSchema = z
  .object({
    password: z.boolean().describe('Email and password sign-in (`POST /auth/sign-in`): always available'),
    signUp: z.boolean().describe('Open sign-up (`POST /auth/sign-up`, `AUTH_SIGNUP_ENABLED`)'),
    oidc: z
      .object({
        name: z.string().describe('What the button says: "Sign in with <name>" (`OIDC_PROVIDER_NAME`)'),
        startUrl: z
          .string()
          .describe(
            'Where a browser goes to sign in, relative to the server’s origin (`/api/v1/auth/oidc/start`); add `?returnTo=<path on this site>`',
          ),
      })
      .nullable()
      .describe('Sign-in with the identity provider; null when `OIDC_ISSUER` is not set'),
  })
  .meta({ id: 'AuthProviders' });
export type AuthProvidersDto = z.infer<typeof AuthProvidersSchema>;

export const ChangePasswordInput = z.object({
  currentPassword: z
    .string({ error: 'currentPassword is required' })
    .min(1, 'currentPassword is required')
    .max(1024, 'currentPassword must be 1024 characters or less'),
  newPassword: z
    .string({ error: 'newPassword is required' })
    .min(1, 'newPassword is required')
    .max(1024, 'newPassword must be 1024 characters or less'),
});

export const PasswordChangedSchema = z
  .object({
    passwordChanged: z.literal(true),
    sessionsRevoked: z.number().int().describe('Other sessions of the user that were signed out'),
  })
  .meta({ id: 'PasswordChanged' });
