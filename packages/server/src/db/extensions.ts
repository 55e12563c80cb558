import { vector } from '@electric-sql/pglite-pgvector';

/**
 * PGlite extensions the embedded database loads: pgvector, for the HNSW indexes of document
 * question answering (decision 0024). `CREATE EXTENSION vector` runs when a RAG index is first
 * provisioned; on a PostgreSQL server without pgvector that fails and retrieval falls back to
 * an exact cosine over `real[]`.
 */
export const EMBEDDED_EXTENSIONS = { vector };
