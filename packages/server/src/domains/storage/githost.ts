import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import zlib from 'node:zlib';
import tar from 'tar-stream';
import type { ServerDeps } from '../../context.js';
import { AppError, appError } from '../../errors/index.js';
import { ImportSession, importLimits, isJunk } from './import.js';
import { normalizeFolderPath } from './paths.js';
import type { GitHostImportResultDto } from './schema.js';
import type { StorageService } from './service.js';

export const DEFAULT_GITHOST_API_URL = 'https://api.github.com';

const OWNER = /^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$/;
const REPO = /^[A-Za-z0-9._-]{1,100}$/;

const invalidRepoUrl = () => appError('INVALID_REPO_URL');

/** `https://host/owner/repo[.git][/][?branch=x]` → parts; 400 `Invalid GitHub repository URL` otherwise. */
export function parseRepoUrl(repoUrl: string): { owner: string; repo: string; branch?: string } {
  let url: URL;
  try {
    url = new URL(repoUrl.trim());
  } catch {
    throw invalidRepoUrl();
  }
  if ((url.protocol !== 'https:' && url.protocol !== 'http:') || url.username || url.password) {
    throw invalidRepoUrl();
  }
  const segments = url.pathname.replace(/\/+$/, '').split('/').slice(1);
  if (segments.length !== 2) throw invalidRepoUrl();
  const owner = segments[0] as string;
  const repo = (segments[1] as string).replace(/\.git$/, '');
  if (!OWNER.test(owner) || !REPO.test(repo) || repo === '.' || repo === '..') throw invalidRepoUrl();
  const branch = url.searchParams.get('branch')?.trim() || undefined;
  return { owner, repo, branch };
}

const BAD_REF = /[\u0000-\u0020\u007f~^:?*[\\]|\.\.|^\/|\/$|\/\//;

const fetchFailed = (status: number | string, statusText: string) =>
  appError('GITHOST_FETCH_FAILED', { status: `${status} ${statusText}`.trim() });

async function gitHostFetch(url: string, headers: Record<string, string>): Promise<Response> {
  try {
    return await fetch(url, { headers, redirect: 'follow' });
  } catch (err) {
    throw fetchFailed(502, `Bad Gateway (${(err as Error).message})`);
  }
}

/**
 * Imports a repository: resolves the branch (the repository's default unless given), streams
 * the tarball from the git host's API through gunzip and tar, and stores every regular file
 * under the prefix as a git-host mirror with `externalRef {provider, repo, branch, commit, path}`.
 * Symbolic links and other special entries are counted as skipped. Past the entry or byte
 * bounds the import stops with an error entry; files already stored stay.
 */
export async function importFromGitHost(
  deps: ServerDeps,
  storage: StorageService,
  input: { workspaceId: string; repoUrl: string; branch?: string; pathPrefix?: string },
): Promise<GitHostImportResultDto> {
  const { owner, repo, branch: urlBranch } = parseRepoUrl(input.repoUrl);
  const prefix = normalizeFolderPath(input.pathPrefix ?? '/');
  let ref = input.branch?.trim() || urlBranch;
  if (ref !== undefined && BAD_REF.test(ref)) throw appError('INVALID_BRANCH', { ref });
  const api = (deps.config.env.GITHOST_API_URL?.trim() || DEFAULT_GITHOST_API_URL).replace(/\/+$/, '');
  const token = await storage.getGitHostToken(input.workspaceId);
  const headers: Record<string, string> = {
    accept: 'application/vnd.github+json',
    'user-agent': 'ai-suite-storage',
    'x-github-api-version': '2022-11-28',
  };
  if (token) headers.authorization = `Bearer ${token}`;
  const repoPath = `/repos/${owner}/${repo}`;

  if (!ref) {
    const meta = await gitHostFetch(`${api}${repoPath}`, headers);
    if (!meta.ok) {
      await meta.body?.cancel();
      throw fetchFailed(meta.status, meta.statusText);
    }
    const body = (await meta.json().catch(() => ({}))) as { default_branch?: unknown };
    if (typeof body.default_branch !== 'string' || BAD_REF.test(body.default_branch)) {
      throw fetchFailed(502, 'Bad Gateway (no default branch in repository metadata)');
    }
    ref = body.default_branch;
  }
  const branch = ref;
  const res = await gitHostFetch(
    `${api}${repoPath}/tarball/${branch.split('/').map(encodeURIComponent).join('/')}`,
    headers,
  );
  if (!res.ok || !res.body) {
    await res.body?.cancel();
    throw fetchFailed(res.status, res.statusText);
  }

  const limits = importLimits(deps.config);
  let commit: string | null = null;
  const session = new ImportSession(storage, input.workspaceId, prefix, {
    source: `GitHub ${owner}/${repo}@${branch}`,
    isGitHostMirror: true,
    externalRef: (path) => ({ provider: 'github', repo: `${owner}/${repo}`, branch, commit, path }),
  });
  const extract = tar.extract();
  const guard = new TarGuard(limits);
  const feeding = pipeline(
    Readable.fromWeb(res.body as unknown as WebReadableStream<Uint8Array>),
    zlib.createGunzip(),
    guard,
    extract,
  );
  feeding.catch(() => undefined); // awaited below; keeps an early failure from being unhandled
  let entries = 0;
  let total = 0;
  let stopped = false;
  try {
    for await (const entry of extract) {
      const h = entry.header;
      guard.entry(h.size ?? 0);
      if (stopped) {
        entry.resume();
        continue;
      }
      const [top, ...rest] = h.name.split('/');
      const rel = rest.join('/');
      if (commit === null) {
        const pax = (h as unknown as { pax?: Record<string, string> }).pax?.comment;
        commit =
          pax && /^[0-9a-f]{40}$/.test(pax) ? pax : (/-([0-9a-f]{7,40})$/.exec(top ?? '')?.[1] ?? null);
      }
      entries++;
      total += h.size ?? 0;
      if (entries > limits.maxEntries || total > limits.maxTotalBytes) {
        session.error(rel || h.name, archiveStopMessage(limits));
        stopped = true;
        entry.resume();
        continue;
      }
      if (!rel || rel === '/') {
        entry.resume();
      } else if (h.type === 'directory') {
        entry.resume();
        if (!isJunk(rel)) await session.addFolder(rel);
      } else if (h.type !== 'file' && h.type !== 'contiguous-file') {
        session.skip(entry);
      } else if (isJunk(rel)) {
        session.skip(entry);
      } else if ((h.size ?? 0) > limits.maxFileBytes) {
        session.error(
          rel,
          `File exceeds the ${Math.round(limits.maxFileBytes / 1024 / 1024)} MB upload limit`,
          entry,
        );
      } else {
        await session.addFile(rel, entry, undefined, h.size);
      }
    }
    await feeding;
  } catch (err) {
    extract.destroy();
    await feeding.catch(() => undefined);
    if (err instanceof TarLimitError) {
      // As for the entry bounds: what was stored stays, the import says where it stopped.
      session.error('', err.message);
      return { ...session.result(), repo: `${owner}/${repo}`, branch };
    }
    if (err instanceof AppError) throw err;
    throw fetchFailed(502, `Bad Gateway (invalid archive: ${(err as Error).message})`);
  }
  return { ...session.result(), repo: `${owner}/${repo}`, branch };
}

/**
 * Bytes an archive may carry besides its entries' own headers and data: pax and long-name
 * headers (held in memory whole by the parser), data after the end of the archive.
 */
export const TAR_MAX_HEADER_BYTES = 1024 * 1024;

class TarLimitError extends Error {
  override name = 'TarLimitError';
}

/**
 * Between the inflater and the tar parser: counts the bytes the archive actually inflates to
 * (not what its headers declare) and stops it past the import's byte bound plus its entries'
 * headers; and stops headers the parser would hold in memory whole before it shows an entry
 * (a pax or long-name header declaring a gigabyte) past `TAR_MAX_HEADER_BYTES`.
 */
class TarGuard extends Transform {
  private inflated = 0;
  /** Bytes of the entries shown so far: their 512-byte header and their padded data. */
  private accounted = 0;
  private entries = 0;
  constructor(private readonly limits: { maxEntries: number; maxTotalBytes: number }) {
    super();
  }

  entry(size: number): void {
    this.entries++;
    this.accounted += 512 + Math.ceil(size / 512) * 512;
  }

  override _transform(
    chunk: Buffer,
    _enc: BufferEncoding,
    done: (err?: Error | null, data?: Buffer) => void,
  ) {
    this.inflated += chunk.length;
    const headers = 2048 * (this.entries + 1);
    if (this.inflated > this.limits.maxTotalBytes + headers + TAR_MAX_HEADER_BYTES) {
      done(new TarLimitError(archiveStopMessage(this.limits)));
      return;
    }
    if (this.inflated - this.accounted > TAR_MAX_HEADER_BYTES + headers) {
      done(
        new TarLimitError(
          `Import stopped: the archive holds more than ${TAR_MAX_HEADER_BYTES / 1024 / 1024} MB outside its entries (pax or long-name headers, trailing data)`,
        ),
      );
      return;
    }
    done(null, chunk);
  }
}

const archiveStopMessage = (l: { maxEntries: number; maxTotalBytes: number }) =>
  `Import stopped: the archive exceeds the import limits (at most ${l.maxEntries} entries and ${Math.round(l.maxTotalBytes / 1024 / 1024)} MB uncompressed)`;
