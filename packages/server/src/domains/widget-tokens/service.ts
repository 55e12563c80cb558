import { randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Principal } from '../../auth/principal.js';
import {
  generateWidgetToken,
  hashWidgetToken,
  normalizeOrigin,
  widgetTokenDisplayPrefix,
} from '../../auth/widget-tokens.js';
import { appError } from '../../errors/index.js';
import { APPS_PAGE, assertWorkspaceApp, clampPage } from '../apps/service.js';
import {
  type CreateWidgetTokenInput,
  WIDGET_TOKEN_MAX_REQUESTS,
  WIDGET_TOKEN_TTL,
  type WidgetTokenDto,
} from './schema.js';

interface TokenRow {
  id: string;
  app_id: string | null;
  name: string | null;
  token_prefix: string;
  subject: string | null;
  allowed_origins: string[] | null;
  max_requests: number | null;
  request_count: number;
  expires_at: Date;
  revoked_at: Date | null;
  last_used_at: Date | null;
  created_at: Date;
}

const iso = (d: Date | string | null) => (d ? new Date(d).toISOString() : null);
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

const toDto = (r: TokenRow): WidgetTokenDto => ({
  id: r.id,
  scope: r.app_id ? 'app' : 'workspace',
  appId: r.app_id,
  name: r.name,
  prefix: r.token_prefix,
  subject: r.subject,
  allowedOrigins: r.allowed_origins ?? [],
  maxRequests: Number(r.max_requests ?? WIDGET_TOKEN_MAX_REQUESTS.default),
  requestCount: Number(r.request_count),
  expiresAt: iso(r.expires_at) as string,
  revokedAt: iso(r.revoked_at),
  lastUsedAt: iso(r.last_used_at),
  createdAt: iso(r.created_at) as string,
});

/** Issues, lists and revokes widget tokens; only API-key callers reach it. */
export class WidgetTokensService {
  constructor(
    private readonly em: EntityManager,
    private readonly principal: Principal,
  ) {}

  async create(input: CreateWidgetTokenInput): Promise<{ token: string; widgetToken: WidgetTokenDto }> {
    const ws = this.principal.workspaceId;
    if (input.appId !== undefined) await assertWorkspaceApp(this.em, ws, input.appId);
    const origins: string[] = [];
    for (const o of input.allowedOrigins ?? []) {
      const n = normalizeOrigin(o);
      if (!n) throw appError('INVALID_ORIGIN', { o });
      if (!origins.includes(n)) origins.push(n);
    }
    const token = generateWidgetToken();
    const ttl = input.ttlSeconds ?? WIDGET_TOKEN_TTL.defaultSeconds;
    const rows = await this.em.execute<TokenRow[]>(
      `insert into widget_tokens
         (id, workspace_id, app_id, name, token_hash, token_prefix, subject, allowed_origins,
          max_requests, expires_at, created_by_key_id)
       values (?, ?, ?, ?, ?, ?, ?, ?::text[], ?, now() + make_interval(secs => ?), ?)
       returning *`,
      [
        randomUUID(),
        ws,
        input.appId ?? null,
        input.name ?? null,
        hashWidgetToken(token),
        widgetTokenDisplayPrefix(token),
        input.subject ?? null,
        `{${origins.map((o) => `"${o}"`).join(',')}}`,
        input.maxRequests ?? WIDGET_TOKEN_MAX_REQUESTS.default,
        ttl,
        this.principal.keyId ?? null,
      ],
    );
    return { token, widgetToken: toDto(rows[0] as TokenRow) };
  }

  async list(page: { limit?: number; offset?: number } = {}) {
    const { limit, offset } = clampPage(page.limit, page.offset, APPS_PAGE);
    const rows = await this.em.execute<(TokenRow & { total: string | number })[]>(
      `select *, count(*) over () as total from widget_tokens where workspace_id = ?
       order by created_at desc, id limit ? offset ?`,
      [this.principal.workspaceId, limit, offset],
    );
    let total = rows[0] ? Number(rows[0].total) : 0;
    if (!rows[0] && offset > 0) {
      const c = await this.em.execute<{ n: string | number }[]>(
        'select count(*) as n from widget_tokens where workspace_id = ?',
        [this.principal.workspaceId],
      );
      total = Number(c[0]?.n ?? 0);
    }
    return { data: rows.map(toDto), meta: { limit, offset, total } };
  }

  async revoke(tokenId: string): Promise<{ revoked: true; widgetToken: WidgetTokenDto }> {
    if (!UUID.test(tokenId)) throw appError('WIDGET_TOKEN_NOT_FOUND');
    const rows = await this.em.execute<TokenRow[]>(
      `update widget_tokens set revoked_at = coalesce(revoked_at, now())
        where id = ? and workspace_id = ? returning *`,
      [tokenId, this.principal.workspaceId],
    );
    if (!rows[0]) throw appError('WIDGET_TOKEN_NOT_FOUND');
    return { revoked: true, widgetToken: toDto(rows[0]) };
  }
}
