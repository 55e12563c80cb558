import type { MigrationObject } from '@mikro-orm/core';
import { Migration202611250100_user_identities } from './Migration202611250100_user_identities.js';
import { Migration202611250300_rag_index_runs } from './Migration202611250300_rag_index_runs.js';
import { Migration202611260100_rag_lexeme_df } from './Migration202611260100_rag_lexeme_df.js';
import { Migration202611260200_rag_vector_index } from './Migration202611260200_rag_vector_index.js';
import { Migration202611270100_run_retry_backoff } from './Migration202611270100_run_retry_backoff.js';
import { Migration202612060100_run_trace_parent } from './Migration202612060100_run_trace_parent.js';
import { Migration202612060110_tool_approvals } from './Migration202612060110_tool_approvals.js';
import { Migration202612060200_agent_schedules } from './Migration202612060200_agent_schedules.js';
import { Migration20261121000000_foundation } from './Migration20261121000000_foundation.js';
import { Migration20261121010000_metering } from './Migration20261121010000_metering.js';
import { Migration20261121020000_storage } from './Migration20261121020000_storage.js';
import { Migration20261121040001_run_engine } from './Migration20261121040001_run_engine.js';
import { Migration20261121040002_agents } from './Migration20261121040002_agents.js';
import { Migration20261121050000_apps } from './Migration20261121050000_apps.js';
import { Migration20261121060001_autonomous_runs } from './Migration20261121060001_autonomous_runs.js';
import { Migration20261122000000_insights } from './Migration20261122000000_insights.js';
import { Migration20261122010000_artifacts } from './Migration20261122010000_artifacts.js';
import { Migration20261123040000_sessions } from './Migration20261123040000_sessions.js';
import { Migration20261124020000_metering_holds } from './Migration20261124020000_metering_holds.js';
import { Migration20261124030000_serial_running_unique } from './Migration20261124030000_serial_running_unique.js';
import { Migration20261124040000_invitations } from './Migration20261124040000_invitations.js';
import { Migration20261124040100_sign_in_failures } from './Migration20261124040100_sign_in_failures.js';
import { Migration20261124040200_tool_servers } from './Migration20261124040200_tool_servers.js';
import { Migration20261124060000_rag } from './Migration20261124060000_rag.js';

/**
 * Every migration, in order. Listed explicitly (not globbed) so the bundled server and the
 * test runner apply exactly the same set. Add new migrations at the end.
 */
export const migrationsList: MigrationObject[] = [
  { name: 'Migration20261121000000_foundation', class: Migration20261121000000_foundation },
  { name: 'Migration20261121010000_metering', class: Migration20261121010000_metering },
  { name: 'Migration20261121020000_storage', class: Migration20261121020000_storage },
  { name: 'Migration20261121040001_run_engine', class: Migration20261121040001_run_engine },
  { name: 'Migration20261121040002_agents', class: Migration20261121040002_agents },
  { name: 'Migration20261121050000_apps', class: Migration20261121050000_apps },
  { name: 'Migration20261121060001_autonomous_runs', class: Migration20261121060001_autonomous_runs },
  { name: 'Migration20261122000000_insights', class: Migration20261122000000_insights },
  { name: 'Migration20261122010000_artifacts', class: Migration20261122010000_artifacts },
  { name: 'Migration20261123040000_sessions', class: Migration20261123040000_sessions },
  { name: 'Migration20261124020000_metering_holds', class: Migration20261124020000_metering_holds },
  {
    name: 'Migration20261124030000_serial_running_unique',
    class: Migration20261124030000_serial_running_unique,
  },
  { name: 'Migration20261124040000_invitations', class: Migration20261124040000_invitations },
  { name: 'Migration20261124040100_sign_in_failures', class: Migration20261124040100_sign_in_failures },
  { name: 'Migration20261124060000_rag', class: Migration20261124060000_rag },
  { name: 'Migration20261124040200_tool_servers', class: Migration20261124040200_tool_servers },
  { name: 'Migration202611250100_user_identities', class: Migration202611250100_user_identities },
  { name: 'Migration202611250300_rag_index_runs', class: Migration202611250300_rag_index_runs },
  { name: 'Migration202611260200_rag_vector_index', class: Migration202611260200_rag_vector_index },
  { name: 'Migration202611260100_rag_lexeme_df', class: Migration202611260100_rag_lexeme_df },
  { name: 'Migration202611270100_run_retry_backoff', class: Migration202611270100_run_retry_backoff },
  { name: 'Migration202612060100_run_trace_parent', class: Migration202612060100_run_trace_parent },
  { name: 'Migration202612060110_tool_approvals', class: Migration202612060110_tool_approvals },
  { name: 'Migration202612060200_agent_schedules', class: Migration202612060200_agent_schedules },
];
