import { type FormEvent, useState } from 'react';
import { client } from '../api';
import { Link } from '../router';
import { ErrorNote, Field, formatDate, Loading, Page, useAsync } from '../ui';
import { ApprovalCard } from './approvals';

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
        else if (ev.type === 'tool_call.approval_required') {
          // Shown in the timeline with Approve / Deny; the stream goes on once decided.
          setLive((l) => [...l, `${ev.name} waits for your approval`]);
          timeline.reload();
        } else if (ev.type === 'run.failed') throw new Error(ev.error);
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
                {ev.role === 'tool' ? (
                  <ToolCall metadata={ev.metadata} content={ev.content} />
                ) : ev.content ? (
                  <div className="text">{ev.content}</div>
                ) : null}
                {ev.role !== 'tool' && Object.keys(ev.metadata).length ? (
                  <details>
                    <summary>Details</summary>
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
                  {ev.approvals.map((a) => (
                    <ApprovalCard
                      key={a.toolCallId}
                      sessionId={sessionId}
                      approval={a}
                      onDecided={timeline.reload}
                    />
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

/** JSON pretty-printed when it parses, else as it is. */
function pretty(text: string): string {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

/** A tool call: its name, the arguments the model gave, and the result (or error) it got back. */
function ToolCall({ metadata, content }: { metadata: Record<string, unknown>; content: string }) {
  const name = typeof metadata.name === 'string' ? metadata.name : 'tool';
  const args = metadata.arguments;
  return (
    <div className="tool-call">
      <div>
        Called <code data-testid="tool-name">{name}</code>
        {typeof metadata.toolCallId === 'string' ? (
          <span className="muted"> · {metadata.toolCallId}</span>
        ) : null}
      </div>
      <p className="tool-part">Arguments</p>
      {args === undefined ? (
        <p className="muted">Not recorded (made before arguments were kept).</p>
      ) : (
        <pre data-testid="tool-arguments">{JSON.stringify(args, null, 2)}</pre>
      )}
      <p className="tool-part">Result</p>
      <pre data-testid="tool-result">{pretty(content)}</pre>
    </div>
  );
}
