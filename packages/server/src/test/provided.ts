declare module 'vitest' {
  export interface ProvidedContext {
    /** Path of the migrated embedded-database tarball ('' on the PostgreSQL server). */
    pgTemplate: string;
  }
}

export {};
