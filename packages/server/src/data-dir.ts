import fs from 'node:fs';
import path from 'node:path';

/** What lives under DATA_DIR is the service's alone: PostgreSQL insists on the same for its data. */
export const PRIVATE_DIR_MODE = 0o700;
export const PRIVATE_FILE_MODE = 0o600;

export class DataDirError extends Error {
  override name = 'DataDirError';
}

const octal = (mode: number) => (mode & 0o777).toString(8).padStart(4, '0');

/**
 * Creates `dir` owner-only, or checks an existing one: refused when another user owns it or
 * may write into it (anyone who can write there can replace the database or the objects), made
 * owner-only when others may only read it. `tighten` names subtrees whose every entry is made
 * owner-only as well (the embedded database's files; data directories of earlier versions
 * were created 0666/0755).
 */
export function prepareDataDir(dir: string, tighten: string[] = []): void {
  fs.mkdirSync(dir, { recursive: true, mode: PRIVATE_DIR_MODE });
  const st = fs.statSync(dir);
  if (!st.isDirectory()) throw new DataDirError(`DATA_DIR ${dir} is not a directory`);
  const uid = process.getuid?.();
  if (uid !== undefined && st.uid !== uid) {
    throw new DataDirError(
      `DATA_DIR ${dir} belongs to user ${st.uid}, not to the user running the service (${uid}): ` +
        `give it to this user (chown -R ${uid} ${dir}) or choose another DATA_DIR`,
    );
  }
  if ((st.mode & 0o022) !== 0) {
    throw new DataDirError(
      `DATA_DIR ${dir} can be written by other users (mode ${octal(st.mode)}); ` +
        `make it private to the user running the service (chmod 700 ${dir}) and start again`,
    );
  }
  if ((st.mode & 0o077) !== 0) fs.chmodSync(dir, PRIVATE_DIR_MODE);
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (tighten.includes(entry.name)) makeTreePrivate(full);
    else if (entry.isDirectory() || entry.isFile()) tightenEntry(full, entry.isDirectory());
  }
}

function tightenEntry(file: string, isDir: boolean) {
  const mode = fs.lstatSync(file).mode;
  if ((mode & 0o077) !== 0) fs.chmodSync(file, isDir ? PRIVATE_DIR_MODE : mode & PRIVATE_FILE_MODE);
}

/**
 * Every directory 0700, every file without group or other bits (iterative: trees can be deep).
 * PGlite's emulated file system creates some files 0644 whatever the umask (its relation cache
 * files, for one), so the embedded database runs this after it opens and after it closes.
 */
export function makeTreePrivate(root: string): void {
  const stack = [root];
  for (let dir = stack.pop(); dir !== undefined; dir = stack.pop()) {
    tightenEntry(dir, true);
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) stack.push(full);
      else if (entry.isFile()) tightenEntry(full, false);
    }
  }
}
