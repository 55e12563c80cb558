import type { App, CreatedWidgetToken } from '@ai-suite/sdk';
import { type FormEvent, useState } from 'react';
import { client } from '../api';
import { Link, navigate } from '../router';
import {
  CopyButton,
  ErrorNote,
  Field,
  formatDate,
  formatNumber,
  Loading,
  Page,
  useAction,
  useAsync,
} from '../ui';

export function Apps() {
  const apps = useAsync(() => client.apps.list({ limit: 100 }), []);
  const [name, setName] = useState('');
  const create = useAction(async () => {
    const { app } = await client.apps.create({ name: name.trim() });
    navigate(`/apps/${app.id}`);
  });
  return (
    <Page title="Apps">
      <form
        className="panel row"
        aria-label="Create an app"
        onSubmit={(e: FormEvent) => {
          e.preventDefault();
          void create.run();
        }}
      >
        <Field label="App name">
          {(p) => <input {...p} required value={name} onChange={(e) => setName(e.target.value)} />}
        </Field>
        <button type="submit" disabled={create.busy}>
          Create app
        </button>
      </form>
      <ErrorNote error={create.error ?? apps.error} />
      {apps.loading && !apps.data ? <Loading what="apps" /> : null}
      {apps.data ? (
        <ul className="plain-list">
          {apps.data.data.map((a: App) => (
            <li key={a.id}>
              <Link href={`/apps/${a.id}`}>{a.name}</Link> <span className="badge">{a.status}</span>{' '}
              <span className="muted">{a.model ?? 'default model'}</span>
            </li>
          ))}
          {apps.data.data.length === 0 ? <li className="muted">No apps yet.</li> : null}
        </ul>
      ) : null}
    </Page>
  );
}

export function AppDetail({ appId }: { appId: string }) {
  const app = useAsync(() => client.apps.get(appId), [appId]);
  const a = app.data?.app;
  return (
    <Page title={a ? `App: ${a.name}` : 'App'}>
      <p>
        <Link href="/apps">← All apps</Link>
      </p>
      <ErrorNote error={app.error} />
      {!a ? (
        <Loading what="the app" />
      ) : (
        <>
          <AppSettings app={a} onSaved={app.reload} />
          <Threads appId={a.id} />
          <WidgetTokens appId={a.id} />
        </>
      )}
    </Page>
  );
}

function AppSettings({ app, onSaved }: { app: App; onSaved(): void }) {
  const [name, setName] = useState(app.name);
  const [systemPrompt, setSystemPrompt] = useState(app.systemPrompt ?? '');
  const save = useAction(async () => {
    await client.apps.update(app.id, { name, systemPrompt: systemPrompt || null });
    onSaved();
  });
  return (
    <section className="panel" aria-labelledby="app-settings-h">
      <h2 id="app-settings-h">Settings</h2>
      <p className="muted">
        id <code>{app.id}</code> · model {app.model ?? 'default'} · {app.status}
      </p>
      <form
        onSubmit={(e: FormEvent) => {
          e.preventDefault();
          void save.run();
        }}
      >
        <Field label="Name">
          {(p) => <input {...p} required value={name} onChange={(e) => setName(e.target.value)} />}
        </Field>
        <Field label="System prompt">
          {(p) => (
            <textarea
              {...p}
              rows={3}
              value={systemPrompt}
              onChange={(e) => setSystemPrompt(e.target.value)}
            />
          )}
        </Field>
        <ErrorNote error={save.error} />
        <button type="submit" disabled={save.busy}>
          Save app
        </button>
      </form>
    </section>
  );
}

function Threads({ appId }: { appId: string }) {
  const threads = useAsync(() => client.apps.threads.list(appId, { limit: 50 }), [appId]);
  const [open, setOpen] = useState<string | undefined>(undefined);
  return (
    <section className="panel" aria-labelledby="threads-h">
      <h2 id="threads-h">Memory</h2>
      <ErrorNote error={threads.error} />
      {threads.data?.data.length ? (
        <ul className="plain-list">
          {threads.data.data.map((t) => (
            <li key={t.id}>
              <button
                type="button"
                className="linkish"
                aria-expanded={open === t.id}
                onClick={() => setOpen(open === t.id ? undefined : t.id)}
              >
                {t.title}
              </button>{' '}
              <span className="muted">
                {formatNumber(t.message_count)} messages · {t.status}
              </span>
              {open === t.id ? <ThreadMessages appId={appId} threadId={t.id} /> : null}
            </li>
          ))}
        </ul>
      ) : (
        <p className="muted">No threads yet.</p>
      )}
    </section>
  );
}

function ThreadMessages({ appId, threadId }: { appId: string; threadId: string }) {
  const messages = useAsync(
    () => client.apps.threads.messages(appId, threadId, { limit: 100 }),
    [appId, threadId],
  );
  return (
    <div>
      <ErrorNote error={messages.error} />
      <ol className="transcript" aria-label="Thread messages">
        {messages.data?.data.map((m) => (
          <li key={m.id} className={`turn ${m.role}`}>
            <span className="who-said">{m.role}</span>
            <div className="text">{m.content}</div>
          </li>
        ))}
      </ol>
    </div>
  );
}

function WidgetTokens({ appId }: { appId: string }) {
  const tokens = useAsync(() => client.widgetTokens.list({ limit: 200 }), []);
  const [origins, setOrigins] = useState('');
  const [maxRequests, setMaxRequests] = useState('');
  const [created, setCreated] = useState<CreatedWidgetToken | undefined>(undefined);
  const create = useAction(async () => {
    const allowedOrigins = origins
      .split(/[\s,]+/)
      .map((o) => o.trim())
      .filter(Boolean);
    setCreated(
      await client.widgetTokens.create({
        appId,
        ...(allowedOrigins.length ? { allowedOrigins } : {}),
        ...(maxRequests ? { maxRequests: Number(maxRequests) } : {}),
      }),
    );
    tokens.reload();
  });
  const revoke = useAction(async (id: string) => {
    await client.widgetTokens.revoke(id);
    tokens.reload();
  });
  const mine = tokens.data?.data.filter((t) => t.appId === appId) ?? [];
  const snippet = created
    ? `<script type="module">
  import { AiSuite } from 'https://your-site.example/ai-suite-sdk.js'; // @ai-suite/sdk, bundled by you
  const client = new AiSuite({ baseURL: '${window.location.origin}', widgetToken: '${created.token}' });
  const stream = await client.apps.chatStream('${appId}', { message: 'Hello', role: 'visitor' });
  for await (const text of stream) document.querySelector('#answer').append(text);
</script>`
    : '';
  return (
    <section className="panel" aria-labelledby="widget-h">
      <h2 id="widget-h">Widget tokens</h2>
      <p className="muted">
        For a chat widget on your site: a short-lived token scoped to this app, usable only from the origins
        you name. Never put an API key in a web page.
      </p>
      <form
        className="row"
        onSubmit={(e: FormEvent) => {
          e.preventDefault();
          void create.run();
        }}
      >
        <Field label="Allowed origins" hint="https://shop.example, space or comma separated">
          {(p) => <input {...p} value={origins} onChange={(e) => setOrigins(e.target.value)} />}
        </Field>
        <Field label="Request cap">
          {(p) => (
            <input
              {...p}
              type="number"
              min={1}
              value={maxRequests}
              onChange={(e) => setMaxRequests(e.target.value)}
            />
          )}
        </Field>
        <button type="submit" disabled={create.busy}>
          Create widget token
        </button>
      </form>
      <ErrorNote error={create.error ?? revoke.error ?? tokens.error} />
      {created ? (
        <div role="status">
          <p>
            <strong>Copy the token now: it is shown only once.</strong> It expires{' '}
            {formatDate(created.widgetToken.expiresAt)}.
          </p>
          <div className="secret">
            <code data-testid="widget-token">{created.token}</code>
            <CopyButton text={created.token} label="Copy token" />
          </div>
          <h3>Embed snippet</h3>
          <pre data-testid="embed-snippet">{snippet}</pre>
          <CopyButton text={snippet} label="Copy snippet" />
        </div>
      ) : null}
      {mine.length ? (
        <ul className="plain-list">
          {mine.map((t) => (
            <li key={t.id}>
              <code>{t.prefix}</code> · {t.allowedOrigins.join(', ') || 'any origin'} ·{' '}
              {formatNumber(t.requestCount)}/{formatNumber(t.maxRequests)} requests · expires{' '}
              {formatDate(t.expiresAt)}{' '}
              {t.revokedAt ? (
                <span className="badge">revoked</span>
              ) : (
                <button
                  type="button"
                  className="danger"
                  onClick={() => void revoke.run(t.id)}
                  aria-label={`Revoke ${t.prefix}`}
                >
                  Revoke
                </button>
              )}
            </li>
          ))}
        </ul>
      ) : null}
    </section>
  );
}
