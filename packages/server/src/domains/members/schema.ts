import { z } from 'zod';
import { RoleSchema } from '../identity/schema.js';

export const MemberSchema = z
  .object({
    userId: z.string(),
    email: z.string(),
    name: z.string().nullable(),
    role: RoleSchema,
    joinedAt: z.string(),
  })
  .meta({ id: 'Member' });

export const InvitationSchema = z
  .object({
    id: z.string(),
    workspaceId: z.string(),
    email: z.string(),
    role: RoleSchema,
    status: z.enum(['pending', 'accepted', 'revoked', 'expired']),
    invitedBy: z.string().nullable().describe('User id of the inviter (null: the operator CLI)'),
    createdAt: z.string(),
    expiresAt: z.string(),
    acceptedAt: z.string().nullable(),
  })
  .meta({ id: 'Invitation' });

export const CreatedInvitationSchema = z
  .object({
    invitation: InvitationSchema,
    token: z.string().describe('The signed, single-use invitation token (`svc_iv_…`)'),
    url: z
      .string()
      .describe('The link to hand to the person: the console page with the token in its fragment'),
    mailed: z.boolean().describe('Whether the link was mailed (SMTP configured and the server accepted it)'),
  })
  .meta({ id: 'CreatedInvitation' });

const Role = z.enum(['owner', 'admin', 'member'], { error: 'role must be owner, admin or member' });

export const ChangeRoleInput = z.object({
  workspaceId: z.string(),
  userId: z.string(),
  role: Role,
});

export const InviteInput = z.object({
  workspaceId: z.string(),
  email: z
    .string({ error: 'email is required' })
    .trim()
    .min(1, 'email is required')
    .max(320, 'email must be 320 characters or less'),
  role: Role.default('member'),
});

const Token = z
  .string({ error: 'token is required' })
  .min(1, 'token is required')
  .max(200, 'token is too long');
const NewPassword = z
  .string({ error: 'password must be a string' })
  .max(1024, 'password must be 1024 characters or less');
const Name = z.string().trim().max(200, 'name must be 200 characters or less').nullish();

export const InvitationTokenInput = z.object({ token: Token });

export const InvitationPreviewSchema = z
  .object({
    workspace: z.object({ id: z.string(), name: z.string() }),
    email: z.string(),
    role: RoleSchema,
    expiresAt: z.string(),
    accountExists: z
      .boolean()
      .describe('An account with this email exists: accept signed in as it, or with its password'),
  })
  .meta({ id: 'InvitationPreview' });

export const AcceptInvitationInput = z.object({
  token: Token,
  password: NewPassword.optional().describe(
    'For a new account: its password (at least 8 characters). For an existing account not signed in: its password.',
  ),
  name: Name.describe('Display name of a new account'),
});

export const SignUpInput = z.object({
  email: z
    .string({ error: 'email is required' })
    .trim()
    .min(1, 'email is required')
    .max(320, 'email must be 320 characters or less'),
  password: z.string({ error: 'password is required' }).max(1024, 'password must be 1024 characters or less'),
  name: Name,
  workspaceName: z
    .string()
    .trim()
    .min(1, 'workspaceName must not be empty')
    .max(200, 'workspaceName must be 200 characters or less')
    .optional()
    .describe('Name of the workspace created for the new account (default: derived from the email)'),
});
