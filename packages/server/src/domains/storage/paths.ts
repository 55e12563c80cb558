import { appError } from '../../errors/index.js';

/** Longest accepted logical path and path segment (characters). */
export const MAX_PATH_LENGTH = 1024;
export const MAX_NAME_LENGTH = 255;

const CONTROL = /\p{Cc}/u;
/**
 * Invisible characters that change how a name is shown, not what it says: bidirectional
 * overrides, embeddings, isolates and marks (U+202E shows `\u202etxt.exe` as `exe.txt`),
 * zero-width spaces, word joiners, the BOM, tag characters, line and paragraph separators.
 * Zero-width (non-)joiners stay allowed: emoji sequences and Persian and Indic scripts need them.
 */
const FORMAT = /(?![\u200c\u200d])[\p{Cf}\p{Zl}\p{Zp}]/u;

/** Why a name or path holds a character no name may hold, or null. */
function characterProblem(s: string): string | null {
  if (CONTROL.test(s)) return 'control characters are not allowed';
  const format = FORMAT.exec(s)?.[0];
  if (format !== undefined) {
    const code = (format.codePointAt(0) as number).toString(16).toUpperCase().padStart(4, '0');
    return `invisible formatting characters (here U+${code}) are not allowed`;
  }
  return null;
}

export const invalidPath = (input: string, reason: string) => appError('INVALID_PATH', { input, reason });

/** Why a single name (file or folder) is unusable, or null when it is fine. */
export function nameProblem(name: string): string | null {
  if (name.length === 0) return 'empty name';
  if (name.length > MAX_NAME_LENGTH) return `a name is longer than ${MAX_NAME_LENGTH} characters`;
  const chars = characterProblem(name);
  if (chars) return chars;
  if (name.includes('/') || name.includes('\\')) return 'a name cannot contain a slash or backslash';
  if (name === '.' || name === '..') return '"." and ".." are not allowed';
  return null;
}

/**
 * A folder path as stored: `/` or `/a/b` (leading slash, no trailing slash). Accepts `a/b`,
 * `/a/b/`; refuses `..`, `.`, duplicate slashes, backslashes, control and invisible formatting
 * characters.
 */
export function normalizeFolderPath(input: string): string {
  const raw = input.trim();
  if (raw === '' || raw === '/') return '/';
  if (raw.length > MAX_PATH_LENGTH) throw invalidPath(input, `longer than ${MAX_PATH_LENGTH} characters`);
  const chars = characterProblem(raw);
  if (chars) throw invalidPath(input, chars);
  if (raw.includes('\\')) throw invalidPath(input, 'backslashes are not allowed');
  if (raw.includes('//')) throw invalidPath(input, 'duplicate slashes are not allowed');
  const segments = raw.replace(/^\//, '').replace(/\/$/, '').split('/');
  for (const seg of segments) {
    if (seg === '..' || seg === '.') throw invalidPath(input, '"." and ".." segments are not allowed');
    const problem = nameProblem(seg);
    if (problem) throw invalidPath(input, problem);
  }
  return `/${segments.join('/')}`;
}

export function joinPath(folder: string, name: string): string {
  return folder === '/' ? `/${name}` : `${folder}/${name}`;
}

export function parentOf(path: string): string {
  const i = path.lastIndexOf('/');
  return i <= 0 ? '/' : path.slice(0, i);
}

export function baseName(path: string): string {
  return path.slice(path.lastIndexOf('/') + 1);
}

/** `/a/b/c` → [`/a`, `/a/b`, `/a/b/c`]; root has none. */
export function ancestorsAndSelf(folder: string): string[] {
  if (folder === '/') return [];
  const out: string[] = [];
  let acc = '';
  for (const seg of folder.slice(1).split('/')) {
    acc += `/${seg}`;
    out.push(acc);
  }
  return out;
}

/**
 * A relative path from an upload or archive entry (`dir/sub/a.txt`), resolved under `prefix`.
 * Refuses absolute paths (`/x`, `C:\x`), `..` segments, backslashes, control and invisible
 * formatting characters: an entry can never land outside the prefix. `./` segments are
 * dropped; a path of nothing else (`.`, `./.`) names no file and is refused.
 * Returns `{folder, name}` or an error message.
 */
export function resolveRelative(
  prefix: string,
  rel: string,
): { folder: string; name: string } | { error: string } {
  if (rel.length === 0) return { error: 'Empty path' };
  if (rel.length > MAX_PATH_LENGTH) return { error: `Path is longer than ${MAX_PATH_LENGTH} characters` };
  const chars = characterProblem(rel);
  if (chars) return { error: `Invalid path: ${chars}` };
  if (rel.includes('\\')) return { error: 'Path contains a backslash' };
  if (rel.startsWith('/') || /^[A-Za-z]:/.test(rel)) return { error: 'Absolute paths are not allowed' };
  const segments = rel.split('/').filter((s) => s !== '.');
  if (segments.includes('..')) return { error: 'Path escapes the import folder' };
  if (segments.some((s) => s === '')) return { error: 'Path contains duplicate slashes' };
  const name = segments.pop();
  if (name === undefined) return { error: 'Path names no file: "." and ".." are not allowed' };
  const problem = nameProblem(name);
  if (problem) return { error: `Invalid file name: ${problem}` };
  const folder = segments.reduce((acc, seg) => joinPath(acc, seg), prefix);
  if (folder.length + name.length + 1 > MAX_PATH_LENGTH) {
    return { error: `Path is longer than ${MAX_PATH_LENGTH} characters` };
  }
  return { folder, name };
}

const MIME_BY_EXT: Record<string, string> = {
  txt: 'text/plain',
  md: 'text/markdown',
  markdown: 'text/markdown',
  csv: 'text/csv',
  tsv: 'text/tab-separated-values',
  html: 'text/html',
  htm: 'text/html',
  css: 'text/css',
  js: 'text/javascript',
  mjs: 'text/javascript',
  cjs: 'text/javascript',
  ts: 'text/plain',
  tsx: 'text/plain',
  jsx: 'text/plain',
  py: 'text/x-python',
  rb: 'text/plain',
  go: 'text/plain',
  rs: 'text/plain',
  java: 'text/plain',
  c: 'text/plain',
  h: 'text/plain',
  sh: 'text/x-shellscript',
  yml: 'application/yaml',
  yaml: 'application/yaml',
  toml: 'text/plain',
  json: 'application/json',
  xml: 'application/xml',
  svg: 'image/svg+xml',
  png: 'image/png',
  jpg: 'image/jpeg',
  jpeg: 'image/jpeg',
  gif: 'image/gif',
  webp: 'image/webp',
  pdf: 'application/pdf',
  zip: 'application/zip',
  gz: 'application/gzip',
  docx: 'application/vnd.openxmlformats-officedocument.wordprocessingml.document',
  xlsx: 'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet',
  pptx: 'application/vnd.openxmlformats-officedocument.presentationml.presentation',
  mp3: 'audio/mpeg',
  mp4: 'video/mp4',
};

/** The declared type when it says something, else a guess from the extension. */
export function guessMimeType(filename: string, declared?: string | null): string {
  const d = declared?.trim().toLowerCase();
  if (d && d !== 'application/octet-stream' && /^[a-z0-9.+-]+\/[a-z0-9.+-]+/.test(d))
    return declared as string;
  const ext = filename.includes('.') ? filename.slice(filename.lastIndexOf('.') + 1).toLowerCase() : '';
  return MIME_BY_EXT[ext] ?? 'application/octet-stream';
}
