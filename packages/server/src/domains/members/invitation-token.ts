import { createHmac, timingSafeEqual } from 'node:crypto';
import type { Role } from '../workspaces/entities.js';

/**
 * Invitation links carry a signed token: `svc_iv_` + the invitation id (32 hex digits) + `.` +
 * HMAC-SHA256 (base64url) under the server's signing secret over the id, workspace, email, role
 * and expiry. Nothing secret is stored; changing any of these (or the secret) voids the link.
 * Expiry and single use are enforced against the row.
 */
export const INVITATION_TOKEN_PREFIX = 'svc_iv_';
const PATTERN = /^svc_iv_([0-9a-f]{32})\.([A-Za-z0-9_-]{43})$/;

export interface SignedFields {
  id: string;
  workspaceId: string;
  email: string;
  role: Role;
  expiresAt: Date;
}

function mac(secret: string, f: SignedFields): Buffer {
  const expiry = Math.floor(f.expiresAt.getTime() / 1000);
  return createHmac('sha256', secret)
    .update(`invitation\n${f.id}\n${f.workspaceId}\n${f.email.toLowerCase()}\n${f.role}\n${expiry}`)
    .digest();
}

export function signInvitation(secret: string, f: SignedFields): string {
  return `${INVITATION_TOKEN_PREFIX}${f.id.replaceAll('-', '')}.${mac(secret, f).toString('base64url')}`;
}

/** The invitation id a well-formed token names (not yet verified), or undefined. */
export function invitationIdOf(token: string): string | undefined {
  const m = PATTERN.exec(token);
  if (!m?.[1]) return undefined;
  const h = m[1];
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/** Whether `token` is the signature of exactly these fields (constant-time comparison). */
export function verifyInvitation(secret: string, token: string, f: SignedFields): boolean {
  const m = PATTERN.exec(token);
  if (!m?.[2] || invitationIdOf(token) !== f.id) return false;
  const given = Buffer.from(m[2], 'base64url');
  const expected = mac(secret, f);
  return given.length === expected.length && timingSafeEqual(given, expected);
}
