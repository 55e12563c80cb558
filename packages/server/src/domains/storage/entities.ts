import { defineEntity, type InferEntity, p } from '@mikro-orm/core';

export type StorageFileType = 'image' | 'deliverable' | 'document' | 'file';
export type IndexStatus = 'none' | 'queued' | 'processing' | 'ready' | 'failed';

export const StorageFileEntity = defineEntity({
  name: 'StorageFile',
  tableName: 'storage_files',
  properties: {
    id: p.uuid().primary(),
    workspaceId: p.uuid(),
    type: p.text().$type<StorageFileType>(),
    filename: p.text(),
    mimeType: p.text(),
    sizeBytes: p.bigint('number').nullable(),
    /** Folder the file sits in (`/`, `/docs`), or null for files outside the tree. */
    folderPath: p.text().nullable(),
    storageKey: p.text().nullable(),
    source: p.text().nullable(),
    sourceId: p.text().nullable(),
    isIndexed: p.boolean().default(false),
    indexStatus: p.text().$type<IndexStatus>().default('none'),
    isGitHostMirror: p.boolean().default(false),
    externalRef: p.json<Record<string, unknown>>().nullable(),
    createdAt: p.datetime().onCreate(() => new Date()),
    updatedAt: p
      .datetime()
      .onCreate(() => new Date())
      .onUpdate(() => new Date()),
  },
});
export type StorageFile = InferEntity<typeof StorageFileEntity>;

export const StorageFolderEntity = defineEntity({
  name: 'StorageFolder',
  tableName: 'storage_folders',
  properties: {
    id: p.uuid().primary(),
    workspaceId: p.uuid(),
    path: p.text(),
    name: p.text(),
    createdAt: p.datetime().onCreate(() => new Date()),
  },
});
export type StorageFolder = InferEntity<typeof StorageFolderEntity>;

export const storageEntities = [StorageFileEntity, StorageFolderEntity];
