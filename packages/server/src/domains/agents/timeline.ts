import type { EntityManager } from '@mikro-orm/postgresql';
import { approvalsOfSession } from './approval-list.js';

type Row = Record<string, unknown>;
const iso = (v: unknown) => (v == null ? null : (v instanceof Date ? v : new Date(String(v))).toISOString());
const json = <T>(v: unknown): T => v as T;

/**
 * A session's timeline: its messages and turn runs (with their warnings and the calls that
 * needed a person's decision), ascending by `created_at`. The caller has checked the session
 * belongs to its workspace.
 */
export async function sessionTimeline(em: EntityManager, sessionId: string) {
  const messages = await em.execute<Row[]>(
    'select * from session_messages where session_id = ? order by created_at, id',
    [sessionId],
  );
  const runs = await em.execute<Row[]>(
    `select * from runs where session_id = ? and kind = 'turn' order by created_at, id`,
    [sessionId],
  );
  const warningRows = await em.execute<Row[]>(
    `select e.run_id, e.payload from run_events e join runs r on r.id = e.run_id
       where r.session_id = ? and r.kind = 'turn' and e.type = 'warning' order by e.run_id, e.seq`,
    [sessionId],
  );
  const approvals = await approvalsOfSession(em, sessionId);
  const warnings = new Map<string, { code: string; message: string; server?: string }[]>();
  for (const w of warningRows) {
    const p = (typeof w.payload === 'string' ? JSON.parse(w.payload) : w.payload) as Record<string, unknown>;
    const list = warnings.get(w.run_id as string) ?? [];
    list.push({
      code: String(p.code),
      message: String(p.message),
      ...(typeof p.server === 'string' ? { server: p.server } : {}),
    });
    warnings.set(w.run_id as string, list);
  }
  const events = [
    ...messages.map((m) => ({
      type: 'message' as const,
      id: m.id as string,
      role: m.role as 'user' | 'assistant' | 'tool',
      content: m.content as string,
      metadata: json<Record<string, unknown>>(m.metadata) ?? {},
      created_at: iso(m.created_at) as string,
      at: (m.created_at as Date).getTime?.() ?? Date.parse(String(m.created_at)),
    })),
    ...runs.map((r) => ({
      type: 'turn_run' as const,
      id: r.id as string,
      status: r.status as string,
      created_at: iso(r.created_at) as string,
      completed_at: iso(r.completed_at),
      error_message: (r.error as string) ?? null,
      warnings: warnings.get(r.id as string) ?? [],
      approvals: approvals.get(r.id as string) ?? [],
      at: (r.created_at as Date).getTime?.() ?? Date.parse(String(r.created_at)),
    })),
  ];
  // Stable: a turn run sorts before the user message created in the same instant.
  events.sort((a, b) => a.at - b.at || (a.type === b.type ? 0 : a.type === 'turn_run' ? -1 : 1));
  return { events: events.map(({ at: _at, ...e }) => e) };
}
