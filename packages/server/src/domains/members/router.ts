import { z } from 'zod';
import { assertSameOrigin, sessionCredential } from '../../auth/authenticate.js';
import type { Principal } from '../../auth/principal.js';
import { resolveSession, type SessionRecord } from '../../auth/sessions.js';
import { signInThrottle } from '../../auth/throttle.js';
import { publicProcedure, type RequestContext, router, sessionProcedure } from '../../trpc.js';
import { clientInfo, withCookie } from '../identity/router.js';
import { SignedInSchema } from '../identity/schema.js';
import { IdentityService } from '../identity/service.js';
import { assertSessionWorkspace } from '../identity/workspace-guard.js';
import {
  AcceptInvitationInput,
  ChangeRoleInput,
  CreatedInvitationSchema,
  InvitationPreviewSchema,
  InvitationSchema,
  InvitationTokenInput,
  InviteInput,
  MemberSchema,
  SignUpInput,
} from './schema.js';
import { type Actor, MembersService } from './service.js';

const tags = ['Members'];
const errors = {
  401: 'Authentication required',
  403: 'Insufficient permissions to manage members; Access denied to workspace',
};

export const membersService = (ctx: RequestContext) =>
  new MembersService(
    ctx.em,
    ctx.deps.identity,
    ctx.deps.config.signingSecret as string,
    signInThrottle(ctx.deps.db, ctx.deps.identity.signIn),
  );

const actorOf = (p: Principal): Actor => ({
  kind: 'person',
  userId: p.userId as string,
  role: p.role ?? 'member',
});

/** The origin links point at: `PUBLIC_BASE_URL`, else the origin of this request. */
export const publicOrigin = (ctx: RequestContext) =>
  ctx.deps.config.publicBaseUrl
    ? new URL(ctx.deps.config.publicBaseUrl).origin
    : `${ctx.req.protocol}://${ctx.req.get('host') ?? 'localhost'}`;

/** A session acting in `{workspaceId}` (any role; the service checks who may do what). */
const inWorkspace = sessionProcedure.use(async ({ ctx, getRawInput, next }) => {
  const raw = (await getRawInput()) as { workspaceId?: unknown } | undefined;
  assertSessionWorkspace(ctx.principal, raw?.workspaceId);
  return next({ ctx: { ...ctx, members: membersService(ctx), actor: actorOf(ctx.principal) } });
});

/** The valid session a public request carries, if any (cookie ones CSRF-checked). */
async function optionalSession(ctx: RequestContext): Promise<SessionRecord | undefined> {
  const credential = sessionCredential(ctx.req);
  if (!credential) return undefined;
  if (credential.via === 'cookie') assertSameOrigin(ctx.req, ctx.deps);
  return resolveSession(ctx.em, credential.token, ctx.deps.identity);
}

const MEMBERS = '/workspaces/{workspaceId}/members';
const INVITATIONS = '/workspaces/{workspaceId}/invitations';

export const membersRouter = router({
  list: inWorkspace
    .meta({
      openapi: {
        method: 'GET',
        path: MEMBERS,
        tags,
        protect: true,
        summary: 'The members of the workspace and their roles (any member)',
        errorResponses: errors,
      },
    })
    .input(z.object({ workspaceId: z.string() }))
    .output(z.object({ members: z.array(MemberSchema) }))
    .query(async ({ ctx }) => ({ members: await ctx.members.listMembers(ctx.principal.workspaceId) })),

  changeRole: inWorkspace
    .meta({
      openapi: {
        method: 'PATCH',
        path: `${MEMBERS}/{userId}`,
        tags,
        protect: true,
        summary: 'Change a member’s role (owners and admins; only owners touch the owner role)',
        description:
          'A member cannot change roles (403); an admin cannot grant, change or remove the owner role (403); the last owner cannot be demoted (409 `LAST_OWNER`). Takes effect on the member’s next request.',
        errorResponses: { ...errors, 404: 'Member not found', 409: 'LAST_OWNER' },
      },
    })
    .input(ChangeRoleInput)
    .output(z.object({ member: MemberSchema }))
    .mutation(async ({ ctx, input }) => ({
      member: await ctx.members.changeRole(ctx.actor, ctx.principal.workspaceId, input.userId, input.role),
    })),

  remove: inWorkspace
    .meta({
      openapi: {
        method: 'DELETE',
        path: `${MEMBERS}/{userId}`,
        tags,
        protect: true,
        summary: 'Remove a member, or leave (your own user id)',
        description:
          'Owners and admins remove members (only owners remove owners); anyone may leave. The last owner cannot leave or be removed (409 `LAST_OWNER`). The removed person’s sessions lose the workspace at once.',
        errorResponses: { ...errors, 404: 'Member not found', 409: 'LAST_OWNER' },
      },
    })
    .input(z.object({ workspaceId: z.string(), userId: z.string() }))
    .output(z.object({ removed: z.literal(true), userId: z.string() }))
    .mutation(async ({ ctx, input }) => {
      await ctx.members.removeMember(ctx.actor, ctx.principal.workspaceId, input.userId);
      // The id as stored (UUIDs in lower case), whatever the case the path used.
      return { removed: true as const, userId: input.userId.toLowerCase() };
    }),

  invite: inWorkspace
    .meta({
      openapi: {
        method: 'POST',
        path: INVITATIONS,
        tags,
        protect: true,
        summary: 'Invite someone by email (owners and admins)',
        description:
          'Returns a signed, single-use link that expires after `AUTH_INVITATION_TTL_SECONDS`, and mails it when SMTP is configured. Only owners invite owners. A new invitation to the same email revokes the pending one.',
        errorResponses: { ...errors, 400: 'Validation error', 409: 'Already a member of this workspace' },
      },
      status: 201,
    })
    .input(InviteInput)
    .output(CreatedInvitationSchema)
    .mutation(({ ctx, input }) =>
      ctx.members.invite(ctx.actor, ctx.principal.workspaceId, input, publicOrigin(ctx), ctx.deps.log),
    ),

  listInvitations: inWorkspace
    .meta({
      openapi: {
        method: 'GET',
        path: INVITATIONS,
        tags,
        protect: true,
        summary: 'The workspace’s invitations, newest first, with their status (owners and admins)',
        errorResponses: errors,
      },
    })
    .input(z.object({ workspaceId: z.string() }))
    .output(z.object({ invitations: z.array(InvitationSchema) }))
    .query(async ({ ctx }) => ({
      invitations: await ctx.members.listInvitations(ctx.actor, ctx.principal.workspaceId),
    })),

  revokeInvitation: inWorkspace
    .meta({
      openapi: {
        method: 'DELETE',
        path: `${INVITATIONS}/{invitationId}`,
        tags,
        protect: true,
        summary: 'Revoke a pending invitation (its link stops working)',
        errorResponses: { ...errors, 404: 'Invitation not found' },
      },
    })
    .input(z.object({ workspaceId: z.string(), invitationId: z.string() }))
    .output(z.object({ invitation: InvitationSchema }))
    .mutation(async ({ ctx, input }) => ({
      invitation: await ctx.members.revokeInvitation(
        ctx.actor,
        ctx.principal.workspaceId,
        input.invitationId,
      ),
    })),

  previewInvitation: publicProcedure
    .meta({
      openapi: {
        method: 'POST',
        path: '/auth/invitations/preview',
        tags: ['Auth'],
        summary: 'What an invitation link offers (workspace, email, role, expiry)',
        errorResponses: { 400: 'Invalid or expired invitation' },
      },
    })
    .input(InvitationTokenInput)
    .output(InvitationPreviewSchema)
    .mutation(({ ctx, input }) => membersService(ctx).previewInvitation(input.token)),

  acceptInvitation: publicProcedure
    .meta({
      openapi: {
        method: 'POST',
        path: '/auth/invitations/accept',
        tags: ['Auth'],
        summary: 'Accept an invitation: join the workspace and get a session acting in it',
        description:
          'For an email without an account, `password` creates it. For an existing account, the request carries a session of that person or `password` is theirs. The link works once; a forged, used, revoked or expired one answers 400 `Invalid or expired invitation`.',
        errorResponses: {
          400: 'Invalid or expired invitation; password is required to create your account',
          401: 'Sign in as the invited person; Invalid email or password',
          429: 'Too many failed sign-ins',
        },
      },
    })
    .input(AcceptInvitationInput)
    .output(SignedInSchema)
    .mutation(async ({ ctx, input }) => {
      return withCookie(ctx, async () => {
        const caller = await optionalSession(ctx);
        const accepted = await membersService(ctx).acceptInvitation(
          input.token,
          { password: input.password, name: input.name },
          caller,
          ctx.req.ip ?? null,
        );
        return new IdentityService(ctx.em, ctx.deps.identity).openSession(
          accepted.userId,
          'invitation',
          clientInfo(ctx),
          accepted.workspaceId,
        );
      });
    }),

  signUp: publicProcedure
    .meta({
      openapi: {
        method: 'POST',
        path: '/auth/sign-up',
        tags: ['Auth'],
        summary: 'Create an account and a workspace of its own (when AUTH_SIGNUP_ENABLED)',
        description:
          'Off by default (403 `Sign-up is disabled`): operators invite people instead. The new account owns a new workspace and gets a session acting in it.',
        errorResponses: {
          400: 'Validation error',
          403: 'Sign-up is disabled',
          409: 'An account with this email already exists',
        },
      },
      status: 201,
    })
    .input(SignUpInput)
    .output(SignedInSchema)
    .mutation(async ({ ctx, input }) => {
      return withCookie(ctx, async () => {
        const { userId, workspaceId } = await membersService(ctx).signUp(input);
        return new IdentityService(ctx.em, ctx.deps.identity).openSession(
          userId,
          'signup',
          clientInfo(ctx),
          workspaceId,
        );
      });
    }),
});
