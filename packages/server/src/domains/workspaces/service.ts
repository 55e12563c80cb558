import { randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import { hash as argonHash } from '@node-rs/argon2';
import { displayPrefix, generateApiKey, hashApiKey, isWellFormedApiKey } from '../../auth/api-keys.js';
import type { Principal } from '../../auth/principal.js';
import { appError } from '../../errors/index.js';
import { AppsService } from '../apps/service.js';
import { MICROS_PER_USD } from './amounts.js';
import {
  type ApiKey,
  ApiKeyEntity,
  CreditLedgerEntity,
  MembershipEntity,
  type Role,
  UserEntity,
  type Workspace,
  WorkspaceEntity,
} from './entities.js';

export const MAX_ACTIVE_KEYS = 10;
export { MICROS_PER_USD, parseTokenQuota, usdToMicros } from './amounts.js';

export interface WorkspaceDto {
  id: string;
  name: string;
  status: string;
  monthlyTokenQuota: number | null;
  creditBalanceUsd: number;
  billingCycleAnchor: string;
  createdAt: string;
}

export interface ApiKeyDto {
  id: string;
  workspaceId: string;
  name: string | null;
  prefix: string;
  createdAt: string;
  lastUsedAt: string | null;
  revokedAt: string | null;
  usage: { requests: number; inputTokens: number; outputTokens: number; costUsd: number };
}

export const toWorkspaceDto = (w: Workspace): WorkspaceDto => ({
  id: w.id,
  name: w.name,
  status: w.status,
  monthlyTokenQuota: w.monthlyTokenQuota ?? null,
  creditBalanceUsd: Number(w.creditBalanceMicros) / MICROS_PER_USD,
  billingCycleAnchor: w.billingCycleAnchor.toISOString(),
  createdAt: w.createdAt.toISOString(),
});

export const toApiKeyDto = (k: ApiKey): ApiKeyDto => ({
  id: k.id,
  workspaceId: k.workspaceId,
  name: k.name ?? null,
  prefix: k.keyPrefix,
  createdAt: k.createdAt.toISOString(),
  lastUsedAt: k.lastUsedAt?.toISOString() ?? null,
  revokedAt: k.revokedAt?.toISOString() ?? null,
  usage: {
    requests: Number(k.requestCount),
    inputTokens: Number(k.inputTokens),
    outputTokens: Number(k.outputTokens),
    costUsd: Number(k.costMicros) / MICROS_PER_USD,
  },
});

const isUuid = (s: string) => /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(s);

/**
 * Workspaces, users, API keys and credit grants: what an operator (CLI, headless init, the
 * future web console) manages. Requests from integrators only ever read through `me`.
 */
export class WorkspacesService {
  constructor(private readonly em: EntityManager) {}

  async findWorkspace(idOrName: string): Promise<Workspace | null> {
    if (isUuid(idOrName)) {
      const byId = await this.em.findOne(WorkspaceEntity, { id: idOrName });
      if (byId) return byId;
    }
    return this.em.findOne(WorkspaceEntity, {
      name: { $ilike: idOrName.replace(/[\\%_]/g, (c) => `\\${c}`) },
    });
  }

  async requireWorkspace(idOrName: string): Promise<Workspace> {
    const ws = await this.findWorkspace(idOrName);
    if (!ws) throw appError('WORKSPACE_NOT_FOUND_NAMED', { workspace: idOrName });
    return ws;
  }

  async listWorkspaces(): Promise<Workspace[]> {
    return this.em.find(WorkspaceEntity, {}, { orderBy: { createdAt: 'asc' } });
  }

  async createWorkspace(input: { name: string; monthlyTokenQuota?: number | null }): Promise<Workspace> {
    const name = input.name.trim();
    if (!name) throw appError('WORKSPACE_NAME_REQUIRED');
    if (await this.findWorkspace(name)) throw appError('WORKSPACE_ALREADY_EXISTS', { name });
    const ws = this.em.create(WorkspaceEntity, {
      id: randomUUID(),
      name,
      monthlyTokenQuota: input.monthlyTokenQuota ?? null,
    } as Workspace);
    await this.em.flush();
    return ws;
  }

  async setMonthlyTokenQuota(workspaceId: string, quota: number | null): Promise<Workspace> {
    const ws = await this.requireWorkspace(workspaceId);
    ws.monthlyTokenQuota = quota;
    await this.em.flush();
    return ws;
  }

  async ensureUser(email: string, password?: string): Promise<{ id: string; created: boolean }> {
    const normalized = email.trim().toLowerCase();
    if (!/^[^\s@]+@[^\s@]+$/.test(normalized)) throw appError('EMAIL_MALFORMED', { email });
    const existing = await this.em.findOne(UserEntity, { email: normalized });
    if (existing) return { id: existing.id, created: false };
    const user = this.em.create(UserEntity, {
      id: randomUUID(),
      email: normalized,
      passwordHash: password ? await argonHash(password) : null,
    } as never);
    await this.em.flush();
    return { id: (user as { id: string }).id, created: true };
  }

  async ensureMembership(workspaceId: string, userId: string, role: Role): Promise<void> {
    const existing = await this.em.findOne(MembershipEntity, { workspaceId, userId });
    if (existing) return;
    this.em.create(MembershipEntity, { workspaceId, userId, role } as never);
    await this.em.flush();
  }

  /**
   * Creates a key (spec 2.1 / 5): at most 10 active per workspace, only owners and admins
   * when an acting user is named. `presetKey` lets an operator choose the key (headless init).
   * Returns the plaintext once; only its hash is stored.
   */
  async createApiKey(input: {
    workspaceId: string;
    name?: string | null;
    actingUserId?: string;
    presetKey?: string;
  }): Promise<{ key: string; apiKey: ApiKey }> {
    if (input.presetKey !== undefined && !isWellFormedApiKey(input.presetKey)) {
      throw appError('API_KEY_MALFORMED');
    }
    return this.em.transactional(async (em) => {
      // Lock the workspace row so concurrent creations cannot both pass the limit.
      const rows = await em.execute<{ id: string }[]>('select id from workspaces where id = ? for update', [
        input.workspaceId,
      ]);
      if (rows.length === 0) throw appError('WORKSPACE_NOT_FOUND_NAMED', { workspace: input.workspaceId });
      if (input.actingUserId) {
        const m = await em.findOne(MembershipEntity, {
          workspaceId: input.workspaceId,
          userId: input.actingUserId,
        });
        if (!m || (m.role !== 'owner' && m.role !== 'admin')) {
          throw appError('KEY_MANAGEMENT_FORBIDDEN');
        }
      }
      const active = await em.count(ApiKeyEntity, {
        workspaceId: input.workspaceId,
        revokedAt: null,
      });
      if (active >= MAX_ACTIVE_KEYS) {
        throw appError('API_KEY_LIMIT_REACHED', { MAX_ACTIVE_KEYS });
      }
      const key = input.presetKey ?? generateApiKey();
      const keyHash = hashApiKey(key);
      if (await em.findOne(ApiKeyEntity, { keyHash })) {
        throw appError('API_KEY_TAKEN');
      }
      const apiKey = em.create(ApiKeyEntity, {
        id: randomUUID(),
        workspaceId: input.workspaceId,
        name: input.name?.trim() || null,
        keyHash,
        keyPrefix: displayPrefix(key),
        createdBy: input.actingUserId ?? null,
      } as ApiKey);
      await em.flush();
      return { key, apiKey };
    });
  }

  async listApiKeys(workspaceId: string, opts: { includeRevoked?: boolean } = {}) {
    return this.em.find(
      ApiKeyEntity,
      opts.includeRevoked ? { workspaceId } : { workspaceId, revokedAt: null },
      { orderBy: { createdAt: 'asc' } },
    );
  }

  async revokeApiKey(workspaceId: string, keyId: string): Promise<ApiKey> {
    const key = isUuid(keyId) ? await this.em.findOne(ApiKeyEntity, { id: keyId, workspaceId }) : null;
    if (!key) throw appError('API_KEY_NOT_FOUND');
    if (!key.revokedAt) {
      key.revokedAt = new Date();
      await this.em.flush();
    }
    return key;
  }

  /** Adds credits and writes the ledger line in one transaction. */
  async grantCredits(workspaceId: string, micros: number, reason = 'grant', ref?: string) {
    if (!Number.isSafeInteger(micros) || micros <= 0) {
      throw appError('CREDIT_AMOUNT_NOT_POSITIVE');
    }
    return this.em.transactional(async (em) => {
      const rows = await em.execute<{ credit_balance_micros: string }[]>(
        'update workspaces set credit_balance_micros = credit_balance_micros + ?, updated_at = now() where id = ? returning credit_balance_micros',
        [micros, workspaceId],
      );
      const row = rows[0];
      if (!row) throw appError('WORKSPACE_NOT_FOUND_NAMED', { workspace: workspaceId });
      const balance = Number(row.credit_balance_micros);
      em.create(CreditLedgerEntity, {
        id: randomUUID(),
        workspaceId,
        amountMicros: micros,
        balanceAfterMicros: balance,
        kind: 'grant',
        reason,
        ref: ref ?? null,
      } as never);
      await em.flush();
      return { balanceMicros: balance };
    });
  }

  /** Creates an app for an operator (CLI): the same path as `POST /apps`, so both agree on defaults. */
  async createApp(input: {
    workspaceId: string;
    name: string;
    systemPrompt?: string | null;
    modelId?: string | null;
    description?: string | null;
  }) {
    const name = input.name.trim();
    if (!name) throw appError('NAME_REQUIRED');
    const ws = await this.requireWorkspace(input.workspaceId);
    const operator: Principal = { workspaceId: ws.id, workspaceName: ws.name, via: 'session' };
    return new AppsService(this.em, operator).create({
      name,
      systemPrompt: input.systemPrompt ?? undefined,
      model: input.modelId ?? undefined,
      description: input.description ?? undefined,
    });
  }
}
