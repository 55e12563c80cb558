import type { EntityManager } from '@mikro-orm/postgresql';

/** `rag_index`: a storage file indexed for document question answering (docs/rag.md). */
export type RunKind = 'turn' | 'autonomous' | 'rag_index';
export type RunStatus = 'pending' | 'running' | 'completed' | 'failed' | 'cancelled';

export const TERMINAL_EVENT_TYPES = ['run.completed', 'run.failed', 'run.cancelled'] as const;
export const isTerminalEvent = (type: string) => (TERMINAL_EVENT_TYPES as readonly string[]).includes(type);

export interface RunRecord {
  id: string;
  workspaceId: string;
  kind: RunKind;
  status: RunStatus;
  appId: string | null;
  sessionId: string | null;
  serialKey: string | null;
  input: Record<string, unknown>;
  state: Record<string, unknown> | null;
  waiting: boolean;
  leaseOwner: string | null;
  attempts: number;
  maxAttempts: number;
  lastSeq: number;
  error: string | null;
  /** A run released for a retry is not claimed before this (docs/run-engine.md, "Retries"). */
  notBefore: Date | null;
  createdAt: Date;
  startedAt: Date | null;
  completedAt: Date | null;
  /** W3C `traceparent` of the request that created the run: its executions continue that trace. */
  traceParent?: string | null;
}

export interface RunEvent {
  runId: string;
  seq: number;
  type: string;
  payload: Record<string, unknown>;
  createdAt: Date;
}

export interface ToolCallRecord {
  id: string;
  runId: string;
  workspaceId: string;
  sessionId: string | null;
  modelCallId: string;
  name: string;
  arguments: unknown;
  /** `result`: settled by the integrator; `approval`: a person decides whether the call runs. */
  kind: 'result' | 'approval';
  /** `approved` / `denied`: the decision on an `approval` call. */
  status: 'pending' | 'completed' | 'failed' | 'expired' | 'approved' | 'denied';
  /** A decided approval: `{arguments}` the tool runs with. */
  result: unknown;
  /** The tool's input schema (approval calls: approved arguments are checked against it). */
  inputSchema: Record<string, unknown> | null;
  error: string | null;
  deadlineAt: Date;
  createdAt: Date;
  completedAt: Date | null;
}

/** What an executor gets for one execution of a run (one lease). */
export interface RunExecution {
  run: RunRecord;
  /** Aborted on cancel, lost lease, or shutdown. Pass it to every upstream call. */
  signal: AbortSignal;
  /**
   * Appends an event to the run's log; returns its sequence. Throws `RunGoneError` when the
   * run has already ended (cancelled meanwhile), so the executor stops producing.
   */
  emit(type: string, payload?: Record<string, unknown>): Promise<number>;
  /** Persists the executor's own resumable state (read back as `run.state` next time). */
  checkpoint(state: Record<string, unknown>): Promise<void>;
  em(): EntityManager;
  /**
   * What the request that admitted and claimed the run already read (e.g. the agent row),
   * when it executes in that same process; absent after a claim by a worker.
   */
  local?: Record<string, unknown>;
}

/**
 * How an execution ends. `waiting` releases the lease: the run stays `running` with
 * `waiting = true` until every pending tool call of it is resolved, then any worker resumes it.
 */
export type RunOutcome =
  | { status: 'completed'; payload?: Record<string, unknown>; final?: FinalWrites }
  | { status: 'failed'; error: string }
  | { status: 'waiting' };

/**
 * What an executor writes with the end of its run (decision 0021): its last events and
 * rows go in the one statement that writes the run's terminal event, so the final assistant
 * message and the terminal event commit together, in one round trip; what must be written
 * whatever happens to the run (a settlement) runs beside that statement, in parallel.
 */
export interface FinalWrites {
  /**
   * Events after the executor's last one, before the terminal event (e.g. `message.completed`).
   * Written only while the lease is this worker's; shown to readers after the commit.
   */
  events: { type: string; payload: Record<string, unknown> }[];
  /**
   * CTEs (`name as (…)`, comma-separated; names other than the engine's `ev`, `upd`, `ins`,
   * `tc`, `term`, `n`) added to that statement, with their parameters. `owned` holds the run's
   * id when the lease is this worker's (the statement writes the run's events): rows that
   * belong to the run select from it, so a lost lease writes none of them.
   */
  ctes: string;
  params: unknown[];
  /**
   * Written beside the end statement, in parallel, and awaited before the terminal event is
   * shown here; run as well when the end statement is not (cancelled or lease lost meanwhile,
   * shutdown). Must not throw.
   */
  beside?(): Promise<void>;
}

export interface RunExecutor {
  kind: RunKind;
  execute(exec: RunExecution): Promise<RunOutcome>;
  /**
   * Told when the engine itself failed a run of this kind without the executor returning
   * (its worker died and it has no attempts left, or a shutdown on its last attempt), so the
   * domain can record the outcome on its own rows. Errors are logged, not rethrown.
   */
  failed?(run: RunRecord, error: string): Promise<void>;
}

export class RunGoneError extends Error {
  override name = 'RunGoneError';
  constructor(readonly runId: string) {
    super(`Run ${runId} has ended`);
  }
}
