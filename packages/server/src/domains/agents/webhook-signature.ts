import { createHmac } from 'node:crypto';

/**
 * Signing of the requests the service sends to integrators (tool callbacks, run completion
 * webhooks) per the Standard Webhooks specification, so off-the-shelf verifiers (the
 * `standardwebhooks` packages, Svix's libraries) accept them: `webhook-id`, `webhook-timestamp`
 * and `webhook-signature: v1,<base64 HMAC-SHA256("<id>.<timestamp>.<body>")>` keyed with the
 * base64-decoded part of the `whsec_` secret (docs/webhooks.md).
 */

/** The 32-byte key of an agent's callbacks, derived so nothing secret is stored twice. */
export function callbackKey(signingSecret: string, agentId: string): Buffer {
  return createHmac('sha256', signingSecret).update(`agent-callback:${agentId}`).digest();
}

/** The agent's `callbackSecret` as integrators see it: `whsec_` + the key in standard base64. */
export function callbackSecret(signingSecret: string, agentId: string): string {
  return `whsec_${callbackKey(signingSecret, agentId).toString('base64')}`;
}

/**
 * The secret's spelling before Standard Webhooks (base64url). The deprecated
 * `X-AiSuite-Signature` header stays keyed with this whole string, so a receiver that stored the
 * old secret and verifies the old header keeps working unchanged while it migrates.
 */
export function legacyCallbackSecret(signingSecret: string, agentId: string): string {
  return `whsec_${callbackKey(signingSecret, agentId).toString('base64url')}`;
}

export const LEGACY_SIGNATURE_HEADER = 'x-aisuite-signature';
/** The delivery id again (the value of `webhook-id`), under the name receivers already read. */
export const DELIVERY_HEADER = 'x-aisuite-delivery';
/** The event type (`tool_call`, `run.completed`…), readable without parsing the body. */
export const EVENT_HEADER = 'x-aisuite-event';

export interface SignedDelivery {
  /** Stable across retries of the same message: receivers deduplicate on it. */
  id: string;
  event: string;
  body: string;
  /** Unix seconds; now by default. */
  timestamp?: number;
}

/** The Standard Webhooks headers of one delivery, the deprecated legacy signature, id and event. */
export function webhookHeaders(
  signingSecret: string,
  agentId: string,
  d: SignedDelivery,
): Record<string, string> {
  const t = d.timestamp ?? Math.floor(Date.now() / 1000);
  const key = callbackKey(signingSecret, agentId);
  const signature = createHmac('sha256', key).update(`${d.id}.${t}.${d.body}`).digest('base64');
  const legacy = createHmac('sha256', legacyCallbackSecret(signingSecret, agentId))
    .update(`${t}.${d.body}`)
    .digest('hex');
  return {
    'webhook-id': d.id,
    'webhook-timestamp': String(t),
    'webhook-signature': `v1,${signature}`,
    [LEGACY_SIGNATURE_HEADER]: `t=${t},v1=${legacy}`,
    [DELIVERY_HEADER]: d.id,
    [EVENT_HEADER]: d.event,
  };
}
