import type { components } from '../generated/openapi.js';

type Schemas = components['schemas'];

export type Me = Schemas['Me'];
export type IntegrationPack = Schemas['IntegrationPack'];
export type PackTool = Schemas['PackTool'];
export type PackSkill = Schemas['PackSkill'];
export type PlatformTool = Schemas['PlatformTool'];
export type ErrorBody = Schemas['ErrorBody'];
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
export type ChatMessage = Schemas['ChatMessage'];
export type ChatRequest = Schemas['ChatRequest'];
export type Run = Schemas['Run'];
export type RunCreated = Schemas['RunCreated'];
export type RunDetail = Schemas['RunDetail'];
export type RunEvent = Schemas['RunEvent'];
export type RunArtifact = Schemas['RunArtifact'];
export type RunMetadata = Schemas['RunMetadata'];
