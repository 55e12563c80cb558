import type { components } from '../generated/openapi.js';

type Schemas = components['schemas'];

export type Me = Schemas['Me'];
export type WorkspaceUsage = Schemas['WorkspaceUsage'];
export type RequestUsage = Schemas['RequestUsage'];
export type Role = Schemas['Role'];
export type AuthUser = Schemas['AuthUser'];
export type AuthSession = Schemas['AuthSession'];
export type SignedIn = Schemas['SignedIn'];
export type AuthProviders = Schemas['AuthProviders'];
export type PasswordChanged = Schemas['PasswordChanged'];
export type SessionListItem = Schemas['SessionListItem'];
export type WorkspaceMembership = Schemas['WorkspaceMembership'];
export type ApiKey = Schemas['ApiKey'];
export type CreatedApiKey = Schemas['CreatedApiKey'];
export type Member = Schemas['Member'];
export type Invitation = Schemas['Invitation'];
export type CreatedInvitation = Schemas['CreatedInvitation'];
export type InvitationPreview = Schemas['InvitationPreview'];
export type ToolServer = Schemas['ToolServer'];
export type McpServerRef = Schemas['McpServerRef'];
export type Model = Schemas['Model'];
export type ModelList = Schemas['ModelList'];
export type IntegrationPack = Schemas['IntegrationPack'];
export type PackTool = Schemas['PackTool'];
export type PackSkill = Schemas['PackSkill'];
export type PlatformTool = Schemas['PlatformTool'];
export type ErrorBody = Schemas['ErrorBody'];
export type ChatMessage = Schemas['ChatMessage'];
export type ChatRequest = Schemas['ChatRequest'];
export type StorageFile = Schemas['StorageFile'];
/** Where a storage file's indexing for document question answering is: `none`, `queued`, `processing`, `ready`, `failed`. */
export type StorageIndexStatus = StorageFile['indexStatus'];
export type IndexStorageFileResult = Schemas['IndexStorageFileResult'];
export type StorageFolder = Schemas['StorageFolder'];
export type StorageList = Schemas['StorageList'];
export type StorageFileResult = Schemas['StorageFileResult'];
export type CreateFolderResult = Schemas['CreateFolderResult'];
export type RenameFolderResult = Schemas['RenameFolderResult'];
export type PathListing = Schemas['PathListing'];
export type PathTree = Schemas['PathTree'];
export type PathTreeFull = Schemas['PathTreeFull'];
export type ImportResult = Schemas['ImportResult'];
export type RagUploadResult = Schemas['RagUploadResult'];
export type RagUploadDetail = Schemas['RagUploadDetail'];
export type RagQueryResult = Schemas['RagQueryResult'];
export type RagSource = Schemas['RagSource'];
export type RagDocument = Schemas['RagDocument'];
export type GitHostImportResult = Schemas['GitHostImportResult'];

type Operations = import('../generated/openapi.js').operations;
type JsonBody<Op extends keyof Operations> = Operations[Op] extends {
  requestBody?: { content: { 'application/json': infer B } };
}
  ? B
  : never;

export type App = Schemas['App'];
export type AppList = Schemas['AppList'];
export type AppChatControls = Schemas['AppChatControls'];
export type ExternalIdentity = Schemas['ExternalIdentity'];
export type AppChatResponse = Schemas['AppChatResponse'];
export type AppChatStreamEvent = Schemas['AppChatStreamEvent'];
export type AppChatDoneEvent = Extract<AppChatStreamEvent, { type: 'done' }>;
export type AppThread = Schemas['AppThread'];
export type AppThreadList = Schemas['AppThreadList'];
export type AppThreadMessage = Schemas['AppThreadMessage'];
export type AppThreadMessageList = Schemas['AppThreadMessageList'];
export type AppMemoryStatus = Schemas['AppMemoryStatus'];
export type AppSaveMessagesResult = Schemas['AppSaveMessagesResult'];
export type WidgetToken = Schemas['WidgetToken'];
export type WidgetTokenList = Schemas['WidgetTokenList'];
export type CreatedWidgetToken = Schemas['CreatedWidgetToken'];

export type AppCreateParams = JsonBody<'apps-create'>;
export type AppUpdateParams = JsonBody<'apps-update'>;
/**
 * Who is writing a chat message, in your app's own words: any 1 to 64 characters. The model is
 * told "The person writing has the role: <role>"; the suggestions are only the usual ones. It is
 * not the message's author role (`user`/`assistant`), which the service sets itself.
 */
export type AppChatRole = 'student' | 'teacher' | 'customer' | 'visitor' | 'user' | (string & {});
export type AppChatParams = Omit<JsonBody<'apps-chat'>, 'role'> & {
  /** Who is writing (see `AppChatRole`): 1 to 64 characters; `BadRequestError` `role is required` when empty. */
  role: AppChatRole;
};
export type AppChatStreamParams = Omit<JsonBody<'apps-chatStream'>, 'role'> & {
  /** Who is writing (see `AppChatRole`): 1 to 64 characters; `BadRequestError` `role is required` when empty. */
  role: AppChatRole;
};
export type AppThreadCreateParams = JsonBody<'apps-createThread'>;
export type AppThreadUpdateParams = JsonBody<'apps-updateThread'>;
export type AppSaveMessagesParams = JsonBody<'apps-saveMessages'>;
export type WidgetTokenCreateParams = JsonBody<'widgetTokens-create'>;
export type AgentListItem = Schemas['AgentListItem'];
export type AgentCreated = Schemas['AgentCreated'];
export type AgentDetail = Schemas['AgentDetail'];
export type AgentConfigInput = Schemas['AgentConfigInput'];
export type AgentToolBinding = Schemas['AgentToolBinding'];
export type IntegrationBinding = Schemas['IntegrationBinding'];
export type AgentSession = Schemas['AgentSession'];
export type SessionTimeline = Schemas['SessionTimeline'];
export type ToolResultAccepted = Schemas['ToolResultAccepted'];
export type ToolApprovalAccepted = Schemas['ToolApprovalAccepted'];
export type ToolApproval = Schemas['ToolApproval'];
export type Run = Schemas['Run'];
export type RunList = Schemas['RunList'];
export type RunCreated = Schemas['RunCreated'];
export type RunDetail = Schemas['RunDetail'];
export type RunEvent = Schemas['RunEvent'];
export type RunArtifact = Schemas['RunArtifact'];
export type RunMetadata = Schemas['RunMetadata'];
export type Schedule = Schemas['Schedule'];
export type ScheduleTick = Schemas['ScheduleTick'];
export type ScheduleRunCreated = Schemas['ScheduleRunCreated'];
export type ConversationSummary = Schemas['ConversationSummary'];
export type ConversationDetail = Schemas['ConversationDetail'];
export type ConversationMessage = Schemas['ConversationMessage'];
export type ConversationUsageRecord = Schemas['ConversationUsageRecord'];
export type ConversationUsageEvent = Schemas['ConversationUsageEvent'];
export type ConversationUsageSummary = Schemas['ConversationUsageSummary'];
export type UsageComponentLine = Schemas['UsageComponentLine'];
type Query<Op extends keyof Operations> = Operations[Op] extends { parameters: { query?: infer Q } }
  ? NonNullable<Q>
  : never;
export type ConversationListParams = Query<'insights-listConversations'>;
export interface ConversationList {
  data: ConversationSummary[];
  meta: { limit: number; offset: number; total: number };
}
export type ArtifactGenerateParams = Schemas['ArtifactGenerateRequest'];
export type ArtifactGenerateResponse = Schemas['ArtifactGenerateResponse'];
export type ImageRequest = Schemas['ImageRequest'];
export type ImageResponse = Schemas['ImageResponse'];
export type InsightReport = Schemas['InsightReport'];
