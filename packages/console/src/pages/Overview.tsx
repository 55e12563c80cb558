import { client } from '../api';
import { BarChart } from '../chart';
import { isManager, useRole, useSession } from '../session';
import { ErrorNote, formatDate, formatNumber, formatUsd, Loading, Page, TableBox, useAsync } from '../ui';

export function Overview() {
  const { session } = useSession();
  const role = useRole();
  const ws = session?.workspace;
  const usage = useAsync(() => client.insights.usage({ days: 30 }), [ws?.id]);
  const u = usage.data;
  return (
    <Page title="Overview">
      <dl className="facts">
        <div>
          <dt>Workspace</dt>
          <dd data-testid="workspace-name">{ws?.name}</dd>
        </div>
        <div>
          <dt>Your role</dt>
          <dd data-testid="role">{ws?.role}</dd>
        </div>
        <div>
          <dt>Credit balance</dt>
          <dd data-testid="balance">{u ? formatUsd(u.credits.balanceUsd) : '…'}</dd>
        </div>
        <div>
          <dt>Tokens this cycle</dt>
          <dd data-testid="quota">
            {u
              ? `${formatNumber(u.tokenQuota.used)} / ${u.tokenQuota.quota === null ? 'unlimited' : formatNumber(u.tokenQuota.quota)}`
              : '…'}
          </dd>
        </div>
        <div>
          <dt>Quota resets</dt>
          <dd>{u ? formatDate(u.tokenQuota.resetsAt) : '…'}</dd>
        </div>
      </dl>
      <ErrorNote error={usage.error} />
      {usage.loading && !u ? <Loading what="usage" /> : null}
      {u ? (
        <>
          <h2>Last 30 days</h2>
          <dl className="facts">
            <div>
              <dt>Requests</dt>
              <dd data-testid="total-requests">{formatNumber(u.totals.requests)}</dd>
            </div>
            <div>
              <dt>Tokens in / out</dt>
              <dd>
                {formatNumber(u.totals.inputTokens)} / {formatNumber(u.totals.outputTokens)}
              </dd>
            </div>
            <div>
              <dt>Cost</dt>
              <dd>{formatUsd(u.totals.costUsd)}</dd>
            </div>
            <div>
              <dt>Failed calls</dt>
              <dd>{formatNumber(u.totals.errors)}</dd>
            </div>
          </dl>
          <div className="charts">
            <BarChart
              label="Requests"
              points={u.byDay.map((d) => ({ x: d.date, y: d.requests }))}
              format={formatNumber}
            />
            <BarChart
              label="Tokens"
              points={u.byDay.map((d) => ({ x: d.date, y: d.inputTokens + d.outputTokens }))}
              format={formatNumber}
            />
            <BarChart
              label="Cost"
              points={u.byDay.map((d) => ({ x: d.date, y: d.costUsd }))}
              format={formatUsd}
            />
          </div>
          <h2>By model</h2>
          <UsageTable
            caption="Usage by model"
            rows={u.byModel.map((m) => ({ key: m.model, label: m.model, ...m }))}
          />
          {isManager(role) ? (
            <>
              <h2>By API key</h2>
              <UsageTable
                caption="Usage by API key"
                rows={u.byApiKey.map((k) => ({
                  key: k.apiKeyId ?? 'none',
                  label: k.apiKeyId ? `${k.name ?? 'unnamed'} (${k.prefix ?? ''})` : 'console (no key)',
                  ...k,
                }))}
              />
            </>
          ) : null}
          <h2>Recent errors</h2>
          {u.recentErrors.length === 0 ? (
            <p className="muted">No failed calls in this window.</p>
          ) : (
            <TableBox label="Recent errors">
              <table>
                <caption className="visually-hidden">Recent failed calls</caption>
                <thead>
                  <tr>
                    <th scope="col">When</th>
                    <th scope="col">Endpoint</th>
                    <th scope="col">Model</th>
                    <th scope="col">Status</th>
                    <th scope="col">Request id</th>
                  </tr>
                </thead>
                <tbody>
                  {u.recentErrors.map((e) => (
                    <tr key={e.id}>
                      <td>{formatDate(e.createdAt)}</td>
                      <td>
                        <code>{e.endpoint}</code>
                      </td>
                      <td>{e.model}</td>
                      <td>
                        <span className="badge bad">{e.status}</span>
                      </td>
                      <td>
                        <code>{e.requestId}</code>
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </TableBox>
          )}
        </>
      ) : null}
    </Page>
  );
}

function UsageTable({
  caption,
  rows,
}: {
  caption: string;
  rows: {
    key: string;
    label: string;
    requests: number;
    inputTokens: number;
    outputTokens: number;
    costUsd: number;
  }[];
}) {
  if (rows.length === 0) return <p className="muted">No usage in this window.</p>;
  return (
    <TableBox label={caption}>
      <table>
        <caption className="visually-hidden">{caption}</caption>
        <thead>
          <tr>
            <th scope="col">Name</th>
            <th scope="col" className="num">
              Requests
            </th>
            <th scope="col" className="num">
              Input tokens
            </th>
            <th scope="col" className="num">
              Output tokens
            </th>
            <th scope="col" className="num">
              Cost
            </th>
          </tr>
        </thead>
        <tbody>
          {rows.map((r) => (
            <tr key={r.key}>
              <td>{r.label}</td>
              <td className="num">{formatNumber(r.requests)}</td>
              <td className="num">{formatNumber(r.inputTokens)}</td>
              <td className="num">{formatNumber(r.outputTokens)}</td>
              <td className="num">{formatUsd(r.costUsd)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </TableBox>
  );
}
