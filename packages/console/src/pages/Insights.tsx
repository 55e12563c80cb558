import { type FormEvent, useState } from 'react';
import { client } from '../api';
import { Link, navigate, useQuery } from '../router';
import {
  ErrorNote,
  Field,
  formatDate,
  formatNumber,
  formatUsd,
  Loading,
  Page,
  TableBox,
  useAsync,
} from '../ui';

type Status = 'active' | 'archived' | 'closed';
const PAGE = 20;

/** Conversations with the spec's filters (4.11); `?thread=` opens one. */
export function Insights() {
  const q = useQuery();
  const thread = q.get('thread');
  if (thread) return <Conversation threadId={thread} />;
  return <Conversations q={q} />;
}

function Conversations({ q }: { q: URLSearchParams }) {
  const filters = {
    from: q.get('from') ?? '',
    to: q.get('to') ?? '',
    user_key: q.get('user_key') ?? '',
    status: (q.get('status') ?? '') as Status | '',
    offset: Number(q.get('offset') ?? 0) || 0,
  };
  const [form, setForm] = useState(filters);
  const list = useAsync(
    () =>
      client.insights.conversations.list({
        limit: PAGE,
        offset: filters.offset,
        ...(filters.from ? { from: filters.from } : {}),
        ...(filters.to ? { to: filters.to } : {}),
        ...(filters.user_key ? { user_key: filters.user_key } : {}),
        ...(filters.status ? { status: filters.status } : {}),
      }),
    [q.toString()],
  );
  const go = (next: typeof filters) => {
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries(next)) if (v) p.set(k, String(v));
    navigate(`/insights${p.size ? `?${p}` : ''}`);
  };
  const submit = (e: FormEvent) => {
    e.preventDefault();
    go({ ...form, offset: 0 });
  };
  const total = list.data?.meta.total ?? 0;
  return (
    <Page title="Insights">
      <form className="panel row" onSubmit={submit} aria-label="Filter conversations">
        <Field label="From">
          {(p) => (
            <input
              {...p}
              type="date"
              value={form.from}
              onChange={(e) => setForm({ ...form, from: e.target.value })}
            />
          )}
        </Field>
        <Field label="To">
          {(p) => (
            <input
              {...p}
              type="date"
              value={form.to}
              onChange={(e) => setForm({ ...form, to: e.target.value })}
            />
          )}
        </Field>
        <Field label="User">
          {(p) => (
            <input
              {...p}
              value={form.user_key}
              onChange={(e) => setForm({ ...form, user_key: e.target.value })}
            />
          )}
        </Field>
        <Field label="Status">
          {(p) => (
            <select
              {...p}
              value={form.status}
              onChange={(e) => setForm({ ...form, status: e.target.value as Status | '' })}
            >
              <option value="">any</option>
              <option value="active">active</option>
              <option value="archived">archived</option>
              <option value="closed">closed</option>
            </select>
          )}
        </Field>
        <button type="submit">Filter</button>
      </form>
      <ErrorNote error={list.error} />
      {list.loading && !list.data ? <Loading what="conversations" /> : null}
      {list.data ? (
        list.data.data.length === 0 ? (
          <p className="muted">No conversations match.</p>
        ) : (
          <>
            <TableBox label="Conversations">
              <table>
                <caption className="visually-hidden">Conversations</caption>
                <thead>
                  <tr>
                    <th scope="col">Conversation</th>
                    <th scope="col">App</th>
                    <th scope="col">User</th>
                    <th scope="col" className="num">
                      Messages
                    </th>
                    <th scope="col" className="num">
                      Cost
                    </th>
                    <th scope="col">Updated</th>
                  </tr>
                </thead>
                <tbody>
                  {list.data.data.map((c) => (
                    <tr key={c.id}>
                      <td>
                        <Link href={`/insights?thread=${encodeURIComponent(c.id)}`}>
                          {c.title ?? c.id.slice(0, 8)}
                        </Link>
                      </td>
                      <td>{c.app_name ?? c.app_id}</td>
                      <td>{c.user_key ?? '—'}</td>
                      <td className="num">{formatNumber(c.message_count)}</td>
                      <td className="num">{formatUsd(c.usage_summary.totalCostUsd)}</td>
                      <td>{formatDate(c.updated_at)}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </TableBox>
            <div className="row pager">
              <button
                type="button"
                className="secondary"
                disabled={filters.offset === 0}
                onClick={() => go({ ...filters, offset: Math.max(0, filters.offset - PAGE) })}
              >
                Previous
              </button>
              <span className="muted">
                {filters.offset + 1}–{Math.min(filters.offset + PAGE, total)} of {total}
              </span>
              <button
                type="button"
                className="secondary"
                disabled={filters.offset + PAGE >= total}
                onClick={() => go({ ...filters, offset: filters.offset + PAGE })}
              >
                Next
              </button>
            </div>
          </>
        )
      ) : null}
    </Page>
  );
}

function Conversation({ threadId }: { threadId: string }) {
  const detail = useAsync(() => client.insights.conversations.get(threadId), [threadId]);
  const d = detail.data?.data;
  const cost = d?.usage_records.reduce((s, r) => s + r.cost_usd, 0) ?? 0;
  return (
    <Page title={d?.title ? `Conversation: ${d.title}` : 'Conversation'}>
      <p>
        <Link href="/insights">← All conversations</Link>
      </p>
      <ErrorNote error={detail.error} />
      {!d ? (
        <Loading what="the conversation" />
      ) : (
        <>
          <p className="muted">
            {d.status ?? '—'} · {formatNumber(d.message_count)} messages · {formatUsd(cost)} in{' '}
            {d.usage_records.length} model calls
          </p>
          <ol className="transcript" aria-label="Messages">
            {d.messages.map((m) => (
              <li key={m.id} className={`turn ${m.role}`} data-testid={`message-${m.role}`}>
                <span className="who-said">
                  {m.role} · {formatDate(m.created_at)}
                  {m.error_code ? ` · ${m.error_code}` : ''}
                </span>
                <div className="text">{m.content}</div>
              </li>
            ))}
          </ol>
          <h2>Usage records</h2>
          <TableBox label="Usage records">
            <table>
              <caption className="visually-hidden">Usage records of the conversation</caption>
              <thead>
                <tr>
                  <th scope="col">When</th>
                  <th scope="col">Model</th>
                  <th scope="col" className="num">
                    In
                  </th>
                  <th scope="col" className="num">
                    Out
                  </th>
                  <th scope="col" className="num">
                    Cost
                  </th>
                  <th scope="col">Status</th>
                </tr>
              </thead>
              <tbody>
                {d.usage_records.map((r) => (
                  <tr key={r.id}>
                    <td>{formatDate(r.usage_timestamp)}</td>
                    <td>{r.model}</td>
                    <td className="num">{formatNumber(r.input_tokens)}</td>
                    <td className="num">{formatNumber(r.output_tokens)}</td>
                    <td className="num">{formatUsd(r.cost_usd)}</td>
                    <td>{r.provider_status}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </TableBox>
        </>
      )}
    </Page>
  );
}
