import { type FormEvent, useState } from 'react';
import { client } from '../api';
import { navigate } from '../router';
import { useSession } from '../session';
import { ErrorNote, Field, Loading, useAction, useAsync } from '../ui';

/** `/invitations/accept#token=…`: the link an invitation hands out (the token stays in the fragment). */
export function AcceptInvitation() {
  const { refresh } = useSession();
  const token = new URLSearchParams(window.location.hash.slice(1)).get('token') ?? '';
  const preview = useAsync(() => client.auth.previewInvitation(token), [token]);
  const [name, setName] = useState('');
  const [password, setPassword] = useState('');
  const accept = useAction(async () => {
    await client.auth.acceptInvitation({
      token,
      ...(password ? { password } : {}),
      ...(name ? { name } : {}),
    });
    await refresh();
    navigate('/', { replace: true });
  });
  const p = preview.data;
  const submit = (e: FormEvent) => {
    e.preventDefault();
    void accept.run();
  };
  return (
    <main className="signin">
      <form className="card" onSubmit={submit} aria-labelledby="invite-title">
        <h1 id="invite-title">Join a workspace</h1>
        <ErrorNote error={preview.error} />
        {!p && !preview.error ? <Loading what="the invitation" /> : null}
        {p ? (
          <>
            <p>
              <strong>{p.email}</strong> is invited to <strong>{p.workspace.name}</strong> as {p.role}.
            </p>
            {p.accountExists ? null : (
              <Field label="Your name">
                {(f) => (
                  <input {...f} autoComplete="name" value={name} onChange={(e) => setName(e.target.value)} />
                )}
              </Field>
            )}
            <Field
              label={p.accountExists ? 'Your password' : 'Choose a password'}
              hint={p.accountExists ? undefined : 'At least 8 characters'}
            >
              {(f) => (
                <input
                  {...f}
                  type="password"
                  autoComplete={p.accountExists ? 'current-password' : 'new-password'}
                  minLength={8}
                  required
                  value={password}
                  onChange={(e) => setPassword(e.target.value)}
                />
              )}
            </Field>
            <ErrorNote error={accept.error} />
            <button type="submit" disabled={accept.busy}>
              Join {p.workspace.name}
            </button>
          </>
        ) : null}
      </form>
    </main>
  );
}
