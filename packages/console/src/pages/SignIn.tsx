import { type FormEvent, useState } from 'react';
import { client } from '../api';
import { useSession } from '../session';
import { ErrorNote, Field, useAction, useAsync } from '../ui';

export function SignIn() {
  const { refresh } = useSession();
  const [email, setEmail] = useState('');
  const [password, setPassword] = useState('');
  // What this server offers: the identity provider's button when OIDC is configured.
  const providers = useAsync(() => client.auth.providers(), []);
  const oidc = providers.data?.oidc;
  const signIn = useAction(async () => {
    await client.auth.signIn({ email, password });
    await refresh();
  });
  const submit = (e: FormEvent) => {
    e.preventDefault();
    void signIn.run();
  };
  return (
    <main className="signin">
      <form className="card" onSubmit={submit} aria-labelledby="signin-title">
        <h1 id="signin-title">Sign in to AI Suite</h1>
        <Field label="Email">
          {(p) => (
            <input
              {...p}
              type="email"
              name="email"
              autoComplete="username"
              required
              value={email}
              onChange={(e) => setEmail(e.target.value)}
            />
          )}
        </Field>
        <Field label="Password">
          {(p) => (
            <input
              {...p}
              type="password"
              name="password"
              autoComplete="current-password"
              required
              value={password}
              onChange={(e) => setPassword(e.target.value)}
            />
          )}
        </Field>
        <ErrorNote error={signIn.error} />
        <button type="submit" disabled={signIn.busy}>
          {signIn.busy ? 'Signing in…' : 'Sign in'}
        </button>
        {oidc ? (
          <>
            <p className="or muted">or</p>
            {/* A page navigation (not an API call): the server redirects to the provider and back here. */}
            <a
              className="button secondary oidc"
              href={`${oidc.startUrl}?${new URLSearchParams({
                returnTo: `${window.location.pathname}${window.location.search}`,
              })}`}
            >
              Sign in with {oidc.name}
            </a>
          </>
        ) : null}
      </form>
    </main>
  );
}
