import { randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import { assertAcceptablePassword, hashPassword } from '../auth/passwords.js';
import { assertEmail } from '../domains/members/service.js';
import type { Role } from '../domains/workspaces/entities.js';
import { appError } from '../errors/index.js';

/** The operator's view of accounts (CLI `user …`). */
export interface UserListItem {
  id: string;
  email: string;
  name: string | null;
  hasPassword: boolean;
  createdAt: string;
  workspaces: { id: string; name: string; role: Role }[];
}

export async function createUser(
  em: EntityManager,
  input: { email: string; password?: string; name?: string },
): Promise<{ id: string; email: string; name: string | null }> {
  const email = assertEmail(input.email);
  if (input.password !== undefined) assertAcceptablePassword(input.password);
  const hash = input.password === undefined ? null : await hashPassword(input.password);
  const id = randomUUID();
  const rows = await em.execute(
    `insert into users (id, email, password_hash, name) values (?, ?, ?, ?)
     on conflict ((lower(email))) do nothing returning id`,
    [id, email, hash, input.name ?? null],
  );
  if (rows.length === 0) throw appError('USER_EMAIL_TAKEN', { email });
  return { id, email, name: input.name ?? null };
}

export async function listUsers(em: EntityManager, workspaceId?: string): Promise<UserListItem[]> {
  const rows = await em.execute<
    {
      id: string;
      email: string;
      name: string | null;
      has_password: boolean;
      created_at: Date;
      workspaces: { id: string; name: string; role: Role }[] | string | null;
    }[]
  >(
    `select u.id, u.email, u.name, u.password_hash is not null as has_password, u.created_at,
            coalesce((select json_agg(json_build_object('id', w.id, 'name', w.name, 'role', m.role) order by w.name)
                        from memberships m join workspaces w on w.id = m.workspace_id
                       where m.user_id = u.id), '[]') as workspaces
       from users u
      ${workspaceId ? 'where exists (select 1 from memberships m where m.user_id = u.id and m.workspace_id = ?)' : ''}
      order by u.email`,
    workspaceId ? [workspaceId] : [],
  );
  return rows.map((r) => ({
    id: r.id,
    email: r.email,
    name: r.name,
    hasPassword: r.has_password,
    createdAt: new Date(r.created_at).toISOString(),
    workspaces: typeof r.workspaces === 'string' ? JSON.parse(r.workspaces) : (r.workspaces ?? []),
  }));
}

export async function requireUserId(em: EntityManager, email: string): Promise<string> {
  const rows = await em.execute<{ id: string }[]>('select id from users where lower(email) = ?', [
    email.trim().toLowerCase(),
  ]);
  if (!rows[0]) throw appError('USER_NOT_FOUND', { email });
  return rows[0].id;
}

/** Sets a password and signs the person out everywhere (a changed password ends old sessions). */
export async function setPassword(
  em: EntityManager,
  email: string,
  password: string,
): Promise<{ userId: string; sessionsRevoked: number }> {
  assertAcceptablePassword(password);
  const userId = await requireUserId(em, email);
  const hash = await hashPassword(password);
  await em.execute('update users set password_hash = ? where id = ?', [hash, userId]);
  const revoked = await em.execute(
    'update user_sessions set revoked_at = now() where user_id = ? and revoked_at is null returning id',
    [userId],
  );
  return { userId, sessionsRevoked: revoked.length };
}
