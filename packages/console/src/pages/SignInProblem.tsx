import { useEffect } from 'react';
import { client } from '../api';
import { Link, useQuery } from '../router';
import { useAsync } from '../ui';

/**
 * What went wrong, per error code of the OIDC routes, in words for the person at the browser.
 * `invite` marks the failures an invitation fixes; `retry` those worth another try at the provider.
 */
interface Problem {
  text: string;
  invite?: boolean;
  retry?: boolean;
}

const PROBLEMS: Record<string, Problem> = {
  SIGNUP_DISABLED: {
    text: 'The identity provider knows you, but no account here uses your email address, and this service does not create accounts on its own: people join by invitation.',
    invite: true,
  },
  OIDC_DOMAIN_NOT_ALLOWED: {
    text: 'Your email address is in a domain that may not sign in here through the identity provider.',
    invite: true,
  },
  OIDC_EMAIL_UNVERIFIED: {
    text: 'The identity provider has not verified your email address, so it cannot be matched to an account here. Verify it with the provider, then try again.',
    retry: true,
  },
  OIDC_EMAIL_MISSING: {
    text: 'The identity provider did not tell us your email address, so it cannot be matched to an account here.',
  },
  OIDC_IDENTITY_CONFLICT: {
    text: 'The account with your email address is already linked to another identity at the provider. Sign in with your password, or as that other identity.',
  },
  OIDC_PROVIDER_REFUSED: {
    text: 'The identity provider did not let the sign-in through (it was cancelled, or refused there).',
    retry: true,
  },
  OIDC_STATE_INVALID: {
    text: 'This sign-in attempt expired or was started in another browser or tab.',
    retry: true,
  },
  OIDC_TOKEN_INVALID: {
    text: 'The identity provider’s answer could not be verified, so it was not trusted.',
    retry: true,
  },
  OIDC_PROVIDER_UNAVAILABLE: {
    text: 'The identity provider could not be reached. It may be down for a moment.',
    retry: true,
  },
  OIDC_NOT_CONFIGURED: { text: 'Signing in through an identity provider is not set up on this service.' },
  INVALID_RETURN_TO: {
    text: 'The sign-in link asked to return to a page outside this site, so it was stopped.',
    retry: true,
  },
};

const GENERIC: Problem = { text: 'Signing in through the identity provider did not work.', retry: true };

/** `/sign-in/problem?code=…`: where the server sends a browser whose OIDC sign-in failed. */
export function SignInProblem() {
  const code = useQuery().get('code') ?? '';
  const problem = PROBLEMS[code] ?? GENERIC;
  const providers = useAsync(() => client.auth.providers(), []);
  const oidc = providers.data?.oidc;
  useEffect(() => {
    document.title = 'Sign-in did not work · AI Suite console';
  }, []);
  return (
    <main className="signin">
      <section className="card" aria-labelledby="problem-title">
        <h1 id="problem-title">Sign-in did not work</h1>
        <p>{problem.text}</p>
        {problem.invite ? (
          <p>
            To get in, ask an owner or admin of the workspace you want to join to invite your email address
            (Members, then Invite). The invitation link lets you in with the identity provider or a password.
          </p>
        ) : null}
        <ul className="ways-back">
          <li>
            <Link href="/">Sign in with a password</Link>
          </li>
          {problem.retry && oidc ? (
            <li>
              <a href={`${oidc.startUrl}?${new URLSearchParams({ returnTo: '/' })}`}>Try {oidc.name} again</a>
            </li>
          ) : null}
        </ul>
        {code ? <p className="muted">Error code: {code}</p> : null}
      </section>
    </main>
  );
}
