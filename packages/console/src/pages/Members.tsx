import type { CreatedInvitation } from '@ai-suite/sdk';
import { type FormEvent, useState } from 'react';
import { client } from '../api';
import { isManager, useRole, useSession } from '../session';
import {
  CopyButton,
  ErrorNote,
  Field,
  formatDate,
  Loading,
  Page,
  TableBox,
  useAction,
  useAsync,
} from '../ui';

type Role = 'owner' | 'admin' | 'member';

export function Members() {
  const role = useRole();
  const { session } = useSession();
  const manager = isManager(role);
  const members = useAsync(() => client.members.list(), []);
  const invitations = useAsync(
    async () => (manager ? (await client.members.invitations.list()).invitations : []),
    [manager],
  );
  const [email, setEmail] = useState('');
  const [inviteRole, setInviteRole] = useState<Role>('member');
  const [created, setCreated] = useState<CreatedInvitation | undefined>(undefined);
  const invite = useAction(async () => {
    setCreated(await client.members.invitations.create({ email: email.trim(), role: inviteRole }));
    setEmail('');
    invitations.reload();
  });
  const change = useAction(async (fn: () => PromiseLike<unknown>) => {
    await fn();
    members.reload();
    invitations.reload();
  });
  const submit = (e: FormEvent) => {
    e.preventDefault();
    void invite.run();
  };
  return (
    <Page title="Members">
      {manager ? (
        <form className="panel row" onSubmit={submit} aria-label="Invite a person">
          <Field label="Email to invite">
            {(p) => (
              <input {...p} type="email" required value={email} onChange={(e) => setEmail(e.target.value)} />
            )}
          </Field>
          <Field label="Role">
            {(p) => (
              <select {...p} value={inviteRole} onChange={(e) => setInviteRole(e.target.value as Role)}>
                <option value="member">member</option>
                <option value="admin">admin</option>
                {role === 'owner' ? <option value="owner">owner</option> : null}
              </select>
            )}
          </Field>
          <button type="submit" disabled={invite.busy}>
            Invite
          </button>
        </form>
      ) : (
        <p className="muted" data-testid="restricted">
          You are a member of this workspace: owners and admins invite people and change roles.
        </p>
      )}
      <ErrorNote error={invite.error ?? change.error ?? members.error} />
      {created ? (
        <div className="panel" role="status">
          <p>
            Invitation for <strong>{created.invitation.email}</strong> ({created.invitation.role}),{' '}
            {created.mailed ? 'mailed, and here is the link' : 'not mailed: hand over this link'}. It works
            once, until {formatDate(created.invitation.expiresAt)}.
          </p>
          <div className="secret">
            <code data-testid="invite-url">{created.url}</code>
            <CopyButton text={created.url} label="Copy link" />
          </div>
        </div>
      ) : null}
      {members.loading && !members.data ? <Loading what="members" /> : null}
      {members.data ? (
        <TableBox label="Members">
          <table>
            <caption className="visually-hidden">Members of the workspace</caption>
            <thead>
              <tr>
                <th scope="col">Person</th>
                <th scope="col">Role</th>
                <th scope="col">Joined</th>
                <th scope="col">
                  <span className="visually-hidden">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {members.data.members.map((m) => {
                const self = m.userId === session?.user.id;
                return (
                  <tr key={m.userId} data-testid="member-row">
                    <td>
                      {m.name ? `${m.name} · ` : ''}
                      {m.email}
                      {self ? ' (you)' : ''}
                    </td>
                    <td>
                      {manager && !self ? (
                        <select
                          aria-label={`Role of ${m.email}`}
                          value={m.role}
                          onChange={(e) =>
                            void change.run(() => client.members.setRole(m.userId, e.target.value as Role))
                          }
                        >
                          <option value="member">member</option>
                          <option value="admin">admin</option>
                          <option value="owner" disabled={role !== 'owner'}>
                            owner
                          </option>
                        </select>
                      ) : (
                        m.role
                      )}
                    </td>
                    <td>{formatDate(m.joinedAt)}</td>
                    <td>
                      {manager && !self ? (
                        <button
                          type="button"
                          className="danger"
                          aria-label={`Remove ${m.email}`}
                          onClick={() => {
                            if (window.confirm(`Remove ${m.email} from the workspace?`))
                              void change.run(() => client.members.remove(m.userId));
                          }}
                        >
                          Remove
                        </button>
                      ) : null}
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </TableBox>
      ) : null}
      {manager && invitations.data?.length ? (
        <>
          <h2>Invitations</h2>
          <ul className="plain-list">
            {invitations.data.map((i) => (
              <li key={i.id}>
                {i.email} ({i.role}) · <span className="badge">{i.status}</span> · expires{' '}
                {formatDate(i.expiresAt)}{' '}
                {i.status === 'pending' ? (
                  <button
                    type="button"
                    className="secondary"
                    aria-label={`Revoke the invitation of ${i.email}`}
                    onClick={() => void change.run(() => client.members.invitations.revoke(i.id))}
                  >
                    Revoke
                  </button>
                ) : null}
              </li>
            ))}
          </ul>
        </>
      ) : null}
    </Page>
  );
}
