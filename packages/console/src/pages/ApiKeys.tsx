import type { ApiKey, CreatedApiKey } from '@ai-suite/sdk';
import { type FormEvent, useState } from 'react';
import { client } from '../api';
import { isManager, useRole } from '../session';
import {
  CopyButton,
  ErrorNote,
  Field,
  formatDate,
  formatNumber,
  formatUsd,
  Loading,
  Page,
  TableBox,
  useAction,
  useAsync,
} from '../ui';

/**
 * Where OpenAI clients, SDKs and frameworks point with a key of this workspace: the server's
 * OpenAI-compatible surface (docs/openai-compatible.md), on the origin serving this console.
 */
function OpenAiBaseUrl() {
  const url = `${window.location.origin}/api/v1/openai`;
  return (
    <section className="panel" aria-label="OpenAI-compatible base URL" data-testid="openai-base-url">
      <p>
        <strong>OpenAI-compatible base URL.</strong> Any OpenAI client, SDK or framework works with a key of
        this workspace at this base URL; the workspace's agents are models named{' '}
        <code>agent/&lt;agentId&gt;</code>.
      </p>
      <div className="secret">
        <code data-testid="openai-base-url-value">{url}</code>
        <CopyButton text={url} label="Copy base URL" />
      </div>
    </section>
  );
}

export function ApiKeys() {
  const role = useRole();
  const manager = isManager(role);
  const keys = useAsync(
    async (): Promise<{ apiKeys: ApiKey[] }> =>
      manager ? await client.apiKeys.list({ includeRevoked: true }) : { apiKeys: [] },
    [manager],
  );
  const [name, setName] = useState('');
  const [created, setCreated] = useState<CreatedApiKey | undefined>(undefined);
  const create = useAction(async () => {
    setCreated(await client.apiKeys.create({ name: name.trim() || null }));
    setName('');
    keys.reload();
  });
  const revoke = useAction(async (id: string) => {
    await client.apiKeys.revoke(id);
    keys.reload();
  });
  if (!manager) {
    return (
      <Page title="API keys">
        <p data-testid="restricted">
          Only owners and admins of this workspace create, see and revoke API keys. Ask one of them for a key.
        </p>
        <OpenAiBaseUrl />
      </Page>
    );
  }
  const submit = (e: FormEvent) => {
    e.preventDefault();
    void create.run();
  };
  return (
    <Page title="API keys">
      <form className="panel row" onSubmit={submit} aria-label="Create an API key">
        <Field label="Name of the new key" hint="Where it will be used, e.g. backend">
          {(p) => <input {...p} value={name} maxLength={100} onChange={(e) => setName(e.target.value)} />}
        </Field>
        <button type="submit" disabled={create.busy}>
          Create key
        </button>
      </form>
      <ErrorNote error={create.error} />
      {created ? (
        <div className="panel" role="status" data-testid="new-key">
          <p>
            <strong>Copy this key now: it is shown only once.</strong> Every key shares the workspace's tokens
            and credits.
          </p>
          <div className="secret">
            <code data-testid="new-key-value">{created.key}</code>
            <CopyButton text={created.key} label="Copy key" />
            <button type="button" className="secondary" onClick={() => setCreated(undefined)}>
              Done
            </button>
          </div>
        </div>
      ) : null}
      <OpenAiBaseUrl />
      <ErrorNote error={keys.error ?? revoke.error} />
      {keys.loading && !keys.data ? <Loading what="keys" /> : null}
      {keys.data ? (
        <TableBox label="API keys">
          <table>
            <caption className="visually-hidden">API keys of the workspace</caption>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Key</th>
                <th scope="col">Created</th>
                <th scope="col">Last used</th>
                <th scope="col" className="num">
                  Requests
                </th>
                <th scope="col" className="num">
                  Tokens
                </th>
                <th scope="col" className="num">
                  Cost
                </th>
                <th scope="col">
                  <span className="visually-hidden">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {keys.data.apiKeys.map((k) => (
                <tr key={k.id} data-testid="key-row">
                  <td>{k.name ?? <span className="muted">unnamed</span>}</td>
                  <td>
                    <code>{k.prefix}</code>
                  </td>
                  <td>{formatDate(k.createdAt)}</td>
                  <td>{formatDate(k.lastUsedAt)}</td>
                  <td className="num">{formatNumber(k.usage.requests)}</td>
                  <td className="num">{formatNumber(k.usage.inputTokens + k.usage.outputTokens)}</td>
                  <td className="num">{formatUsd(k.usage.costUsd)}</td>
                  <td>
                    {k.revokedAt ? (
                      <span className="badge">revoked</span>
                    ) : (
                      <button
                        type="button"
                        className="danger"
                        aria-label={`Revoke ${k.name ?? k.prefix}`}
                        disabled={revoke.busy}
                        onClick={() => {
                          if (
                            window.confirm(
                              `Revoke the key ${k.name ?? k.prefix}? Programs using it stop working.`,
                            )
                          )
                            void revoke.run(k.id);
                        }}
                      >
                        Revoke
                      </button>
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </TableBox>
      ) : null}
    </Page>
  );
}
