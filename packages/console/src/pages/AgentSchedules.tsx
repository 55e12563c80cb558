import type { Schedule } from '@ai-suite/sdk';
import { useEffect, useState } from 'react';
import { client, errorMessage } from '../api';
import { ErrorNote, Field, formatDate, useAction, useAsync } from '../ui';

/** A time as a person reads it in the schedule's zone: "Mon 7 Dec 2026, 09:00 CET". */
export function formatInZone(iso: string, timeZone: string): string {
  try {
    return new Intl.DateTimeFormat('en-GB', {
      timeZone,
      weekday: 'short',
      day: 'numeric',
      month: 'short',
      year: 'numeric',
      hour: '2-digit',
      minute: '2-digit',
      second: iso.slice(17, 19) === '00' ? undefined : '2-digit',
      timeZoneName: 'short',
    }).format(new Date(iso));
  } catch {
    return iso;
  }
}

function every(seconds: number): string {
  const unit = (n: number, one: string, many: string) =>
    n === 1 ? `once ${one}` : `once every ${n} ${many}`;
  if (seconds % 86_400 === 0) return unit(seconds / 86_400, 'a day', 'days');
  if (seconds % 3600 === 0) return unit(seconds / 3600, 'an hour', 'hours');
  if (seconds % 60 === 0) return unit(seconds / 60, 'a minute', 'minutes');
  return unit(seconds, 'a second', 'seconds');
}

/** The next five firings of what is typed, checked by the server as a schedule would be. */
function Preview({ cron, timezone }: { cron: string; timezone: string }) {
  const [state, setState] = useState<{ times?: string[]; interval?: number; error?: string }>({});
  useEffect(() => {
    if (!cron.trim()) {
      setState({});
      return;
    }
    let live = true;
    const t = setTimeout(() => {
      client.agents.schedules.preview({ cron, timezone: timezone || 'UTC', count: 5 }).then(
        (p) => live && setState({ times: p.times, interval: p.intervalSeconds }),
        (err: unknown) => live && setState({ error: errorMessage(err) }),
      );
    }, 250);
    return () => {
      live = false;
      clearTimeout(t);
    };
  }, [cron, timezone]);
  if (state.error) {
    return (
      <p className="error" data-testid="schedule-preview-error">
        {state.error}
      </p>
    );
  }
  if (!state.times) return null;
  return (
    <div data-testid="schedule-preview">
      <p className="muted">Next five runs{state.interval ? ` (at most ${every(state.interval)})` : ''}:</p>
      <ol>
        {state.times.map((t) => (
          <li key={t} data-testid="schedule-preview-time">
            {formatInZone(t, timezone || 'UTC')}
          </li>
        ))}
      </ol>
    </div>
  );
}

function History({ agentId, scheduleId }: { agentId: string; scheduleId: string }) {
  const ticks = useAsync(
    () => client.agents.schedules.ticks(agentId, scheduleId, { limit: 20 }),
    [agentId, scheduleId],
  );
  if (ticks.error) return <ErrorNote error={ticks.error} />;
  if (!ticks.data) return <p className="muted">Loading the history…</p>;
  if (ticks.data.ticks.length === 0) return <p className="muted">Nothing has run yet.</p>;
  return (
    <ul className="plain-list" aria-label="Schedule history">
      {ticks.data.ticks.map((t) => (
        <li key={t.id} data-testid="schedule-tick">
          <span className={`badge ${t.status === 'failed' ? 'bad' : t.status === 'started' ? 'good' : ''}`}>
            {t.status}
          </span>{' '}
          {t.trigger === 'manual' ? 'run now' : 'tick'} · {formatDate(t.tickAt)}
          {t.runId ? (
            <>
              {' '}
              · run <code>{t.runId.slice(0, 8)}</code>
            </>
          ) : null}
          {t.reason ? <span className="muted"> · {t.reason}</span> : null}
        </li>
      ))}
    </ul>
  );
}

function ScheduleItem({ agentId, s, onChanged }: { agentId: string; s: Schedule; onChanged(): void }) {
  const [history, setHistory] = useState(false);
  const [started, setStarted] = useState<string | undefined>(undefined);
  const toggle = useAction(async () => {
    await client.agents.schedules.update(agentId, s.id, { enabled: !s.enabled });
    onChanged();
  });
  const runNow = useAction(async () => {
    const r = await client.agents.schedules.run(agentId, s.id);
    setStarted(r.runId);
    onChanged();
  });
  const remove = useAction(async () => {
    await client.agents.schedules.delete(agentId, s.id);
    onChanged();
  });
  return (
    <li data-testid="schedule">
      <strong>{s.task.slice(0, 80)}</strong> <code>{s.cron}</code> <span className="muted">{s.timezone}</span>{' '}
      <span className={`badge ${s.enabled ? 'good' : ''}`} data-testid="schedule-state">
        {s.enabled ? 'active' : 'paused'}
      </span>
      <br />
      <span className="muted">
        Next: {s.nextRunAt ? formatInZone(s.nextRunAt, s.timezone) : '—'} · last:{' '}
        {s.lastRunAt ? formatInZone(s.lastRunAt, s.timezone) : 'never'} · overlap {s.overlap}
      </span>
      <div className="row">
        <button type="button" onClick={() => void toggle.run()} disabled={toggle.busy}>
          {s.enabled ? 'Pause' : 'Resume'}
        </button>
        <button type="button" onClick={() => void runNow.run()} disabled={runNow.busy}>
          Run now
        </button>
        <button type="button" aria-expanded={history} onClick={() => setHistory(!history)}>
          History
        </button>
        <button type="button" className="danger" onClick={() => void remove.run()} disabled={remove.busy}>
          Delete schedule
        </button>
      </div>
      {started ? (
        <p role="status">
          Started run <code>{started}</code>
        </p>
      ) : null}
      <ErrorNote error={toggle.error ?? runNow.error ?? remove.error} />
      {history ? <History key={started ?? ''} agentId={agentId} scheduleId={s.id} /> : null}
    </li>
  );
}

/** The schedules of an agent: list, create with a preview, pause, run now, history. */
export function Schedules({ agentId }: { agentId: string }) {
  const list = useAsync(() => client.agents.schedules.list(agentId), [agentId]);
  const [cron, setCron] = useState('0 9 * * 1-5');
  const [timezone, setTimezone] = useState(() => Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC');
  const [task, setTask] = useState('');
  const [overlap, setOverlap] = useState<'skip' | 'queue'>('skip');
  const create = useAction(async () => {
    await client.agents.schedules.create(agentId, { cron, timezone, task, overlap });
    setTask('');
    list.reload();
  });
  return (
    <section aria-labelledby="schedules-h" className="panel">
      <h2 id="schedules-h">Schedules</h2>
      <p className="muted">
        An autonomous run of this agent at every tick of a cron expression (minute hour day month weekday; a
        sixth, leading field for seconds).
      </p>
      <form
        onSubmit={(e) => {
          e.preventDefault();
          void create.run();
        }}
      >
        <div className="row">
          <Field label="Cron expression">
            {(p) => <input {...p} required value={cron} onChange={(e) => setCron(e.target.value)} />}
          </Field>
          <Field label="Time zone">
            {(p) => <input {...p} required value={timezone} onChange={(e) => setTimezone(e.target.value)} />}
          </Field>
          <Field label="Overlap">
            {(p) => (
              <select {...p} value={overlap} onChange={(e) => setOverlap(e.target.value as 'skip' | 'queue')}>
                <option value="skip">skip while the last run is live</option>
                <option value="queue">start anyway</option>
              </select>
            )}
          </Field>
        </div>
        <Field label="Instructions for each run">
          {(p) => <input {...p} required value={task} onChange={(e) => setTask(e.target.value)} />}
        </Field>
        <Preview cron={cron} timezone={timezone} />
        <button type="submit" disabled={create.busy}>
          Create schedule
        </button>
      </form>
      <ErrorNote error={list.error ?? create.error} />
      {list.data?.schedules.length ? (
        <ul className="plain-list">
          {list.data.schedules.map((s) => (
            <ScheduleItem key={s.id} agentId={agentId} s={s} onChanged={list.reload} />
          ))}
        </ul>
      ) : (
        <p className="muted">No schedules yet.</p>
      )}
    </section>
  );
}
