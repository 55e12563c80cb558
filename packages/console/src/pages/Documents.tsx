import {
  PermissionDeniedError,
  type RagDocument,
  type RagQueryResult,
  type RagSource,
  type StorageFile,
} from '@ai-suite/sdk';
import { type FormEvent, Fragment, type ReactNode, useEffect, useRef, useState } from 'react';
import { client } from '../api';
import {
  ErrorNote,
  Field,
  formatDate,
  formatNumber,
  formatUsd,
  Loading,
  Page,
  TableBox,
  useAction,
  useAsync,
} from '../ui';

const ACCEPT = '.txt,.md,.csv,.json,.pdf,.docx';

/**
 * Document question answering (docs/rag.md): the workspace's indexed documents (upload, status,
 * chunks, re-index, delete) and questions answered from them with cited sources.
 */
export function Documents() {
  const docs = useAsync(
    // Before the first upload the index does not exist: the API says 403, the page says "none yet".
    () =>
      client.rag.documents.list().then(
        (r) => r.documents,
        (err: unknown) => {
          if (err instanceof PermissionDeniedError) return [] as RagDocument[];
          throw err;
        },
      ),
    [],
  );
  const [notice, setNotice] = useState('');
  const [outcomes, setOutcomes] = useState<
    { filename: string; status: string; chunks: number; error?: string }[]
  >([]);
  const act = useAction(async (fn: () => Promise<string>) => {
    setNotice(await fn());
    docs.reload();
  });
  const upload = (input: HTMLInputElement) => {
    const files = input.files ? [...input.files] : [];
    if (!files.length) return;
    void act.run(async () => {
      setOutcomes([]);
      try {
        const r = await client.rag.upload(files);
        setOutcomes(r.results.details);
        return `Indexed ${r.results.successful} of ${files.length} file(s).`;
      } finally {
        input.value = '';
      }
    });
  };

  return (
    <Page title="Documents">
      <p className="muted">
        Documents of this workspace's index, answered from with their sources down to the page. Text,
        Markdown, CSV, JSON, PDF and Word files, up to 100 MB each.
      </p>
      <section className="panel" aria-labelledby="docs-h">
        <h2 id="docs-h">Indexed documents</h2>
        <div className="field">
          <label htmlFor="rag-upload">Upload documents</label>
          <input
            id="rag-upload"
            type="file"
            multiple
            accept={ACCEPT}
            aria-describedby="rag-upload-hint"
            onChange={(e) => upload(e.currentTarget)}
          />
          <small id="rag-upload-hint" className="hint">
            {ACCEPT.replaceAll(',', ' ')}
          </small>
        </div>
        {act.busy ? (
          <p role="status" className="muted">
            Indexing…
          </p>
        ) : null}
        {notice && !act.busy ? (
          <p role="status" className="ok" data-testid="upload-notice">
            {notice}
          </p>
        ) : null}
        {outcomes.some((o) => o.error) ? (
          <ul className="plain-list">
            {outcomes
              .filter((o) => o.error)
              .map((o) => (
                <li key={o.filename} className="error">
                  {o.filename}: {o.error}
                </li>
              ))}
          </ul>
        ) : null}
        <ErrorNote error={act.error ?? docs.error} />
        {!docs.data ? (
          docs.error ? null : (
            <Loading what="the documents" />
          )
        ) : docs.data.length === 0 ? (
          <p className="muted">No documents yet: upload some above.</p>
        ) : (
          <TableBox label="Documents">
            <table aria-label="Documents">
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">Status</th>
                  <th scope="col">Chunks</th>
                  <th scope="col">Size</th>
                  <th scope="col">Updated</th>
                  <th scope="col">
                    <span className="visually-hidden">Actions</span>
                  </th>
                </tr>
              </thead>
              <tbody>
                {docs.data.map((d) => (
                  <tr key={d.id} data-testid="document-row">
                    <td>{d.name}</td>
                    <td>
                      <span
                        className={`badge ${d.status === 'failed' ? 'bad' : d.status === 'ready' ? 'good' : ''}`}
                        data-testid="document-status"
                      >
                        {d.status}
                      </span>
                      {d.error ? <div className="error">{d.error}</div> : null}
                    </td>
                    <td data-testid="document-chunks">{formatNumber(d.chunks)}</td>
                    <td>{d.sizeBytes === null ? '—' : `${formatNumber(d.sizeBytes)} B`}</td>
                    <td>{formatDate(d.updatedAt)}</td>
                    <td className="row">
                      <button
                        type="button"
                        className="secondary"
                        aria-label={`Re-index ${d.name}`}
                        onClick={() =>
                          void act.run(async () => {
                            const r = await client.rag.documents.reindex(d.id);
                            return `Re-indexed ${r.name}: ${r.status}, ${r.chunks} chunk(s).`;
                          })
                        }
                      >
                        Re-index
                      </button>
                      <button
                        type="button"
                        className="danger"
                        aria-label={`Delete ${d.name}`}
                        onClick={() => {
                          if (window.confirm(`Delete ${d.name} and its chunks?`))
                            void act.run(async () => {
                              await client.rag.documents.delete(d.id);
                              return `Deleted ${d.name}.`;
                            });
                        }}
                      >
                        Delete
                      </button>
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </TableBox>
        )}
      </section>
      <Ask documents={docs.data ?? []} />
    </Page>
  );
}

function Ask({ documents }: { documents: RagDocument[] }) {
  const [question, setQuestion] = useState('');
  const [answer, setAnswer] = useState<RagQueryResult | undefined>(undefined);
  const [cited, setCited] = useState<number | undefined>(undefined);
  const ask = useAction(async () => {
    setAnswer(undefined);
    setCited(undefined);
    setAnswer(await client.rag.query({ query: question.trim() }));
  });
  const submit = (e: FormEvent) => {
    e.preventDefault();
    if (question.trim()) void ask.run();
  };
  const r = answer?.result;
  return (
    <section className="panel" aria-labelledby="ask-h">
      <h2 id="ask-h">Ask the documents</h2>
      <form onSubmit={submit}>
        <Field label="Question">
          {(p) => (
            <textarea
              {...p}
              rows={2}
              value={question}
              onChange={(e) => setQuestion(e.target.value)}
              onKeyDown={(e) => {
                if (e.key === 'Enter' && !e.shiftKey) {
                  e.preventDefault();
                  e.currentTarget.form?.requestSubmit();
                }
              }}
            />
          )}
        </Field>
        <button type="submit" disabled={ask.busy || !question.trim()}>
          {ask.busy ? 'Asking…' : 'Ask'}
        </button>
      </form>
      <ErrorNote error={ask.error} />
      {r && answer ? (
        <div className="rag-answer">
          <h3>Answer</h3>
          <p data-testid="rag-answer" className="text">
            <Cited text={r.answer} count={r.sources.length} onCite={setCited} />
          </p>
          <p className="muted" data-testid="rag-meta">
            Confidence {Math.round(r.confidence * 100)}% · {answer.usage.total_tokens} tokens ·{' '}
            {formatUsd(answer.usage.cost_usd)} · {answer.usage.model} ·{' '}
            {Math.round(answer.performance.total_ms)} ms
          </p>
          <h3>Sources</h3>
          {r.sources.length === 0 ? (
            <p className="muted">No source passed the confidence threshold.</p>
          ) : (
            <ol className="sources" aria-label="Sources">
              {r.sources.map((s, i) => (
                <Source
                  // biome-ignore lint/suspicious/noArrayIndexKey: sources are numbered by position
                  key={i}
                  n={i + 1}
                  source={s}
                  document={documents.find((d) => d.id === s.metadata?.document_id)}
                  highlighted={cited === i + 1}
                />
              ))}
            </ol>
          )}
        </div>
      ) : null}
    </section>
  );
}

/** The answer with each valid `[n]` as a link to source n. */
function Cited({ text, count, onCite }: { text: string; count: number; onCite(n: number): void }) {
  const parts: ReactNode[] = [];
  let last = 0;
  for (const m of text.matchAll(/\[(\d+)\]/g)) {
    const n = Number(m[1]);
    if (n < 1 || n > count) continue;
    parts.push(text.slice(last, m.index));
    parts.push(
      <a
        key={`${m.index}-${n}`}
        href={`#source-${n}`}
        className="cite"
        aria-label={`Source ${n}`}
        onClick={(e) => {
          e.preventDefault();
          onCite(n);
        }}
      >
        [{n}]
      </a>,
    );
    last = (m.index ?? 0) + m[0].length;
  }
  parts.push(text.slice(last));
  return (
    <>
      {parts.map((p, i) =>
        // biome-ignore lint/suspicious/noArrayIndexKey: a fixed sequence of text and links
        typeof p === 'string' ? <Fragment key={i}>{p}</Fragment> : p,
      )}
    </>
  );
}

/**
 * Opens the document a source cites in a new tab at its page: the stored file's bytes as a blob
 * URL with the `#page=N` fragment that the browser's PDF viewer honours (other types open whole).
 */
async function openAtPage(doc: RagDocument, pageNo: number): Promise<void> {
  const fileId = doc.storageFileId;
  if (!fileId) return;
  // An uploaded document is a `document` file; an indexed storage file keeps its own type.
  let type: StorageFile['type'] = 'document';
  if (doc.origin === 'storage') {
    const listed = await client.storage.list({ search: doc.name, limit: 200 });
    type = listed.files.find((f) => f.id === fileId)?.type ?? 'file';
  }
  const blob = await (await client.storage.content({ id: fileId, type })).blob();
  const url = URL.createObjectURL(blob);
  window.open(`${url}#page=${pageNo}`, '_blank', 'noopener');
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

function Source({
  n,
  source,
  document: doc,
  highlighted,
}: {
  n: number;
  source: RagSource;
  document: RagDocument | undefined;
  highlighted: boolean;
}) {
  const ref = useRef<HTMLLIElement>(null);
  const open = useAction(() => (doc ? openAtPage(doc, source.page) : Promise.resolve()));
  useEffect(() => {
    if (highlighted) {
      ref.current?.scrollIntoView({ block: 'nearest' });
      ref.current?.focus({ preventScroll: true });
    }
  }, [highlighted]);
  return (
    <li
      id={`source-${n}`}
      ref={ref}
      tabIndex={-1}
      className={`source${highlighted ? ' highlighted' : ''}`}
      aria-current={highlighted ? 'true' : undefined}
      data-testid="rag-source"
    >
      <div className="source-head">
        <strong>[{n}]</strong> <span data-testid="source-document">{source.document}</span>,{' '}
        <span data-testid="source-page">page {source.page}</span>{' '}
        <span className="muted">
          · relevance {Math.round(source.relevance_score * 100)}% · confidence{' '}
          {Math.round(source.confidence * 100)}%
        </span>{' '}
        {doc?.storageFileId ? (
          <button
            type="button"
            className="linkish"
            onClick={() => void open.run()}
            disabled={open.busy}
            aria-label={`Open page ${source.page} of ${source.document}`}
          >
            Open page {source.page}
          </button>
        ) : null}
      </div>
      <ErrorNote error={open.error} />
      <blockquote className="source-text">{source.content}</blockquote>
    </li>
  );
}
