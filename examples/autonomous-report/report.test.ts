import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { AiSuite } from '@ai-suite/sdk';
import {
  createTestWorkspace,
  type FakeOpenAI,
  startTestServerWithFakeModel,
  type TestServer,
} from '@ai-suite/server/test-harness';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runReport } from './main.js';

let ts: TestServer & { fake: FakeOpenAI };
let apiKey: string;
let outDir: string;

beforeAll(async () => {
  ts = await startTestServerWithFakeModel({ env: { RUN_POLL_INTERVAL_MS: '50', RUN_POLL_HINT_MS: '50' } });
  apiKey = (await createTestWorkspace(ts, { creditsUsd: '5' })).apiKey;
  outDir = fs.mkdtempSync(path.join(os.tmpdir(), 'autonomous-report-'));
});
afterAll(async () => {
  await ts?.close();
  fs.rmSync(outDir, { recursive: true, force: true });
});

describe('examples/autonomous-report', () => {
  it('creates a run through the SDK and downloads its artifact', async () => {
    const report = '# Weekly report\n\n- Shipped autonomous runs\n';
    ts.fake.script(
      {
        toolCalls: [
          {
            id: 'w1',
            name: 'deliverable_write',
            arguments: JSON.stringify({ filename: 'report.md', content: report }),
          },
        ],
      },
      { text: 'The weekly report is saved as report.md.' },
    );
    const lines: string[] = [];
    const result = await runReport({
      client: new AiSuite({ baseURL: ts.url, apiKey }),
      task: 'Write the weekly report',
      outDir,
      log: (l) => lines.push(l),
    });
    expect(result.run.status).toBe('completed');
    expect(result.summary).toBe('The weekly report is saved as report.md.');
    expect(result.files).toEqual([path.join(outDir, 'report.md')]);
    expect(fs.readFileSync(path.join(outDir, 'report.md'), 'utf8')).toBe(report);
    expect(lines.some((l) => l.endsWith(': completed'))).toBe(true);
  });
});
