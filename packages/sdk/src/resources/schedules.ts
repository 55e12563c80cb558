import type { AiSuite } from '../client.js';
import type { APIPromise } from '../core/api-promise.js';
import { PagePromise, singlePage } from '../core/pagination.js';
import type { Schedule, ScheduleRunCreated, ScheduleTick } from './types.js';

type Opts = { signal?: AbortSignal };

export interface CreateScheduleParams {
  /**
   * Cron expression: 5 fields (minute hour day-of-month month day-of-week), or 6 with seconds
   * first, or an alias such as `@daily`. Firings closer than the server's
   * `SCHEDULE_MIN_INTERVAL_SECONDS` (default 60) are refused (`BadRequestError` with the reason).
   */
  cron: string;
  /** IANA time zone the expression is read in, DST included (default `UTC`). */
  timezone?: string;
  /** The task of every run the schedule starts. */
  task: string;
  /** Default true; false creates it paused. */
  enabled?: boolean;
  /** `skip` (default): a tick is skipped while the previous run is live; `queue`: it starts anyway. */
  overlap?: 'skip' | 'queue';
  /** Strings copied onto every run; `webhookUrl` is each run's completion webhook. */
  metadata?: Record<string, string>;
}

export type UpdateScheduleParams = Partial<CreateScheduleParams>;

/**
 * Schedules of an agent (`/managed-agents/agents/{agentId}/schedules`, docs/agents.md): an
 * autonomous run at every tick of a cron expression. The agent needs
 * `capabilities.deliverables.enabled`; an agent has 50 schedules at most.
 */
export class Schedules {
  constructor(private readonly client: AiSuite) {}

  private base(agentId: string, scheduleId?: string) {
    const root = `/managed-agents/agents/${encodeURIComponent(agentId)}/schedules`;
    return scheduleId === undefined ? root : `${root}/${encodeURIComponent(scheduleId)}`;
  }

  create(agentId: string, body: CreateScheduleParams, opts: Opts = {}): APIPromise<{ schedule: Schedule }> {
    return this.client.request({ method: 'POST', path: this.base(agentId), body, ...opts });
  }

  /** Await for `{ schedules }`, or `for await (const s of client.agents.schedules.list(agentId))`. */
  list(agentId: string, opts: Opts = {}): PagePromise<{ schedules: Schedule[] }, Schedule> {
    return new PagePromise(
      () => this.client.request({ method: 'GET', path: this.base(agentId), ...opts }),
      {},
      singlePage((b) => b.schedules),
    );
  }

  /** `NotFoundError` (`Schedule not found`) when it is not a schedule of this agent in the workspace. */
  get(agentId: string, scheduleId: string, opts: Opts = {}): APIPromise<{ schedule: Schedule }> {
    return this.client.request({ method: 'GET', path: this.base(agentId, scheduleId), ...opts });
  }

  /** Only the fields sent change; `enabled: false` pauses, `enabled: true` resumes from now. */
  update(
    agentId: string,
    scheduleId: string,
    body: UpdateScheduleParams,
    opts: Opts = {},
  ): APIPromise<{ schedule: Schedule }> {
    return this.client.request({ method: 'PATCH', path: this.base(agentId, scheduleId), body, ...opts });
  }

  pause(agentId: string, scheduleId: string, opts: Opts = {}): APIPromise<{ schedule: Schedule }> {
    return this.update(agentId, scheduleId, { enabled: false }, opts);
  }

  resume(agentId: string, scheduleId: string, opts: Opts = {}): APIPromise<{ schedule: Schedule }> {
    return this.update(agentId, scheduleId, { enabled: true }, opts);
  }

  /** Deletes the schedule; the runs it started stay. */
  delete(agentId: string, scheduleId: string, opts: Opts = {}): APIPromise<{ deleted: true }> {
    return this.client.request({ method: 'DELETE', path: this.base(agentId, scheduleId), ...opts });
  }

  /** Runs the schedule's task now (paused or not): `{runId, sessionId, created_at}`; follow it with `client.runs`. */
  run(agentId: string, scheduleId: string, opts: Opts = {}): APIPromise<ScheduleRunCreated> {
    return this.client.request({
      method: 'POST',
      path: `${this.base(agentId, scheduleId)}/run`,
      body: {},
      ...opts,
    });
  }

  /** History, newest first: each tick (started, skipped, failed) and each run now. */
  ticks(
    agentId: string,
    scheduleId: string,
    query: { limit?: number } = {},
    opts: Opts = {},
  ): APIPromise<{ ticks: ScheduleTick[] }> {
    return this.client.request({
      method: 'GET',
      path: `${this.base(agentId, scheduleId)}/ticks`,
      query,
      ...opts,
    });
  }

  /** The next firings of an expression (ISO times, UTC), checked as a schedule's would be. */
  preview(
    body: { cron: string; timezone?: string; count?: number },
    opts: Opts = {},
  ): APIPromise<{ times: string[]; intervalSeconds: number }> {
    return this.client.request({ method: 'POST', path: '/managed-agents/schedules/preview', body, ...opts });
  }
}
