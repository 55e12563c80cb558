import { createHash, randomBytes } from 'node:crypto';
import { createRemoteJWKSet, jwtVerify } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FakeOidc, startFakeOidc } from './fake-oidc.js';

/**
 * The fake provider keeps the protocol's promises, so a relying party tested against it is
 * tested for real: the token endpoint refuses a wrong client secret, a wrong PKCE verifier, a
 * used code and another redirect URI, and the ID tokens verify against its JWKS.
 */
let fake: FakeOidc;
beforeAll(async () => {
  fake = await startFakeOidc({
    clientSecret: 's3cret',
    users: [{ sub: 'u1', email: 'ada@example.com', name: 'Ada' }],
  });
});
afterAll(() => fake?.close());

const REDIRECT = 'http://127.0.0.1:9/callback';

async function authorize(verifier: string, nonce = 'n-1') {
  const challenge = createHash('sha256').update(verifier).digest('base64url');
  const url = new URL(`${fake.issuer}/authorize`);
  url.search = new URLSearchParams({
    response_type: 'code',
    client_id: fake.clientId,
    redirect_uri: REDIRECT,
    scope: 'openid email',
    state: 'st-1',
    nonce,
    code_challenge: challenge,
    code_challenge_method: 'S256',
  }).toString();
  const res = await fetch(url, { redirect: 'manual' });
  expect(res.status).toBe(302);
  const back = new URL(res.headers.get('location') as string);
  expect(back.searchParams.get('state')).toBe('st-1');
  expect(back.searchParams.get('iss')).toBe(fake.issuer);
  return back.searchParams.get('code') as string;
}

const token = (params: Record<string, string>, secret = 's3cret') =>
  fetch(`${fake.issuer}/token`, {
    method: 'POST',
    headers: {
      'content-type': 'application/x-www-form-urlencoded',
      authorization: `Basic ${Buffer.from(`${fake.clientId}:${secret}`).toString('base64')}`,
    },
    body: new URLSearchParams({ grant_type: 'authorization_code', redirect_uri: REDIRECT, ...params }),
  });

describe('fake OIDC provider', () => {
  it('publishes a discovery document naming its endpoints', async () => {
    const doc = (await (await fetch(`${fake.issuer}/.well-known/openid-configuration`)).json()) as Record<
      string,
      unknown
    >;
    expect(doc).toMatchObject({
      issuer: fake.issuer,
      authorization_endpoint: `${fake.issuer}/authorize`,
      token_endpoint: `${fake.issuer}/token`,
      jwks_uri: `${fake.issuer}/jwks`,
      code_challenge_methods_supported: ['S256'],
    });
  });

  it('exchanges a code for an RS256 ID token that verifies against its JWKS', async () => {
    const verifier = randomBytes(32).toString('base64url');
    const code = await authorize(verifier, 'the-nonce');
    const res = await token({ code, code_verifier: verifier });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { id_token: string; access_token: string };
    const { payload, protectedHeader } = await jwtVerify(
      body.id_token,
      createRemoteJWKSet(new URL(`${fake.issuer}/jwks`)),
      { issuer: fake.issuer, audience: fake.clientId },
    );
    expect(protectedHeader.alg).toBe('RS256');
    expect(payload).toMatchObject({
      sub: 'u1',
      email: 'ada@example.com',
      email_verified: true,
      nonce: 'the-nonce',
    });
    const info = await fetch(`${fake.issuer}/userinfo`, {
      headers: { authorization: `Bearer ${body.access_token}` },
    });
    expect(await info.json()).toMatchObject({ sub: 'u1', email: 'ada@example.com' });
  });

  it('refuses a wrong PKCE verifier, a wrong secret, another redirect URI and a used code', async () => {
    const verifier = randomBytes(32).toString('base64url');
    const wrongVerifier = await token({ code: await authorize(verifier), code_verifier: `${verifier}x` });
    expect(wrongVerifier.status).toBe(400);
    expect(await wrongVerifier.json()).toMatchObject({ error: 'invalid_grant' });

    const wrongSecret = await token({ code: await authorize(verifier), code_verifier: verifier }, 'nope');
    expect(wrongSecret.status).toBe(401);
    expect(await wrongSecret.json()).toMatchObject({ error: 'invalid_client' });

    const otherRedirect = await token({
      code: await authorize(verifier),
      code_verifier: verifier,
      redirect_uri: 'http://127.0.0.1:9/elsewhere',
    });
    expect(otherRedirect.status).toBe(400);

    const code = await authorize(verifier);
    expect((await token({ code, code_verifier: verifier })).status).toBe(200);
    const reused = await token({ code, code_verifier: verifier });
    expect(reused.status).toBe(400);
    expect(await reused.json()).toMatchObject({ error: 'invalid_grant' });
  });

  it('signs with a key outside its JWKS when told to', async () => {
    fake.misbehave({ foreignKey: true });
    try {
      const verifier = randomBytes(32).toString('base64url');
      const body = (await (
        await token({ code: await authorize(verifier), code_verifier: verifier })
      ).json()) as {
        id_token: string;
      };
      await expect(
        jwtVerify(body.id_token, createRemoteJWKSet(new URL(`${fake.issuer}/jwks`))),
      ).rejects.toThrow(/signature verification failed/);
    } finally {
      fake.misbehave({});
    }
  });
});
