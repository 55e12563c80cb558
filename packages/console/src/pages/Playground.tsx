import type { RequestUsage } from '@ai-suite/sdk';
import { type FormEvent, useRef, useState } from 'react';
import { client } from '../api';
import { ErrorNote, Field, formatNumber, formatUsd, Page, useAsync } from '../ui';

interface Turn {
  role: 'user' | 'assistant';
  content: string;
  usage?: RequestUsage['data'][number];
}

/** Polls the usage of a finished request: it is written just after the stream ends. */
async function usageOf(requestId: string): Promise<RequestUsage['data'][number] | undefined> {
  for (let i = 0; i < 20; i++) {
    const { data } = await client.insights.requestUsage(requestId);
    if (data[0]) return data[0];
    await new Promise((r) => setTimeout(r, 150 * (i + 1)));
  }
  return undefined;
}

export function Playground() {
  const models = useAsync(() => client.models.list({ kind: 'chat' }), []);
  const [model, setModel] = useState('');
  const [turns, setTurns] = useState<Turn[]>([]);
  const [input, setInput] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(undefined);
  const abort = useRef<(() => void) | undefined>(undefined);

  const send = async (e: FormEvent) => {
    e.preventDefault();
    const content = input.trim();
    if (!content || busy) return;
    const history: Turn[] = [...turns, { role: 'user', content }];
    setTurns([...history, { role: 'assistant', content: '' }]);
    setInput('');
    setBusy(true);
    setError(undefined);
    const stream = client.chat.stream({
      messages: history.map((t) => ({ role: t.role, content: t.content })),
      ...(model ? { model } : {}),
    });
    abort.current = () => stream.abort();
    let text = '';
    const update = (patch: Partial<Turn>) =>
      setTurns((ts) => ts.map((t, i) => (i === ts.length - 1 ? { ...t, ...patch } : t)));
    try {
      for await (const chunk of stream) {
        text += chunk;
        update({ content: text });
      }
      const requestId = (await stream.response()).headers.get('x-request-id');
      if (requestId) update({ usage: await usageOf(requestId) });
    } catch (err) {
      setError(err);
      if (!text) setTurns(history);
    } finally {
      setBusy(false);
      abort.current = undefined;
    }
  };

  return (
    <Page
      title="Playground"
      actions={
        <button
          type="button"
          className="secondary"
          onClick={() => setTurns([])}
          disabled={busy || turns.length === 0}
        >
          New conversation
        </button>
      }
    >
      <div className="row panel">
        <Field label="Model">
          {(p) => (
            <select {...p} value={model} onChange={(e) => setModel(e.target.value)}>
              <option value="">Default model</option>
              {(models.data?.models ?? []).map((m) => (
                <option key={m.id} value={m.id}>
                  {m.id}
                </option>
              ))}
            </select>
          )}
        </Field>
      </div>
      <ErrorNote error={models.error} />
      <ol className="transcript" aria-label="Conversation" aria-live="polite">
        {turns.map((t, i) => (
          // biome-ignore lint/suspicious/noArrayIndexKey: turns are only appended
          <li key={i} className={`turn ${t.role}`} data-testid={`turn-${t.role}`}>
            <span className="who-said">{t.role === 'user' ? 'You' : 'Model'}</span>
            <div className="text">{t.content || (busy && i === turns.length - 1 ? '…' : '')}</div>
            {t.usage ? (
              <div className="muted usage" data-testid="reply-usage">
                {formatNumber(t.usage.inputTokens)} in · {formatNumber(t.usage.outputTokens)} out ·{' '}
                {formatUsd(t.usage.costUsd)} · {t.usage.model}
              </div>
            ) : null}
          </li>
        ))}
      </ol>
      <ErrorNote error={error} />
      <form className="composer" onSubmit={send}>
        <Field label="Message">
          {(p) => (
            <textarea
              {...p}
              rows={3}
              value={input}
              onChange={(e) => setInput(e.target.value)}
              onKeyDown={(e) => {
                if (e.key === 'Enter' && !e.shiftKey) {
                  e.preventDefault();
                  e.currentTarget.form?.requestSubmit();
                }
              }}
            />
          )}
        </Field>
        <div className="row">
          <button type="submit" disabled={busy || !input.trim()}>
            Send
          </button>
          {busy ? (
            <button type="button" className="secondary" onClick={() => abort.current?.()}>
              Stop
            </button>
          ) : null}
          <small className="muted">Enter sends, Shift+Enter adds a line.</small>
        </div>
      </form>
    </Page>
  );
}
