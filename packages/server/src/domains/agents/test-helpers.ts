import type { TestServer } from '../../test/harness.js';

export interface SseEvent {
  id: string | undefined;
  event: string | undefined;
  data: any;
}

/** Parses a `text/event-stream` body into events (comments skipped). */
export async function* readSse(res: Response): AsyncGenerator<SseEvent> {
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  const decoder = new TextDecoder();
  let buf = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += decoder.decode(value, { stream: true });
      let idx = buf.indexOf('\n\n');
      while (idx >= 0) {
        const block = buf.slice(0, idx);
        buf = buf.slice(idx + 2);
        idx = buf.indexOf('\n\n');
        let id: string | undefined;
        let event: string | undefined;
        const data: string[] = [];
        for (const line of block.split('\n')) {
          if (line.startsWith(':')) continue;
          if (line.startsWith('id: ')) id = line.slice(4);
          else if (line.startsWith('event: ')) event = line.slice(7);
          else if (line.startsWith('data: ')) data.push(line.slice(6));
        }
        if (data.length > 0) yield { id, event, data: JSON.parse(data.join('\n')) };
      }
    }
  } finally {
    await reader.cancel().catch(() => undefined);
  }
}

/** A turn stream being read: `next(type)` reads up to and including the first event of `type`. */
export class TurnReader {
  readonly events: SseEvent[] = [];
  private readonly it: AsyncGenerator<SseEvent>;
  constructor(readonly res: Response) {
    this.it = readSse(res);
  }

  async until(type: string): Promise<SseEvent> {
    for (;;) {
      const { value, done } = await this.it.next();
      if (done) throw new Error(`stream ended before ${type}; got ${this.types().join(', ')}`);
      this.events.push(value);
      if (value.data.type === type) return value;
    }
  }

  async rest(): Promise<SseEvent[]> {
    for (;;) {
      const { value, done } = await this.it.next();
      if (done) return this.events;
      this.events.push(value);
    }
  }

  async close(): Promise<void> {
    await this.it.return(undefined);
  }

  types(): string[] {
    return this.events.map((e) => e.data.type);
  }
}

export async function sendMessage(
  ts: TestServer,
  key: string,
  sessionId: string,
  body: Record<string, unknown>,
) {
  return ts.api(`/managed-agents/sessions/${sessionId}/messages`, { method: 'POST', key, json: body });
}

export async function openTurn(
  ts: TestServer,
  key: string,
  sessionId: string,
  body: Record<string, unknown>,
) {
  const res = await sendMessage(ts, key, sessionId, body);
  if (res.status !== 200) throw new Error(`send failed: ${res.status} ${await res.text()}`);
  return new TurnReader(res);
}

export async function createAgentWithSession(ts: TestServer, key: string, agent: Record<string, unknown>) {
  const a = await ts.api('/managed-agents/agents', { method: 'POST', key, json: agent });
  if (a.status !== 201) throw new Error(`create agent: ${a.status} ${await a.text()}`);
  const agentId = ((await a.json()) as { agent: { id: string } }).agent.id;
  const s = await ts.api(`/managed-agents/agents/${agentId}/sessions`, { method: 'POST', key, json: {} });
  if (s.status !== 201) throw new Error(`create session: ${s.status} ${await s.text()}`);
  const sessionId = ((await s.json()) as { session: { id: string } }).session.id;
  return { agentId, sessionId };
}

export async function postToolResult(
  ts: TestServer,
  key: string,
  sessionId: string,
  body: Record<string, unknown>,
): Promise<{ status: number; body: any }> {
  const res = await ts.api(`/managed-agents/sessions/${sessionId}/tool-results`, {
    method: 'POST',
    key,
    json: body,
  });
  return { status: res.status, body: await res.json() };
}
