export { AiSuite, AiSuite as default, type ClientOptions, type RequestOptions } from './client.js';
export { APIPromise } from './core/api-promise.js';
export * from './core/errors.js';
export { PagePromise, type Paginator } from './core/pagination.js';
export { readServerSentEvents, readTextChunks, type ServerSentEvent } from './core/sse.js';
export type { components, paths } from './generated/openapi.js';
export {
  type AgentEvent,
  type AgentEventOf,
  type AgentEventType,
  AgentRunError,
  AgentTurnStream,
  type ApprovalRequest,
  type ApproveHandler,
  type ToolHandler,
  type ToolHandlerContext,
  type ToolHandlers,
} from './lib/agent-stream.js';
export { AppChatStream, AppChatStreamError } from './lib/app-chat-stream.js';
export { type FileLike, type ToFileInput, toFile } from './lib/to-file.js';
export { MissingToolHandlerError, type PendingToolCall } from './lib/tools.js';
export {
  type RunApprovalWebhook,
  type RunWebhook,
  type ToolCallWebhook,
  type VerifyWebhookOptions,
  verifyWebhook,
  type WebhookEvent,
  type WebhookHeaders,
  WebhookVerificationError,
} from './lib/webhooks.js';
export type { CreateAgentParams, UpdateAgentParams } from './resources/agents.js';
export { ApiKeys } from './resources/api-keys.js';
export { Artifacts } from './resources/artifacts.js';
export { Auth } from './resources/auth.js';
export { Chat, ChatStream, type ChatStreamOptions, type ChatStreamParams } from './resources/chat.js';
export {
  type ImageEditParams,
  type ImageGenerateParams,
  type ImageInput,
  type ImageResult,
  Images,
} from './resources/images.js';
export { Conversations, Insights } from './resources/insights.js';
export { Invitations, Members } from './resources/members.js';
export { Models } from './resources/models.js';
export {
  Rag,
  RagDocuments,
  type RagFileInput,
  type RagQueryOptions,
  type RagQueryParams,
  type RagUploadParams,
} from './resources/rag.js';
export {
  isTerminalRunStatus,
  type PollOptions,
  pollDelay,
  type RunArtifactHandle,
  type RunCreateParams,
  type RunListQuery,
  RunPollTimeoutError,
  Runs,
  TERMINAL_RUN_STATUSES,
} from './resources/runs.js';
export {
  type CreateScheduleParams,
  Schedules,
  type UpdateScheduleParams,
} from './resources/schedules.js';
export type { SendMessageOptions } from './resources/sessions.js';
export {
  type ImportFile,
  type ImportParams,
  type StorageFileType,
  type StorageListQuery,
  StorageUploadError,
  type Uploadable,
  type UploadOptions,
  type UploadResult,
} from './resources/storage.js';
export { ToolServers } from './resources/tool-servers.js';
export type * from './resources/types.js';
