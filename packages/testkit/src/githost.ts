import http from 'node:http';
import type { AddressInfo } from 'node:net';
import zlib from 'node:zlib';
import tar from 'tar-stream';

export interface FakeRepoBranch {
  /** Full commit sha; the archive's top folder uses its first 7 characters, like GitHub. */
  sha: string;
  /** Relative path → content. A `{ symlink: target }` value becomes a symbolic link entry. */
  files: Record<string, string | Buffer | { symlink: string }>;
  /** Served as the tarball instead of one built from `files`: hand-made (hostile) archives. */
  tarball?: Buffer;
}

export interface FakeRepo {
  defaultBranch: string;
  branches: Record<string, FakeRepoBranch>;
  /** When set, the repository answers 404 unless `Authorization: Bearer <token>` matches (GitHub hides private repos). */
  token?: string;
  /** Force the tarball endpoint to answer this status (e.g. 500). */
  tarballStatus?: number;
}

export interface RecordedRequest {
  method: string;
  path: string;
  authorization: string | undefined;
}

export interface FakeGitHost {
  /** API base URL to give the server as `GITHOST_API_URL`. */
  url: string;
  repos: Record<string, FakeRepo>;
  requests: RecordedRequest[];
  close(): Promise<void>;
}

const STATUS_TEXT: Record<number, string> = { 404: 'Not Found', 500: 'Internal Server Error' };

/** A gzipped tarball shaped like GitHub's: every entry under `owner-repo-<sha7>/`. */
export async function buildTarball(owner: string, repo: string, branch: FakeRepoBranch): Promise<Buffer> {
  const pack = tar.pack();
  const top = `${owner}-${repo}-${branch.sha.slice(0, 7)}/`;
  const chunks: Buffer[] = [];
  const gz = zlib.createGzip();
  gz.on('data', (c: Buffer) => chunks.push(c));
  const done = new Promise<void>((resolve, reject) => {
    gz.on('end', resolve);
    gz.on('error', reject);
  });
  pack.pipe(gz);
  pack.entry({ name: top, type: 'directory' });
  const dirs = new Set<string>();
  for (const [path, content] of Object.entries(branch.files)) {
    const parts = path.split('/');
    for (let i = 1; i < parts.length; i++) {
      const dir = `${parts.slice(0, i).join('/')}/`;
      if (!dirs.has(dir)) {
        dirs.add(dir);
        pack.entry({ name: top + dir, type: 'directory' });
      }
    }
    if (typeof content === 'object' && !Buffer.isBuffer(content)) {
      pack.entry({ name: top + path, type: 'symlink', linkname: content.symlink });
    } else {
      pack.entry({ name: top + path }, content);
    }
  }
  pack.finalize();
  await done;
  return Buffer.concat(chunks);
}

/**
 * A GitHub-like API on loopback: `GET /repos/{owner}/{repo}` (metadata with `default_branch`)
 * and `GET /repos/{owner}/{repo}/tarball/{ref}` (a real gzipped tar). Unknown repositories and
 * refs answer 404; `tarballStatus` forces another status. Every request is recorded with its
 * `Authorization` header.
 */
export async function startFakeGitHost(repos: Record<string, FakeRepo> = {}): Promise<FakeGitHost> {
  const requests: RecordedRequest[] = [];
  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    requests.push({
      method: req.method ?? 'GET',
      path: url.pathname,
      authorization: req.headers.authorization,
    });
    const send = (status: number, body: unknown) => {
      res.statusCode = status;
      res.statusMessage = STATUS_TEXT[status] ?? res.statusMessage;
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify(body));
    };
    const m = /^\/repos\/([^/]+)\/([^/]+)(?:\/tarball\/(.+))?$/.exec(url.pathname);
    const repo = m ? repos[`${m[1]}/${m[2]}`] : undefined;
    if (!m || !repo || (repo.token && req.headers.authorization !== `Bearer ${repo.token}`)) {
      return send(404, { message: 'Not Found' });
    }
    const [, owner, name, ref] = m as unknown as [string, string, string, string | undefined];
    if (ref === undefined) {
      return send(200, {
        full_name: `${owner}/${name}`,
        default_branch: repo.defaultBranch,
        private: !!repo.token,
      });
    }
    if (repo.tarballStatus)
      return send(repo.tarballStatus, { message: STATUS_TEXT[repo.tarballStatus] ?? 'Error' });
    const branch = repo.branches[decodeURIComponent(ref)];
    if (!branch) return send(404, { message: 'Not Found' });
    const body = branch.tarball ?? (await buildTarball(owner, name, branch));
    res.statusCode = 200;
    res.setHeader('content-type', 'application/x-gzip');
    res.setHeader(
      'content-disposition',
      `attachment; filename=${owner}-${name}-${branch.sha.slice(0, 7)}.tar.gz`,
    );
    res.end(body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    repos,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
