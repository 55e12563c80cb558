import { type FormEvent, useState } from 'react';
import { client } from '../api';
import { Link, navigate } from '../router';
import { ErrorNote, Field, formatDate, Loading, Page, TableBox, useAction, useAsync } from '../ui';

export function Agents() {
  const agents = useAsync(() => client.agents.list(), []);
  const [name, setName] = useState('');
  const [mode, setMode] = useState<'assist' | 'autonomous'>('assist');
  const create = useAction(async () => {
    const { agent } = await client.agents.create({
      name: name.trim(),
      ...(mode === 'autonomous'
        ? { config: { runtimeMode: 'autonomous', capabilities: { deliverables: { enabled: true } } } }
        : {}),
    } as Parameters<typeof client.agents.create>[0]);
    navigate(`/agents/${agent.id}`);
  });
  const submit = (e: FormEvent) => {
    e.preventDefault();
    void create.run();
  };
  return (
    <Page title="Agents">
      <form className="panel row" onSubmit={submit} aria-label="Create an agent">
        <Field label="Agent name">
          {(p) => (
            <input {...p} required maxLength={200} value={name} onChange={(e) => setName(e.target.value)} />
          )}
        </Field>
        <Field label="Mode">
          {(p) => (
            <select {...p} value={mode} onChange={(e) => setMode(e.target.value as 'assist' | 'autonomous')}>
              <option value="assist">Assist (sessions)</option>
              <option value="autonomous">Autonomous (runs)</option>
            </select>
          )}
        </Field>
        <button type="submit" disabled={create.busy}>
          Create agent
        </button>
      </form>
      <ErrorNote error={create.error ?? agents.error} />
      {agents.loading && !agents.data ? <Loading what="agents" /> : null}
      {agents.data ? (
        agents.data.agents.length === 0 ? (
          <p className="muted">No agents yet.</p>
        ) : (
          <TableBox label="Agents">
            <table>
              <caption className="visually-hidden">Agents of the workspace</caption>
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">Status</th>
                  <th scope="col">Updated</th>
                </tr>
              </thead>
              <tbody>
                {agents.data.agents.map((a) => (
                  <tr key={a.id}>
                    <td>
                      <Link href={`/agents/${a.id}`}>{a.name}</Link>
                      {a.description ? <div className="muted">{a.description}</div> : null}
                    </td>
                    <td>
                      <span className="badge">{a.status}</span>
                    </td>
                    <td>{formatDate(a.updatedAt)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </TableBox>
        )
      ) : null}
    </Page>
  );
}
