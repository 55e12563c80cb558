import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DataDirError, makeTreePrivate, prepareDataDir } from './data-dir.js';

const root = fs.mkdtempSync(path.join(os.tmpdir(), 'aisuite-datadir-'));
afterAll(() => fs.rmSync(root, { recursive: true, force: true }));
const mode = (p: string) => fs.statSync(p).mode & 0o777;

describe('prepareDataDir', () => {
  it('creates a missing DATA_DIR owner-only', () => {
    const dir = path.join(root, 'fresh', 'nested');
    prepareDataDir(dir);
    expect(mode(dir)).toBe(0o700);
  });

  it('refuses a DATA_DIR that other users can write, with the fix in the message', () => {
    for (const m of [0o777, 0o770, 0o702]) {
      const dir = fs.mkdtempSync(path.join(root, 'open-'));
      fs.chmodSync(dir, m);
      expect(() => prepareDataDir(dir)).toThrow(DataDirError);
      expect(() => prepareDataDir(dir)).toThrow(
        `DATA_DIR ${dir} can be written by other users (mode 0${m.toString(8)}); make it private to the user running the service (chmod 700 ${dir}) and start again`,
      );
      expect(mode(dir)).toBe(m); // left as found: the operator decides
    }
  });

  it.skipIf(process.getuid?.() !== 0)('refuses a DATA_DIR that belongs to another user', () => {
    const dir = fs.mkdtempSync(path.join(root, 'theirs-'));
    fs.chownSync(dir, 65534, 65534);
    expect(() => prepareDataDir(dir)).toThrow(
      /belongs to user 65534, not to the user running the service \(0\)/,
    );
  });

  it('makes a readable DATA_DIR and the embedded database under it owner-only', () => {
    const dir = fs.mkdtempSync(path.join(root, 'legacy-'));
    fs.chmodSync(dir, 0o755);
    fs.mkdirSync(path.join(dir, 'pgdata', 'base', '5'), { recursive: true, mode: 0o755 });
    fs.writeFileSync(path.join(dir, 'pgdata', 'PG_VERSION'), '17', { mode: 0o666 });
    fs.writeFileSync(path.join(dir, 'pgdata', 'base', '5', '1259'), 'x', { mode: 0o644 });
    fs.chmodSync(path.join(dir, 'pgdata', 'PG_VERSION'), 0o666);
    fs.mkdirSync(path.join(dir, 'objects'), { mode: 0o755 });
    fs.chmodSync(path.join(dir, 'objects'), 0o755);
    prepareDataDir(dir, ['pgdata']);
    expect(mode(dir)).toBe(0o700);
    expect(mode(path.join(dir, 'objects'))).toBe(0o700);
    expect(mode(path.join(dir, 'pgdata'))).toBe(0o700);
    expect(mode(path.join(dir, 'pgdata', 'base', '5'))).toBe(0o700);
    expect(mode(path.join(dir, 'pgdata', 'PG_VERSION'))).toBe(0o600);
    expect(mode(path.join(dir, 'pgdata', 'base', '5', '1259'))).toBe(0o600);
  });

  it('keeps the owner bits of files it tightens', () => {
    const dir = fs.mkdtempSync(path.join(root, 'bits-'));
    const file = path.join(dir, 'ro');
    fs.writeFileSync(file, 'x');
    fs.chmodSync(file, 0o444);
    makeTreePrivate(dir);
    expect(mode(file)).toBe(0o400);
  });
});
