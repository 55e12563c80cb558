import { type FormEvent, useState } from 'react';
import { client } from '../api';
import { Link } from '../router';
import { ErrorNote, Field, formatDate, Loading, Page, useAsync } from '../ui';

/** A session's timeline (messages, tool calls with arguments and results, turn runs) and a composer. */
export function AgentSession({ agentId, sessionId }: { agentId: string; sessionId: string }) {
  const timeline = useAsync(() => client.sessions.events(sessionId), [sessionId]);
  const [message, setMessage] = useState('');
  const [live, setLive] = useState<string[]>([]);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(undefined);
  const send = async (e: FormEvent) => {
    e.preventDefault();
    if (!message.trim() || busy) return;
    setBusy(true);
    setError(undefined);
    setLive([]);
    const text = message;
    setMessage('');
    try {
      let reply = '';
      for await (const ev of client.sessions.send(sessionId, text)) {
        if (ev.type === 'message.delta') {
          reply += ev.content;
          setLive((l) => [...l.filter((x) => !x.startsWith('Reply: ')), `Reply: ${reply}`]);
        } else if (ev.type === 'tool_call.started') setLive((l) => [...l, `Calling ${ev.name}…`]);
        else if (ev.type === 'run.failed') throw new Error(ev.error);
      }
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
      setLive([]);
      timeline.reload();
    }
  };
  return (
    <Page title="Agent session">
      <p>
        <Link href={`/agents/${agentId}`}>← Back to the agent</Link> · session <code>{sessionId}</code>
      </p>
      <ErrorNote error={timeline.error} />
      {!timeline.data ? (
        <Loading what="the timeline" />
      ) : timeline.data.events.length === 0 ? (
        <p className="muted">No messages yet: say something below.</p>
      ) : (
        <ol className="transcript" aria-label="Timeline">
          {timeline.data.events.map((ev) =>
            ev.type === 'message' ? (
              <li key={ev.id} className={`turn ${ev.role}`} data-testid={`timeline-${ev.role}`}>
                <span className="who-said">
                  {ev.role === 'user' ? 'User' : ev.role === 'assistant' ? 'Agent' : 'Tool'} ·{' '}
                  {formatDate(ev.created_at)}
                </span>
                {ev.content ? <div className="text">{ev.content}</div> : null}
                {Object.keys(ev.metadata).length ? (
                  <details open={ev.role === 'tool'}>
                    <summary>{ev.role === 'tool' ? 'Tool call' : 'Details'}</summary>
                    <pre>{JSON.stringify(ev.metadata, null, 2)}</pre>
                  </details>
                ) : null}
              </li>
            ) : (
              <li key={ev.id} className="turn run" data-testid="timeline-run">
                <span className="who-said">Turn run · {formatDate(ev.created_at)}</span>
                <div>
                  <span
                    className={`badge ${ev.status === 'failed' ? 'bad' : ev.status === 'completed' ? 'good' : ''}`}
                  >
                    {ev.status}
                  </span>{' '}
                  {ev.error_message ? <span className="error">{ev.error_message}</span> : null}
                  {ev.warnings.map((w) => (
                    <div key={w.code + w.message} className="muted">
                      {w.code}: {w.message}
                    </div>
                  ))}
                </div>
              </li>
            ),
          )}
        </ol>
      )}
      {live.length ? (
        <ul className="plain-list muted" aria-live="polite">
          {live.map((l) => (
            <li key={l}>{l}</li>
          ))}
        </ul>
      ) : null}
      <ErrorNote error={error} />
      <form className="composer" onSubmit={send}>
        <Field label="Message to the agent">
          {(p) => <textarea {...p} rows={3} value={message} onChange={(e) => setMessage(e.target.value)} />}
        </Field>
        <button type="submit" disabled={busy || !message.trim()}>
          {busy ? 'Working…' : 'Send'}
        </button>
      </form>
    </Page>
  );
}
