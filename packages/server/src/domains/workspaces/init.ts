import type { EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import { hashApiKey } from '../../auth/api-keys.js';
import type { Config } from '../../config.js';
import { ApiKeyEntity } from './entities.js';
import { parseTokenQuota, usdToMicros, WorkspacesService } from './service.js';

export interface InitResult {
  workspaceId?: string;
  createdWorkspace: boolean;
  createdUser: boolean;
  createdKey: boolean;
  grantedMicros: number;
}

/**
 * Headless set-up from INIT_* variables, run at every start. Idempotent: creates only what is
 * missing, never duplicates, and grants credits and sets the quota only when it creates the
 * workspace (afterwards the CLI owns those values). A transaction-scoped advisory lock keeps
 * two processes starting together from racing.
 */
export async function runHeadlessInit(em: EntityManager, config: Config, log: Logger): Promise<InitResult> {
  const init = config.init;
  const result: InitResult = {
    createdWorkspace: false,
    createdUser: false,
    createdKey: false,
    grantedMicros: 0,
  };
  if (!init.workspaceName) {
    if (init.apiKey || init.userEmail) {
      log.warn('INIT_API_KEY / INIT_USER_EMAIL are ignored without INIT_WORKSPACE_NAME');
    }
    return result;
  }
  const credits = init.creditsUsd ? usdToMicros(init.creditsUsd) : 0;
  const quota = init.monthlyTokenQuota ? parseTokenQuota(init.monthlyTokenQuota) : null;

  await em.transactional(async (tx) => {
    await tx.execute("select pg_advisory_xact_lock(hashtext('ai-suite:headless-init'))");
    const svc = new WorkspacesService(tx);
    let ws = await svc.findWorkspace(init.workspaceName as string);
    if (!ws) {
      ws = await svc.createWorkspace({ name: init.workspaceName as string, monthlyTokenQuota: quota });
      result.createdWorkspace = true;
      if (credits > 0) {
        await svc.grantCredits(ws.id, credits, 'initial grant (INIT_CREDITS_USD)', 'headless-init');
        result.grantedMicros = credits;
      }
    }
    result.workspaceId = ws.id;
    let userId: string | undefined;
    if (init.userEmail) {
      const user = await svc.ensureUser(init.userEmail, init.userPassword);
      result.createdUser = user.created;
      userId = user.id;
      await svc.ensureMembership(ws.id, user.id, 'owner');
    }
    if (init.apiKey) {
      const existing = await tx.findOne(ApiKeyEntity, { keyHash: hashApiKey(init.apiKey) });
      if (existing && existing.workspaceId !== ws.id) {
        throw new Error('INIT_API_KEY is already registered to another workspace');
      }
      if (!existing) {
        await svc.createApiKey({
          workspaceId: ws.id,
          name: 'init',
          presetKey: init.apiKey,
          actingUserId: userId,
        });
        result.createdKey = true;
      }
    }
  });
  log.info({ init: result }, 'headless init done');
  return result;
}
