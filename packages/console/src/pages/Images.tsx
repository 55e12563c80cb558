import type { ImageResult } from '@ai-suite/sdk';
import { type FormEvent, useEffect, useRef, useState } from 'react';
import { client } from '../api';
import { Link } from '../router';
import { ErrorNote, Field, formatNumber, formatUsd, Page, useAction, useAsync } from '../ui';

interface Generated {
  id: number;
  prompt: string;
  result: ImageResult;
  /** A `blob:` URL of the PNG (the CSP allows images from blob:). */
  url: string;
}

/** The PNG of a result: inline when nothing was stored, else the stored file read through the API. */
async function pngOf(result: ImageResult): Promise<Blob> {
  if (result.image) return new Blob([new Uint8Array(await result.bytes())], { type: 'image/png' });
  if (!result.processed_run_id) throw new Error('The result carries no image');
  const res = await client.storage.content({ id: result.processed_run_id, type: 'image' });
  return res.blob();
}

/**
 * Text to image (docs/image.md) through `client.images.generate`, on the console mount where the
 * signed-in person's session stands in for an API key (decision 0025).
 */
export function Images() {
  const models = useAsync(() => client.models.list({ kind: 'image' }), []);
  const [model, setModel] = useState('');
  const [prompt, setPrompt] = useState('');
  const [store, setStore] = useState(false);
  const [images, setImages] = useState<Generated[]>([]);
  // The blob: URLs die with the page.
  const urls = useRef<string[]>([]);
  useEffect(
    () => () => {
      for (const u of urls.current) URL.revokeObjectURL(u);
    },
    [],
  );
  const generate = useAction(async () => {
    const text = prompt.trim();
    const result = await client.images.generate({ prompt: text, store, ...(model ? { model } : {}) });
    const url = URL.createObjectURL(await pngOf(result));
    urls.current.push(url);
    setImages((list) => [{ id: (list[0]?.id ?? 0) + 1, prompt: text, result, url }, ...list]);
  });
  const submit = (e: FormEvent) => {
    e.preventDefault();
    if (prompt.trim() && !generate.busy) void generate.run();
  };
  const noModel = models.data && models.data.models.length === 0;
  return (
    <Page title="Images">
      <p className="muted">
        Generates an image from a prompt, charged to the workspace's credits per image. From code the same
        call takes an API key:{' '}
        <code>
          client.images.generate({'{'} prompt {'}'})
        </code>{' '}
        (see the API docs).
      </p>
      {noModel ? (
        <p className="error" role="alert">
          No image model is configured on this server: an operator sets <code>IMAGE_MODEL</code> (Replicate)
          or <code>IMAGE_ALT_MODEL</code>.
        </p>
      ) : null}
      <ErrorNote error={models.error} />
      <form className="panel" onSubmit={submit}>
        <div className="row">
          <Field label="Image model">
            {(p) => (
              <select {...p} value={model} onChange={(e) => setModel(e.target.value)}>
                <option value="">Default image model</option>
                {(models.data?.models ?? []).map((m) => (
                  <option key={m.id} value={m.id}>
                    {m.id}
                    {m.pricePerImage !== null ? ` (${formatUsd(m.pricePerImage)} per image)` : ''}
                  </option>
                ))}
              </select>
            )}
          </Field>
          <div className="field check">
            <input
              id="image-store"
              type="checkbox"
              checked={store}
              onChange={(e) => setStore(e.target.checked)}
            />
            <label htmlFor="image-store">Keep in storage</label>
          </div>
        </div>
        <Field label="Prompt" hint="Up to 4000 characters">
          {(p) => (
            <textarea
              {...p}
              rows={3}
              maxLength={4000}
              value={prompt}
              onChange={(e) => setPrompt(e.target.value)}
            />
          )}
        </Field>
        <button type="submit" disabled={generate.busy || !prompt.trim()}>
          {generate.busy ? 'Generating…' : 'Generate'}
        </button>
        {generate.busy ? (
          <span role="status" className="muted">
            {' '}
            Waiting for the model…
          </span>
        ) : null}
      </form>
      <ErrorNote error={generate.error} />
      {images.length ? (
        <ul className="image-grid" aria-label="Generated images">
          {images.map((g) => (
            <li key={g.id} className="panel" data-testid="generated-image">
              <img src={g.url} alt={`Generated from: ${g.prompt}`} />
              <p className="muted" data-testid="image-meta">
                {g.result.model} · {g.result.provider} · {formatUsd(g.result.costMicros / 1e6)}
                {g.result.tokensUsed ? ` · ${formatNumber(g.result.tokensUsed)} tokens` : ''}
              </p>
              <div className="row">
                <a className="button secondary" href={g.url} download={`image-${g.id}.png`}>
                  Download PNG
                </a>
                {g.result.processed_run_id ? (
                  <span className="muted">
                    Kept in <Link href="/storage">storage</Link> as image-{g.result.request_id}.png
                  </span>
                ) : null}
              </div>
            </li>
          ))}
        </ul>
      ) : null}
    </Page>
  );
}
