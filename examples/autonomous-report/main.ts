/**
 * examples/autonomous-report: hand an agent a task, come back for the result.
 *
 *   AI_SUITE_API_KEY=svc_ai_… pnpm --filter @ai-suite/example-autonomous-report start -- "Write the weekly report"
 *
 * Creates (or reuses, with AGENT_ID) an agent with deliverables enabled, starts an autonomous
 * run through `client.runs.createAndPoll` (which waits as long as the server's
 * `X-Poll-After-Ms` hint says between polls), then downloads every artifact into OUT_DIR.
 */
import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { AiSuite } from '@ai-suite/sdk';

export interface ReportOptions {
  client: AiSuite;
  task: string;
  /** An existing agent; one is created when absent. */
  agentId?: string;
  /** Where the artifacts are written (default `./out`). */
  outDir?: string;
  /** Idempotency key: running the example twice with the same key reuses the run. */
  messageId?: string;
  log?: (line: string) => void;
}

export async function runReport(opts: ReportOptions) {
  const { client, task } = opts;
  const log = opts.log ?? (() => {});
  const outDir = opts.outDir ?? path.resolve('out');
  let agentId = opts.agentId;
  if (!agentId) {
    const { agent } = await client.agents.create({
      name: 'Report writer',
      prompt:
        'You work autonomously. Save every deliverable with the deliverable_write tool, then answer with a one-line summary.',
      config: { runtimeMode: 'autonomous', capabilities: { deliverables: { enabled: true } } },
    });
    agentId = agent.id;
    log(`created agent ${agentId}`);
  }
  const done = await client.runs.createAndPoll(
    agentId,
    { task, metadata: { source: 'api', messageId: opts.messageId ?? randomUUID() } },
    { onUpdate: (d) => log(`run ${d.run.id}: ${d.run.status}`) },
  );
  if (done.run.status !== 'completed') {
    throw new Error(`Run ${done.run.id} ended ${done.run.status}: ${done.run.error ?? 'no reason given'}`);
  }
  await fs.mkdir(outDir, { recursive: true });
  const files: string[] = [];
  for (const artifact of await client.runs.artifacts(agentId, done.run.id)) {
    // The filename comes from the model: keep only its base name inside outDir.
    const target = path.join(outDir, path.basename(artifact.filename));
    await fs.writeFile(target, await artifact.bytes());
    files.push(target);
    log(`saved ${artifact.filename} (${artifact.size_bytes} bytes, ${artifact.mime_type})`);
  }
  const summary = done.events.filter((e) => e.event_type === 'message.completed').at(-1)?.payload.content;
  return { agentId, run: done.run, files, summary: typeof summary === 'string' ? summary : null };
}

const isMain =
  process.argv[1] && path.resolve(process.argv[1]) === path.resolve(new URL(import.meta.url).pathname);
if (isMain) {
  // parseArgs ends options at `--`, so `pnpm … start -- "task"` and `pnpm … start "task"` are the same.
  const { positionals } = parseArgs({ allowPositionals: true });
  const task = positionals.join(' ').trim() || 'Write a short weekly status report as report.md';
  runReport({
    client: new AiSuite(),
    task,
    agentId: process.env.AGENT_ID,
    outDir: process.env.OUT_DIR,
    log: (l) => console.log(l),
  }).then(
    (r) => console.log(r.summary ?? 'done', '\n', r.files.join('\n')),
    (err) => {
      console.error(err);
      process.exitCode = 1;
    },
  );
}
