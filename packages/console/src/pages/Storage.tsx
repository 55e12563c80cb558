import type { StorageFile } from '@ai-suite/sdk';
import { type FormEvent, useEffect, useState } from 'react';
import { client } from '../api';
import { Link, useQuery } from '../router';
import { ErrorNote, Field, formatDate, formatNumber, Loading, Page, useAction, useAsync } from '../ui';

const TEXT = /^(text\/|application\/(json|xml|javascript|x-yaml|yaml|toml|csv))/;
const PREVIEW_LIMIT = 200_000;

const join = (folder: string, name: string) => `${folder === '/' ? '' : folder}/${name}`;

export function Storage() {
  const path = useQuery().get('path') || '/';
  const listing = useAsync(() => client.storage.tree(path), [path]);
  const [selected, setSelected] = useState<StorageFile | undefined>(undefined);
  const [folderName, setFolderName] = useState('');
  const [repoUrl, setRepoUrl] = useState('');
  const [notice, setNotice] = useState('');
  const act = useAction(async (fn: () => Promise<string>) => {
    setNotice(await fn());
    listing.reload();
  });
  // biome-ignore lint/correctness/useExhaustiveDependencies: a new folder clears the selection
  useEffect(() => setSelected(undefined), [path]);

  const crumbs = path.split('/').filter(Boolean);
  const upload = (files: FileList | null) => {
    if (!files?.length) return;
    void act.run(async () => {
      const r = await client.storage.import({
        kind: 'files',
        pathPrefix: path,
        files: [...files].map((f) => ({ path: f.name, content: f, ...(f.type ? { type: f.type } : {}) })),
      });
      return `Uploaded ${r.imported} file(s)${r.errors.length ? `, ${r.errors.length} refused` : ''}.`;
    });
  };
  const importZip = (files: FileList | null) => {
    const zip = files?.[0];
    if (!zip) return;
    void act.run(async () => {
      const r = await client.storage.import({ zip, filename: zip.name, pathPrefix: path });
      return `Imported ${r.imported} file(s) from ${zip.name}${r.errors.length ? `, ${r.errors.length} refused` : ''}.`;
    });
  };

  return (
    <Page title="Storage">
      <nav aria-label="Folder" className="crumbs">
        <Link href="/storage">Storage root</Link>
        {crumbs.map((c, i) => {
          const to = `/${crumbs.slice(0, i + 1).join('/')}`;
          return (
            <span key={to}>
              {' / '}
              <Link href={`/storage?path=${encodeURIComponent(to)}`}>{c}</Link>
            </span>
          );
        })}
      </nav>
      <div className="panel storage-actions">
        <div className="field">
          <label htmlFor="upload">Upload files here</label>
          <input id="upload" type="file" multiple onChange={(e) => upload(e.target.files)} />
        </div>
        <div className="field">
          <label htmlFor="zip">Import a zip here</label>
          <input
            id="zip"
            type="file"
            accept=".zip,application/zip"
            onChange={(e) => importZip(e.target.files)}
          />
        </div>
        <form
          className="row"
          onSubmit={(e: FormEvent) => {
            e.preventDefault();
            void act.run(async () => {
              await client.storage.createFolder(join(path, folderName.trim()));
              setFolderName('');
              return 'Folder created.';
            });
          }}
        >
          <Field label="New folder">
            {(p) => (
              <input {...p} required value={folderName} onChange={(e) => setFolderName(e.target.value)} />
            )}
          </Field>
          <button type="submit" className="secondary">
            Create folder
          </button>
        </form>
        <form
          className="row"
          onSubmit={(e: FormEvent) => {
            e.preventDefault();
            void act.run(async () => {
              const r = await client.storage.importGitHost({ repoUrl: repoUrl.trim(), pathPrefix: path });
              setRepoUrl('');
              return `Imported ${r.imported} file(s) from the repository.`;
            });
          }}
        >
          <Field label="Import a repository" hint="https://github.com/owner/repo">
            {(p) => (
              <input
                {...p}
                type="url"
                required
                value={repoUrl}
                onChange={(e) => setRepoUrl(e.target.value)}
              />
            )}
          </Field>
          <button type="submit" className="secondary">
            Import
          </button>
        </form>
      </div>
      {act.busy ? (
        <p role="status" className="muted">
          Working…
        </p>
      ) : null}
      {notice && !act.busy ? (
        <p role="status" className="ok">
          {notice}
        </p>
      ) : null}
      <ErrorNote error={act.error ?? listing.error} />
      <div className="split">
        <div>
          {listing.loading && !listing.data ? <Loading what="the folder" /> : null}
          {listing.data ? (
            <ul className="plain-list files" aria-label={`Contents of ${path}`}>
              {listing.data.folders.map((f) => (
                <li key={f.id}>
                  <Link href={`/storage?path=${encodeURIComponent(f.path)}`}>📁 {f.name}</Link>
                </li>
              ))}
              {listing.data.files.map((f) => (
                <li key={f.id}>
                  <button
                    type="button"
                    className="linkish"
                    aria-pressed={selected?.id === f.id}
                    onClick={() => setSelected(f)}
                  >
                    {f.filename}
                  </button>{' '}
                  <span className="muted">{formatNumber(f.sizeBytes)} B</span>
                </li>
              ))}
              {listing.data.folders.length + listing.data.files.length === 0 ? (
                <li className="muted">This folder is empty.</li>
              ) : null}
            </ul>
          ) : null}
        </div>
        <div>
          {selected ? (
            <Preview
              key={selected.id}
              file={selected}
              onChanged={() => {
                setSelected(undefined);
                listing.reload();
              }}
            />
          ) : null}
        </div>
      </div>
    </Page>
  );
}

function Preview({ file, onChanged }: { file: StorageFile; onChanged(): void }) {
  const [text, setText] = useState<string | undefined>(undefined);
  const [image, setImage] = useState<string | undefined>(undefined);
  const [error, setError] = useState<unknown>(undefined);
  useEffect(() => {
    let url: string | undefined;
    let live = true;
    const isImage = file.mimeType.startsWith('image/') && file.mimeType !== 'image/svg+xml';
    const isText =
      TEXT.test(file.mimeType) || /\.(md|txt|ts|js|json|ya?ml|csv|py|html|css)$/i.test(file.filename);
    if (!isImage && !isText) return;
    client.storage
      .content(file)
      .then(async (res) => {
        const blob = await res.blob();
        if (!live) return;
        if (isImage) {
          url = URL.createObjectURL(blob);
          setImage(url);
        } else
          setText((await blob.slice(0, PREVIEW_LIMIT).text()) + (blob.size > PREVIEW_LIMIT ? '\n…' : ''));
      })
      .catch(setError);
    return () => {
      live = false;
      if (url) URL.revokeObjectURL(url);
    };
  }, [file]);
  const act = useAction(async (fn: () => PromiseLike<unknown>) => {
    await fn();
    onChanged();
  });
  const download = async () => {
    const blob = await (await client.storage.content(file)).blob();
    const url = URL.createObjectURL(blob);
    const a = document.createElement('a');
    a.href = url;
    a.download = file.filename;
    a.click();
    setTimeout(() => URL.revokeObjectURL(url), 10_000);
  };
  return (
    <section className="panel" aria-labelledby="preview-h">
      <h2 id="preview-h">{file.filename}</h2>
      <p className="muted">
        {file.path} · {file.mimeType} · {formatNumber(file.sizeBytes)} bytes · {formatDate(file.createdAt)} ·
        index:{' '}
        <span className="badge" data-testid="index-status">
          {file.indexStatus}
        </span>
        {file.isGitHostMirror ? ' · mirrored from a repository' : ''}
      </p>
      <div className="row">
        <button type="button" className="secondary" onClick={() => void download()}>
          Download
        </button>
        <button
          type="button"
          className="secondary"
          onClick={() => {
            const name = window.prompt('New name', file.filename);
            if (name && name !== file.filename) void act.run(() => client.storage.rename(file.id, name));
          }}
        >
          Rename
        </button>
        <button
          type="button"
          className="secondary"
          onClick={() => {
            const dest = window.prompt('Move to folder', '/');
            if (dest) void act.run(() => client.storage.move(file.id, dest));
          }}
        >
          Move
        </button>
        <button
          type="button"
          className="danger"
          onClick={() => {
            if (window.confirm(`Delete ${file.filename}?`))
              void act.run(() => client.storage.delete(file.id));
          }}
        >
          Delete
        </button>
      </div>
      <ErrorNote error={error ?? act.error} />
      {image ? (
        <img
          className="preview-img"
          src={image}
          alt={`Preview of ${file.filename}`}
          data-testid="preview-image"
        />
      ) : null}
      {text !== undefined ? <pre data-testid="preview-text">{text}</pre> : null}
      {!image && text === undefined && !error ? <p className="muted">No preview for this type.</p> : null}
    </section>
  );
}
