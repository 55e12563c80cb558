import type { AgentDetail as Agent } from '@ai-suite/sdk';
import { type FormEvent, useEffect, useMemo, useState } from 'react';
import { client } from '../api';
import { changedPaths, deepMerge } from '../merge';
import { Link, navigate } from '../router';
import { ErrorNote, Field, formatDate, Loading, Page, useAction, useAsync } from '../ui';
import { Schedules } from './AgentSchedules';
import { PendingApprovals } from './approvals';

const json = (v: unknown) => JSON.stringify(v, null, 2);

export function AgentDetail({ agentId }: { agentId: string }) {
  const agent = useAsync(() => client.agents.retrieve(agentId), [agentId]);
  const a = agent.data?.agent;
  return (
    <Page title={a ? `Agent: ${a.name}` : 'Agent'}>
      <p>
        <Link href="/agents">← All agents</Link>
      </p>
      <ErrorNote error={agent.error} />
      {!a ? (
        <Loading what="the agent" />
      ) : (
        <>
          <Settings agent={a} onSaved={agent.reload} />
          <Config agent={a} onSaved={agent.reload} />
          <PendingApprovals agentId={a.id} />
          {a.mode === 'autonomous' ? <Runs agentId={a.id} /> : <Sessions agentId={a.id} />}
          {a.mode === 'autonomous' ? <Schedules agentId={a.id} /> : null}
        </>
      )}
    </Page>
  );
}

function Settings({ agent, onSaved }: { agent: Agent; onSaved(): void }) {
  const [name, setName] = useState(agent.name);
  const [description, setDescription] = useState(agent.description ?? '');
  const [prompt, setPrompt] = useState(agent.prompt ?? '');
  const save = useAction(async () => {
    await client.agents.update(agent.id, { name, description, prompt });
    onSaved();
  });
  const remove = useAction(async () => {
    await client.agents.delete(agent.id);
    navigate('/agents');
  });
  const submit = (e: FormEvent) => {
    e.preventDefault();
    void save.run();
  };
  return (
    <section aria-labelledby="settings-h" className="panel">
      <h2 id="settings-h">Settings</h2>
      <p className="muted">
        Mode <strong>{agent.mode}</strong> · model <strong>{agent.modelId}</strong> · status {agent.status} ·
        id <code>{agent.id}</code>
      </p>
      <form onSubmit={submit}>
        <Field label="Name">
          {(p) => <input {...p} required value={name} onChange={(e) => setName(e.target.value)} />}
        </Field>
        <Field label="Description">
          {(p) => <input {...p} value={description} onChange={(e) => setDescription(e.target.value)} />}
        </Field>
        <Field label="System prompt">
          {(p) => <textarea {...p} rows={4} value={prompt} onChange={(e) => setPrompt(e.target.value)} />}
        </Field>
        <ErrorNote error={save.error ?? remove.error} />
        <div className="row">
          <button type="submit" disabled={save.busy}>
            Save settings
          </button>
          <button
            type="button"
            className="danger"
            onClick={() => {
              if (window.confirm(`Delete the agent ${agent.name}?`)) void remove.run();
            }}
          >
            Delete agent
          </button>
        </div>
      </form>
    </section>
  );
}

function Config({ agent, onSaved }: { agent: Agent; onSaved(): void }) {
  const defaults = useAsync(() => client.agents.configDefaults(), []);
  const [patchText, setPatchText] = useState('{\n  \n}');
  const parsed = useMemo(() => {
    try {
      const v = JSON.parse(patchText) as unknown;
      if (typeof v !== 'object' || v === null || Array.isArray(v))
        return { error: 'The change must be a JSON object' };
      return { value: v as Record<string, unknown> };
    } catch (err) {
      return { error: `Not JSON: ${(err as Error).message}` };
    }
  }, [patchText]);
  const merged = parsed.value ? deepMerge(agent.config, parsed.value) : undefined;
  const changed = merged ? changedPaths(merged, agent.config) : [];
  const fromDefaults = defaults.data ? changedPaths(agent.config, defaults.data.config) : [];
  const save = useAction(async () => {
    if (!parsed.value) return;
    await client.agents.update(agent.id, { config: parsed.value } as Parameters<
      typeof client.agents.update
    >[1]);
    setPatchText('{\n  \n}');
    onSaved();
  });
  return (
    <section aria-labelledby="config-h" className="panel">
      <h2 id="config-h">Config</h2>
      <p className="muted">
        A change is deep-merged over the stored config: objects key by key, arrays and values replace. The
        stored config started as the platform defaults with the agent's own settings merged over them.
      </p>
      <div className="config-grid">
        <div>
          <h3>Platform defaults</h3>
          <ErrorNote error={defaults.error} />
          <pre data-testid="config-defaults">{defaults.data ? json(defaults.data.config) : '…'}</pre>
        </div>
        <div>
          <h3>Stored config</h3>
          <p className="muted" data-testid="config-overrides">
            Differs from the defaults at: {fromDefaults.length ? fromDefaults.join(', ') : 'nothing'}
          </p>
          <pre data-testid="config-stored">{json(agent.config)}</pre>
        </div>
        <div>
          <h3>Change</h3>
          <Field
            label="Config change (JSON)"
            hint="For example {&quot;compute&quot;: {&quot;maxIterations&quot;: 4}}"
          >
            {(p) => (
              <textarea {...p} rows={8} value={patchText} onChange={(e) => setPatchText(e.target.value)} />
            )}
          </Field>
          {parsed.error ? <p className="error">{parsed.error}</p> : null}
          <p className="muted" data-testid="config-changes">
            This changes: {changed.length ? changed.join(', ') : 'nothing'}
          </p>
          <ErrorNote error={save.error} />
          <button
            type="button"
            onClick={() => void save.run()}
            disabled={!parsed.value || !changed.length || save.busy}
          >
            Save config
          </button>
          {merged && changed.length ? (
            <details>
              <summary>Result after the merge</summary>
              <pre>{json(merged)}</pre>
            </details>
          ) : null}
        </div>
      </div>
    </section>
  );
}

function Sessions({ agentId }: { agentId: string }) {
  const sessions = useAsync(() => client.sessions.list(agentId, { limit: 50 }), [agentId]);
  const create = useAction(async () => {
    const { session } = await client.sessions.create(agentId, {
      title: `Console ${new Date().toISOString().slice(0, 16)}`,
    });
    navigate(`/agents/${agentId}/sessions/${session.id}`);
  });
  return (
    <section aria-labelledby="sessions-h" className="panel">
      <div className="page-head">
        <h2 id="sessions-h">Sessions</h2>
        <button type="button" onClick={() => void create.run()} disabled={create.busy}>
          New session
        </button>
      </div>
      <ErrorNote error={sessions.error ?? create.error} />
      {sessions.data ? (
        sessions.data.sessions.length === 0 ? (
          <p className="muted">No sessions yet.</p>
        ) : (
          <ul className="plain-list">
            {sessions.data.sessions.map((s) => (
              <li key={s.id}>
                <Link href={`/agents/${agentId}/sessions/${s.id}`}>{s.title ?? s.id}</Link>{' '}
                <span className="muted">last message {formatDate(s.last_message_at)}</span>
              </li>
            ))}
          </ul>
        )
      ) : null}
    </section>
  );
}

function Runs({ agentId }: { agentId: string }) {
  const runs = useAsync(() => client.runs.list(agentId, { limit: 50 }), [agentId]);
  const [task, setTask] = useState('');
  const [open, setOpen] = useState<string | undefined>(undefined);
  const create = useAction(async () => {
    const created = await client.runs.create(agentId, { task });
    setTask('');
    setOpen(created.runId);
    runs.reload();
  });
  return (
    <section aria-labelledby="runs-h" className="panel">
      <h2 id="runs-h">Autonomous runs</h2>
      <form
        className="row"
        onSubmit={(e) => {
          e.preventDefault();
          void create.run();
        }}
      >
        <Field label="Task">
          {(p) => <input {...p} required value={task} onChange={(e) => setTask(e.target.value)} />}
        </Field>
        <button type="submit" disabled={create.busy}>
          Start run
        </button>
      </form>
      <ErrorNote error={runs.error ?? create.error} />
      {runs.data?.runs.length ? (
        <ul className="plain-list">
          {runs.data.runs.map((r) => (
            <li key={r.id}>
              <button
                type="button"
                className="linkish"
                aria-expanded={open === r.id}
                onClick={() => setOpen(open === r.id ? undefined : r.id)}
              >
                {r.task.slice(0, 80)}
              </button>{' '}
              <span
                className={`badge ${r.status === 'failed' ? 'bad' : r.status === 'completed' ? 'good' : ''}`}
              >
                {r.status}
              </span>{' '}
              <span className="muted">{formatDate(r.created_at)}</span>
              {open === r.id ? <RunView agentId={agentId} runId={r.id} /> : null}
            </li>
          ))}
        </ul>
      ) : (
        <p className="muted">No runs yet.</p>
      )}
    </section>
  );
}

function RunView({ agentId, runId }: { agentId: string; runId: string }) {
  const detail = useAsync(() => client.runs.get(agentId, runId), [agentId, runId]);
  const d = detail.data;
  useEffect(() => {
    if (d && (d.run.status === 'pending' || d.run.status === 'running')) {
      const t = setTimeout(detail.reload, 1000);
      return () => clearTimeout(t);
    }
  }, [d, detail.reload]);
  const download = async (a: { file_id: string; filename: string }) => {
    const res = await client.runs.download(a);
    const url = URL.createObjectURL(await res.blob());
    const link = document.createElement('a');
    link.href = url;
    link.download = a.filename;
    link.click();
    setTimeout(() => URL.revokeObjectURL(url), 10_000);
  };
  if (!d) return <ErrorNote error={detail.error} />;
  return (
    <div className="run-view">
      <p>
        Status{' '}
        <span
          className={`badge ${d.run.status === 'failed' ? 'bad' : d.run.status === 'completed' ? 'good' : ''}`}
          data-testid="run-status"
        >
          {d.run.status}
        </span>
      </p>
      {d.run.error ? <p className="error">{d.run.error}</p> : null}
      <h3>Artifacts</h3>
      {d.artifacts.length ? (
        <ul className="plain-list">
          {d.artifacts.map((a) => (
            <li key={a.id} data-testid="run-artifact">
              <button type="button" className="secondary" onClick={() => void download(a)}>
                Download {a.filename}
              </button>{' '}
              <span className="muted">
                {a.mime_type}, {a.size_bytes} bytes
              </span>
            </li>
          ))}
        </ul>
      ) : (
        <p className="muted">None.</p>
      )}
      <h3>Events</h3>
      <ol className="events">
        {d.events.map((e) => (
          <li key={e.id} data-testid="run-event">
            <code>{e.event_type}</code> <span className="muted">{formatDate(e.created_at)}</span>
            <pre>{json(e.payload)}</pre>
          </li>
        ))}
      </ol>
    </div>
  );
}
