import { startFakeOidc } from '@ai-suite/testkit';
import { describe, expect, it } from 'vitest';
import { AppError } from '../errors/index.js';
import { OidcClient } from './oidc.js';
import { identitySettingsFromEnv } from './settings.js';

const oidcOf = (env: Record<string, string>) => identitySettingsFromEnv(env).oidc;

describe('OIDC settings', () => {
  it('is off without OIDC_ISSUER and needs a client id with it', () => {
    expect(oidcOf({})).toBeUndefined();
    expect(() => oidcOf({ OIDC_ISSUER: 'https://idp.example' })).toThrow(/OIDC_CLIENT_ID is required/);
  });

  it('reads the provider, the domains, the name and the scopes', () => {
    expect(
      oidcOf({
        OIDC_ISSUER: 'https://idp.example/realms/acme',
        OIDC_CLIENT_ID: 'c',
        OIDC_CLIENT_SECRET: 's',
        OIDC_ALLOWED_DOMAINS: '@Example.com, example.org',
      }),
    ).toEqual({
      issuer: 'https://idp.example/realms/acme',
      clientId: 'c',
      clientSecret: 's',
      allowedDomains: ['example.com', 'example.org'],
      scopes: 'openid email profile',
      redirectUri: undefined,
      providerName: 'idp.example',
      allowHttp: false,
    });
    expect(
      oidcOf({ OIDC_ISSUER: 'https://idp.example', OIDC_CLIENT_ID: 'c', OIDC_PROVIDER_NAME: 'Acme SSO' })
        ?.providerName,
    ).toBe('Acme SSO');
  });

  it('allows plain http only for a loopback issuer or with OIDC_ALLOW_HTTP', () => {
    for (const issuer of ['http://127.0.0.1:8081', 'http://localhost:8081', 'http://[::1]:8081']) {
      expect(oidcOf({ OIDC_ISSUER: issuer, OIDC_CLIENT_ID: 'c' })?.allowHttp, issuer).toBe(true);
    }
    expect(() => oidcOf({ OIDC_ISSUER: 'http://idp.example', OIDC_CLIENT_ID: 'c' })).toThrow(/must be https/);
    expect(
      oidcOf({ OIDC_ISSUER: 'http://idp.internal', OIDC_CLIENT_ID: 'c', OIDC_ALLOW_HTTP: 'true' })?.allowHttp,
    ).toBe(true);
    expect(() =>
      oidcOf({ OIDC_ISSUER: 'http://127.0.0.1:8081', OIDC_CLIENT_ID: 'c', OIDC_ALLOW_HTTP: 'false' }),
    ).toThrow(/must be https/);
    expect(() => oidcOf({ OIDC_ISSUER: 'ftp://idp.example', OIDC_CLIENT_ID: 'c' })).toThrow(/http\(s\) URL/);
  });
});

describe('an unreachable provider', () => {
  it('answers 502 OIDC_PROVIDER_UNAVAILABLE', async () => {
    // Port 9 (discard) on loopback: nothing listens, the connection is refused at once.
    const settings = oidcOf({ OIDC_ISSUER: 'http://127.0.0.1:9', OIDC_CLIENT_ID: 'c' });
    const err = await new OidcClient(settings as NonNullable<typeof settings>)
      .start({ returnTo: '/', redirectUri: 'http://127.0.0.1:8080/api/v1/auth/oidc/callback' })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AppError);
    expect((err as AppError).status).toBe(502);
    expect((err as AppError).code).toBe('OIDC_PROVIDER_UNAVAILABLE');
  });

  it('does not keep a failed discovery: the next sign-in reads the document again', async () => {
    const fake = await startFakeOidc();
    try {
      const settings = oidcOf({ OIDC_ISSUER: fake.issuer, OIDC_CLIENT_ID: fake.clientId });
      const client = new OidcClient(settings as NonNullable<typeof settings>);
      const input = { returnTo: '/', redirectUri: 'http://127.0.0.1:8080/api/v1/auth/oidc/callback' };
      fake.misbehave({ discoveryDown: true });
      const err = await client.start(input).catch((e: unknown) => e);
      expect((err as AppError).code).toBe('OIDC_PROVIDER_UNAVAILABLE');
      expect((err as AppError).details?.reason).toMatch(/503/);
      fake.misbehave({});
      const { url } = await client.start(input);
      expect(url.href.startsWith(`${fake.issuer}/authorize?`)).toBe(true);
    } finally {
      await fake.close();
    }
  });
});
