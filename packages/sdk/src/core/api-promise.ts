/**
 * What every SDK method returns: await it for the typed data, or call `withResponse()`
 * for the data together with the raw `Response` (headers, status).
 */
export class APIPromise<T> implements PromiseLike<T> {
  private dataPromise: Promise<T> | undefined;

  constructor(private readonly responsePromise: Promise<{ data: T; response: Response }>) {}

  withResponse(): Promise<{ data: T; response: Response }> {
    return this.responsePromise;
  }

  private data(): Promise<T> {
    this.dataPromise ??= this.responsePromise.then((r) => r.data);
    return this.dataPromise;
  }

  // biome-ignore lint/suspicious/noThenProperty: this is a thenable by design
  then<R1 = T, R2 = never>(
    onfulfilled?: ((value: T) => R1 | PromiseLike<R1>) | null,
    onrejected?: ((reason: unknown) => R2 | PromiseLike<R2>) | null,
  ): Promise<R1 | R2> {
    return this.data().then(onfulfilled, onrejected);
  }

  catch<R = never>(onrejected?: ((reason: unknown) => R | PromiseLike<R>) | null): Promise<T | R> {
    return this.data().catch(onrejected);
  }

  finally(onfinally?: (() => void) | null): Promise<T> {
    return this.data().finally(onfinally);
  }
}
