import type { EntityManager } from '@mikro-orm/postgresql';
import type { ServerDeps } from '../../context.js';
import { RagDocuments } from './documents.js';
import { RagIngest } from './ingest.js';
import { RagQuery } from './query.js';
import { RagRetrieval } from './retrieval.js';

/**
 * Document question answering (spec 4.12): documents are storage files of type `document`,
 * their chunks live in `rag_chunks` with a full-text vector and, when an embedding model is
 * configured, a unit-length embedding. Retrieval is hybrid (full text + vectors, fused by RRF).
 *
 * One entry point over the rooms that do the work: `documents.ts` (access, provisioning,
 * vectors, document rows), `ingest.ts` (indexing a document), `retrieval.ts` (the stages and
 * their fusion) and `query.ts` (the quota and the answer).
 */
export class RagService {
  private readonly documents: RagDocuments;
  private readonly indexing: RagIngest;
  private readonly retrieval: RagRetrieval;
  private readonly answers: RagQuery;

  constructor(deps: ServerDeps, em: EntityManager = deps.em()) {
    this.documents = new RagDocuments(deps, em);
    this.indexing = new RagIngest(deps, em, this.documents);
    this.retrieval = new RagRetrieval(deps, em, this.documents);
    this.answers = new RagQuery(deps, em, this.documents, this.retrieval);
  }

  // ---------- access, vectors, documents ----------

  assertAccess(...a: Parameters<RagDocuments['assertAccess']>) {
    return this.documents.assertAccess(...a);
  }
  isEnabled(...a: Parameters<RagDocuments['isEnabled']>) {
    return this.documents.isEnabled(...a);
  }
  assertEnabled(...a: Parameters<RagDocuments['assertEnabled']>) {
    return this.documents.assertEnabled(...a);
  }
  provision(...a: Parameters<RagDocuments['provision']>) {
    return this.documents.provision(...a);
  }
  vectorMode() {
    return this.documents.vectorMode();
  }
  vectorIndex() {
    return this.documents.vectorIndex();
  }
  embeddingModel() {
    return this.documents.embeddingModel();
  }
  createDocument(...a: Parameters<RagDocuments['createDocument']>) {
    return this.documents.createDocument(...a);
  }
  setStatus(...a: Parameters<RagDocuments['setStatus']>) {
    return this.documents.setStatus(...a);
  }
  listDocuments(...a: Parameters<RagDocuments['listDocuments']>) {
    return this.documents.listDocuments(...a);
  }
  getDocument(...a: Parameters<RagDocuments['getDocument']>) {
    return this.documents.getDocument(...a);
  }
  deleteDocument(...a: Parameters<RagDocuments['deleteDocument']>) {
    return this.documents.deleteDocument(...a);
  }

  // ---------- ingest ----------

  ingest(...a: Parameters<RagIngest['ingest']>) {
    return this.indexing.ingest(...a);
  }
  indexDocument(...a: Parameters<RagIngest['indexDocument']>) {
    return this.indexing.indexDocument(...a);
  }
  reindex(...a: Parameters<RagIngest['reindex']>) {
    return this.indexing.reindex(...a);
  }

  // ---------- retrieval ----------

  fullTextStage(...a: Parameters<RagRetrieval['fullTextStage']>) {
    return this.retrieval.fullTextStage(...a);
  }
  vectorStage(...a: Parameters<RagRetrieval['vectorStage']>) {
    return this.retrieval.vectorStage(...a);
  }

  // ---------- quota and query ----------

  quotaStatus(...a: Parameters<RagQuery['quotaStatus']>) {
    return this.answers.quotaStatus(...a);
  }
  queryOr500(...a: Parameters<RagQuery['queryOr500']>) {
    return this.answers.queryOr500(...a);
  }
  query(...a: Parameters<RagQuery['query']>) {
    return this.answers.query(...a);
  }
}
