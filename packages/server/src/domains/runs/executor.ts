import { randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { ServerDeps } from '../../context.js';
import type { RunExecution } from '../../runs/index.js';
import { type RuntimeDeps, TurnExecutor } from '../agents/runtime.js';
import { type AgentTool, type ToolContext, ToolError } from '../agents/tools.js';
import { catalogService } from '../catalogs/service.js';
import { StorageService } from '../storage/service.js';

type Row = Record<string, unknown>;

const RUNS_ENDPOINT = '/managed-agents/agents/{agentId}/runs';
const num = (v: string | undefined, d: number) => (v && Number.isFinite(Number(v)) ? Number(v) : d);

/** Limits of `deliverable_write`, from `RUN_DELIVERABLE_MAX_BYTES` / `RUN_MAX_ARTIFACTS`. */
export interface DeliverableLimits {
  maxBytes: number;
  maxArtifacts: number;
}

/**
 * The `deliverable_write` platform tool: stores the content as a storage file of type
 * `deliverable` (sourceId = run id) and records it as an artifact of the run. Writing the
 * same filename again in the run replaces the artifact's content (so a retried run never
 * duplicates a deliverable).
 */
export function deliverableTool(deps: ServerDeps, ctx: ToolContext, limits: DeliverableLimits): AgentTool {
  const def = catalogService.platformToolDefinitions().find((t) => t.toolId === 'deliverable_write');
  return {
    owner: 'platform',
    definition: {
      name: 'deliverable_write',
      description: def?.description ?? 'Writes a file as a deliverable of the current run.',
      parameters: (def?.inputSchema as Record<string, unknown>) ?? { type: 'object', properties: {} },
    },
    run: async (args, signal) => {
      const filename = typeof args.filename === 'string' ? args.filename.trim() : '';
      if (!filename) throw new ToolError('filename is required');
      if (filename.length > 255) throw new ToolError('filename must be 255 characters or less');
      if (typeof args.content !== 'string') throw new ToolError('content is required');
      const body = Buffer.from(args.content, 'utf8');
      if (body.length > limits.maxBytes) {
        throw new ToolError(`content exceeds the deliverable limit of ${limits.maxBytes} bytes`);
      }
      const mimeType = typeof args.mimeType === 'string' && args.mimeType ? args.mimeType : 'text/markdown';
      if (!/^[\w.+-]+\/[\w.+-]+$/.test(mimeType)) throw new ToolError('mimeType is not a valid MIME type');
      return writeDeliverable(deps, deps.em(), ctx, { filename, mimeType, body, signal }, limits);
    },
  };
}

async function writeDeliverable(
  deps: ServerDeps,
  em: EntityManager,
  ctx: ToolContext,
  input: { filename: string; mimeType: string; body: Buffer; signal: AbortSignal },
  limits: DeliverableLimits,
) {
  const count = await em.execute<Row[]>(
    'select count(*) as n from run_artifacts where run_id = ? and filename <> ?',
    [ctx.runId, input.filename],
  );
  if (Number(count[0]?.n ?? 0) >= limits.maxArtifacts) {
    throw new ToolError(`A run may write at most ${limits.maxArtifacts} deliverables`);
  }
  const storage = new StorageService(em, deps.objects);
  let file: Awaited<ReturnType<StorageService['createFile']>>;
  try {
    file = await storage.createFile({
      workspaceId: ctx.workspaceId,
      type: 'deliverable',
      filename: input.filename,
      mimeType: input.mimeType,
      source: `Agent run: ${ctx.agent.name}`.slice(0, 200),
      sourceId: ctx.runId,
      body: input.body,
      contentLength: input.body.length,
      signal: input.signal,
    });
  } catch (err) {
    if (input.signal.aborted) throw err;
    throw new ToolError(err instanceof Error ? err.message : String(err));
  }
  const rows = await em.execute<Row[]>(
    `with old as (select file_id from run_artifacts where run_id = ? and filename = ?)
     insert into run_artifacts (id, run_id, workspace_id, file_id, filename, mime_type, size_bytes)
     values (?, ?, ?, ?, ?, ?, ?)
     on conflict (run_id, filename) do update set file_id = excluded.file_id,
       mime_type = excluded.mime_type, size_bytes = excluded.size_bytes
     returning id, (select file_id from old) as old_file_id`,
    [
      ctx.runId,
      input.filename,
      randomUUID(),
      ctx.runId,
      ctx.workspaceId,
      file.id,
      file.filename,
      file.mimeType,
      file.sizeBytes ?? input.body.length,
    ],
  );
  const oldFileId = rows[0]?.old_file_id as string | null | undefined;
  if (oldFileId && oldFileId !== file.id) {
    await storage.deleteFile(ctx.workspaceId, oldFileId).catch(() => undefined);
  }
  return {
    artifactId: rows[0]?.id as string,
    fileId: file.id,
    filename: file.filename,
    mimeType: file.mimeType,
    sizeBytes: file.sizeBytes,
  };
}

/**
 * The `autonomous` run kind: the agent loop of assist mode (tools, integrator-owned calls
 * that pause the run, maxIterations, maxWallClockMs, metering) plus `deliverable_write`.
 * Artifact events are emitted as `artifact.created` so followers see them live.
 */
export function createAutonomousExecutor(deps: ServerDeps): TurnExecutor {
  const env = deps.config.env;
  const limits: DeliverableLimits = {
    maxBytes: num(env.RUN_DELIVERABLE_MAX_BYTES, 10 * 1024 * 1024),
    maxArtifacts: num(env.RUN_MAX_ARTIFACTS, 50),
  };
  return new TurnExecutor(deps as RuntimeDeps, {
    kind: 'autonomous',
    endpoint: RUNS_ENDPOINT,
    extraTools: (ctx: ToolContext, exec: RunExecution) => {
      const tool = deliverableTool(deps, ctx, limits);
      const run = tool.run as NonNullable<AgentTool['run']>;
      return [
        {
          ...tool,
          run: async (args, signal) => {
            const out = (await run(args, signal)) as Record<string, unknown>;
            await exec.emit('artifact.created', { runId: ctx.runId, ...out });
            return out;
          },
        },
      ];
    },
  });
}
