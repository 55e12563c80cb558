import { AiSuiteError } from '../core/errors.js';

/**
 * Verification of the requests the service sends to you (custom tool callbacks, run completion
 * webhooks). They are signed per the Standard Webhooks specification, so any of its verifiers
 * works too; this one needs nothing but Web Crypto (Node >= 20, Deno, Bun, edge runtimes).
 */

/** A delivery failed verification: missing headers, a bad signature or a stale timestamp. */
export class WebhookVerificationError extends AiSuiteError {
  override name = 'WebhookVerificationError';
}

/** Request headers as a `Headers` object (fetch, Hono…) or a plain record (Node's `req.headers`, express). */
export type WebhookHeaders = Headers | Record<string, string | string[] | undefined>;

export interface VerifyWebhookOptions {
  /** Largest accepted difference between `webhook-timestamp` and now, in seconds. Default 300. */
  toleranceSeconds?: number;
  /** The current time (tests). */
  now?: Date;
}

/** The body of a custom tool's callback request (`webhook-id` = `id`, event `tool_call`). */
export interface ToolCallWebhook {
  type: 'tool_call';
  id: string;
  agentId: string;
  sessionId: string | null;
  runId: string;
  tool: string;
  arguments: Record<string, unknown>;
  timestamp: string;
}

/** The body of an autonomous run's completion webhook (`webhook-id` = `runId` on every attempt). */
export interface RunWebhook {
  type: 'run.completed' | 'run.failed' | 'run.cancelled';
  id: string;
  runId: string;
  agentId: string;
  sessionId: string;
  status: 'completed' | 'failed' | 'cancelled';
  task: string;
  error: string | null;
  created_at: string;
  started_at: string | null;
  completed_at: string | null;
  metadata: Record<string, unknown>;
  artifacts: {
    id: string;
    file_id: string;
    filename: string;
    mime_type: string;
    size_bytes: number;
    created_at: string;
  }[];
  /** 1 on the first attempt; the body changes between attempts, `webhook-id` does not. */
  attempt: number;
  timestamp: string;
}

/**
 * An autonomous run waits for a person's decision on a tool call (docs/runs.md, "Waiting for a
 * decision"); `webhook-id` is the tool call id. Decide with `sessions.approveToolCall` /
 * `denyToolCall`.
 */
export interface RunApprovalWebhook {
  type: 'run.approval_required';
  id: string;
  runId: string;
  agentId: string;
  sessionId: string;
  status: 'running';
  task: string;
  toolCallId: string;
  name: string;
  arguments: Record<string, unknown>;
  deadline: string;
  metadata: Record<string, unknown>;
  attempt: number;
  timestamp: string;
}

export type WebhookEvent = ToolCallWebhook | RunWebhook | RunApprovalWebhook;

const PREFIX = 'whsec_';

function header(headers: WebhookHeaders, name: string): string | undefined {
  if (typeof (headers as Headers).get === 'function') return (headers as Headers).get(name) ?? undefined;
  const rec = headers as Record<string, string | string[] | undefined>;
  const key = Object.keys(rec).find((k) => k.toLowerCase() === name);
  const v = key === undefined ? undefined : rec[key];
  return Array.isArray(v) ? v[0] : v;
}

function fromBase64(s: string): Uint8Array<ArrayBuffer> {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

function toBase64(bytes: Uint8Array): string {
  let bin = '';
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin);
}

/** Compares without an early exit, so the time taken says nothing about where they differ. */
function sameText(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

/**
 * Checks a delivery's Standard Webhooks signature and returns its parsed JSON body.
 *
 * @param payload the raw request body exactly as received (string or bytes), never re-serialised JSON
 * @param headers the request headers; `webhook-id`, `webhook-timestamp` and `webhook-signature` are read
 * @param secret the agent's `callbackSecret` (`whsec_…`, from `client.agents.retrieve(id)`)
 * @throws WebhookVerificationError when a header is missing, no signature matches or the
 *   timestamp is outside the tolerance (replays)
 */
export async function verifyWebhook<T = WebhookEvent>(
  payload: string | Uint8Array,
  headers: WebhookHeaders,
  secret: string,
  options: VerifyWebhookOptions = {},
): Promise<T> {
  const id = header(headers, 'webhook-id');
  const timestamp = header(headers, 'webhook-timestamp');
  const signatures = header(headers, 'webhook-signature');
  if (!id || !timestamp || !signatures) throw new WebhookVerificationError('Missing required headers');
  const t = Number(timestamp);
  if (!/^\d+$/.test(timestamp) || !Number.isSafeInteger(t)) {
    throw new WebhookVerificationError('Invalid webhook-timestamp');
  }
  const now = Math.floor((options.now ?? new Date()).getTime() / 1000);
  const tolerance = options.toleranceSeconds ?? 300;
  if (now - t > tolerance) throw new WebhookVerificationError('Message timestamp too old');
  if (t - now > tolerance) throw new WebhookVerificationError('Message timestamp too new');

  let keyBytes: Uint8Array<ArrayBuffer>;
  try {
    keyBytes = fromBase64(secret.startsWith(PREFIX) ? secret.slice(PREFIX.length) : secret);
  } catch {
    throw new WebhookVerificationError('The secret is not a whsec_ base64 secret');
  }
  const body = typeof payload === 'string' ? new TextEncoder().encode(payload) : payload;
  const prefix = new TextEncoder().encode(`${id}.${timestamp}.`);
  const signed = new Uint8Array(prefix.length + body.length);
  signed.set(prefix);
  signed.set(body, prefix.length);
  const key = await globalThis.crypto.subtle.importKey(
    'raw',
    keyBytes,
    { name: 'HMAC', hash: 'SHA-256' },
    false,
    ['sign'],
  );
  const expected = `v1,${toBase64(new Uint8Array(await globalThis.crypto.subtle.sign('HMAC', key, signed)))}`;
  // Several space-separated signatures may be present (key rotation); one match is enough.
  if (!signatures.split(' ').some((s) => sameText(s, expected))) {
    throw new WebhookVerificationError('No matching signature found');
  }
  const text = typeof payload === 'string' ? payload : new TextDecoder().decode(payload);
  return JSON.parse(text) as T;
}
