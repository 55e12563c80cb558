import type { components } from '../generated/openapi.js';

type Schemas = components['schemas'];

export type Me = Schemas['Me'];
export type IntegrationPack = Schemas['IntegrationPack'];
export type PackTool = Schemas['PackTool'];
export type PackSkill = Schemas['PackSkill'];
export type PlatformTool = Schemas['PlatformTool'];
export type ErrorBody = Schemas['ErrorBody'];
export type AgentListItem = Schemas['AgentListItem'];
export type AgentCreated = Schemas['AgentCreated'];
export type AgentDetail = Schemas['AgentDetail'];
export type AgentConfigInput = Schemas['AgentConfigInput'];
export type AgentToolBinding = Schemas['AgentToolBinding'];
export type IntegrationBinding = Schemas['IntegrationBinding'];
export type AgentSession = Schemas['AgentSession'];
export type SessionTimeline = Schemas['SessionTimeline'];
export type ToolResultAccepted = Schemas['ToolResultAccepted'];
export type ChatMessage = Schemas['ChatMessage'];
export type ChatRequest = Schemas['ChatRequest'];
export type StorageFile = Schemas['StorageFile'];
export type StorageFolder = Schemas['StorageFolder'];
export type StorageList = Schemas['StorageList'];
export type StorageFileResult = Schemas['StorageFileResult'];
export type CreateFolderResult = Schemas['CreateFolderResult'];
export type RenameFolderResult = Schemas['RenameFolderResult'];
export type PathListing = Schemas['PathListing'];
export type PathTree = Schemas['PathTree'];
export type PathTreeFull = Schemas['PathTreeFull'];
export type ImportResult = Schemas['ImportResult'];
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
export type CreatedWidgetToken = Schemas['CreatedWidgetToken'];

export type AppCreateParams = JsonBody<'apps-create'>;
export type AppUpdateParams = JsonBody<'apps-update'>;
export type AppChatParams = JsonBody<'apps-chat'>;
export type AppChatStreamParams = JsonBody<'apps-chatStream'>;
export type AppThreadCreateParams = JsonBody<'apps-createThread'>;
export type AppThreadUpdateParams = JsonBody<'apps-updateThread'>;
export type AppSaveMessagesParams = JsonBody<'apps-saveMessages'>;
export type WidgetTokenCreateParams = JsonBody<'widgetTokens-create'>;
