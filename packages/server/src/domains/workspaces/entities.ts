import { defineEntity, type InferEntity, p } from '@mikro-orm/core';
import type { Role } from '../../auth/principal.js';

export const WorkspaceEntity = defineEntity({
  name: 'Workspace',
  tableName: 'workspaces',
  properties: {
    id: p.uuid().primary(),
    name: p.text(),
    status: p.text().$type<'active' | 'suspended'>().default('active'),
    monthlyTokenQuota: p.bigint('number').nullable(),
    billingCycleAnchor: p.datetime().onCreate(() => new Date()),
    creditBalanceMicros: p.bigint('number').default(0),
    createdAt: p.datetime().onCreate(() => new Date()),
    updatedAt: p
      .datetime()
      .onCreate(() => new Date())
      .onUpdate(() => new Date()),
  },
});
export type Workspace = InferEntity<typeof WorkspaceEntity>;

export const UserEntity = defineEntity({
  name: 'User',
  tableName: 'users',
  properties: {
    id: p.uuid().primary(),
    email: p.text(),
    name: p.text().nullable(),
    passwordHash: p.text().nullable(),
    createdAt: p.datetime().onCreate(() => new Date()),
  },
});
export type User = InferEntity<typeof UserEntity>;

export type { Role } from '../../auth/principal.js';

export const MembershipEntity = defineEntity({
  name: 'Membership',
  tableName: 'memberships',
  properties: {
    workspaceId: p.uuid().primary(),
    userId: p.uuid().primary(),
    role: p.text().$type<Role>(),
    createdAt: p.datetime().onCreate(() => new Date()),
  },
});
export type Membership = InferEntity<typeof MembershipEntity>;

export const ApiKeyEntity = defineEntity({
  name: 'ApiKey',
  tableName: 'api_keys',
  properties: {
    id: p.uuid().primary(),
    workspaceId: p.uuid(),
    name: p.text().nullable(),
    keyHash: p.text(),
    keyPrefix: p.text(),
    createdBy: p.uuid().nullable(),
    createdAt: p.datetime().onCreate(() => new Date()),
    lastUsedAt: p.datetime().nullable(),
    revokedAt: p.datetime().nullable(),
    requestCount: p.bigint('number').default(0),
    inputTokens: p.bigint('number').default(0),
    outputTokens: p.bigint('number').default(0),
    costMicros: p.bigint('number').default(0),
  },
});
export type ApiKey = InferEntity<typeof ApiKeyEntity>;

export const CreditLedgerEntity = defineEntity({
  name: 'CreditLedgerEntry',
  tableName: 'credit_ledger',
  properties: {
    id: p.uuid().primary(),
    workspaceId: p.uuid(),
    amountMicros: p.bigint('number'),
    balanceAfterMicros: p.bigint('number'),
    kind: p.text().$type<'grant' | 'debit' | 'refund' | 'adjustment'>(),
    reason: p.text().nullable(),
    ref: p.text().nullable(),
    createdAt: p.datetime().onCreate(() => new Date()),
  },
});
export type CreditLedgerEntry = InferEntity<typeof CreditLedgerEntity>;

export const AppEntity = defineEntity({
  name: 'App',
  tableName: 'apps',
  properties: {
    id: p.uuid().primary(),
    workspaceId: p.uuid(),
    appType: p.text().$type<'app' | 'agent'>().default('app'),
    name: p.text(),
    description: p.text().nullable(),
    businessUseCase: p.text().nullable(),
    systemPrompt: p.text().nullable(),
    modelId: p.text().nullable(),
    config: p.json<Record<string, unknown>>().default('{}'),
    status: p.text().$type<'active' | 'draft'>().default('active'),
    isPublic: p.boolean().default(false),
    createdAt: p.datetime().onCreate(() => new Date()),
    updatedAt: p
      .datetime()
      .onCreate(() => new Date())
      .onUpdate(() => new Date()),
  },
});
export type App = InferEntity<typeof AppEntity>;

export const foundationEntities = [
  WorkspaceEntity,
  UserEntity,
  MembershipEntity,
  ApiKeyEntity,
  CreditLedgerEntity,
  AppEntity,
];
