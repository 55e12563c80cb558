import type { ToolApproval } from '@ai-suite/sdk';
import { type FormEvent, useState } from 'react';
import { client } from '../api';
import { Link } from '../router';
import { ErrorNote, Field, formatDate, useAction, useAsync } from '../ui';

/**
 * A tool call waiting for a person's decision (docs/agents.md, "Tool approval"): the arguments
 * the model gave, editable before approving, a reason for a denial. Decided calls show how.
 */
export function ApprovalCard({
  sessionId,
  approval,
  onDecided,
}: {
  sessionId: string;
  approval: ToolApproval;
  onDecided(): void;
}) {
  const [args, setArgs] = useState(JSON.stringify(approval.arguments, null, 2));
  const [reason, setReason] = useState('');
  const [badJson, setBadJson] = useState<string | undefined>();
  const approve = useAction(async () => {
    let parsed: Record<string, unknown>;
    try {
      parsed = JSON.parse(args);
    } catch {
      setBadJson('The arguments are not valid JSON.');
      return;
    }
    setBadJson(undefined);
    const edited = JSON.stringify(parsed) !== JSON.stringify(approval.arguments);
    await client.sessions.approveToolCall(
      sessionId,
      approval.toolCallId,
      edited ? { arguments: parsed } : {},
    );
    onDecided();
  });
  const deny = useAction(async () => {
    await client.sessions.denyToolCall(
      sessionId,
      approval.toolCallId,
      reason.trim() ? { reason: reason.trim() } : {},
    );
    onDecided();
  });
  if (approval.status !== 'pending') {
    return (
      <div className="tool-call" data-testid="approval">
        <div>
          <code>{approval.name}</code> needed a decision:{' '}
          <span
            className={`badge ${approval.status === 'approved' ? 'good' : 'bad'}`}
            data-testid="approval-status"
          >
            {approval.status}
          </span>
          {approval.reason ? <span className="muted"> · {approval.reason}</span> : null}
        </div>
        {approval.approvedArguments ? (
          <pre data-testid="approval-arguments">{JSON.stringify(approval.approvedArguments, null, 2)}</pre>
        ) : null}
      </div>
    );
  }
  const submit = (e: FormEvent) => {
    e.preventDefault();
    void approve.run();
  };
  return (
    <form className="tool-call" data-testid="approval" onSubmit={submit}>
      <div>
        The agent wants to call <code>{approval.name}</code>: approve or deny before{' '}
        {formatDate(approval.deadline)}.{' '}
        <span className="badge" data-testid="approval-status">
          pending
        </span>
      </div>
      <Field label="Arguments (JSON, editable)" hint="What the tool runs with once approved">
        {(p) => <textarea {...p} rows={4} value={args} onChange={(e) => setArgs(e.target.value)} />}
      </Field>
      <Field label="Reason for a denial (optional)">
        {(p) => <input {...p} value={reason} onChange={(e) => setReason(e.target.value)} />}
      </Field>
      {badJson ? <p className="error">{badJson}</p> : null}
      <ErrorNote error={approve.error ?? deny.error} />
      <div className="actions">
        <button type="submit" disabled={approve.busy || deny.busy}>
          Approve
        </button>{' '}
        <button
          type="button"
          className="secondary"
          disabled={approve.busy || deny.busy}
          onClick={() => void deny.run()}
        >
          Deny
        </button>
      </div>
    </form>
  );
}

/** The agent's tool calls waiting for a decision, each linking to its session. */
export function PendingApprovals({ agentId }: { agentId: string }) {
  const pending = useAsync(() => client.agents.pendingApprovals(agentId), [agentId]);
  return (
    <section aria-labelledby="approvals-h" className="panel">
      <div className="page-head">
        <h2 id="approvals-h">Waiting for approval</h2>
        <button type="button" className="secondary" onClick={pending.reload}>
          Refresh
        </button>
      </div>
      <ErrorNote error={pending.error} />
      {pending.data ? (
        pending.data.approvals.length === 0 ? (
          <p className="muted">No tool call is waiting for a decision.</p>
        ) : (
          <ul className="plain-list" data-testid="pending-approvals">
            {pending.data.approvals.map((a) => (
              <li key={a.toolCallId}>
                <code>{a.name}</code> <span className="muted">until {formatDate(a.deadline)}</span>{' '}
                {a.sessionId ? (
                  <Link href={`/agents/${agentId}/sessions/${a.sessionId}`}>Decide in the session</Link>
                ) : null}
              </li>
            ))}
          </ul>
        )
      ) : null}
    </section>
  );
}
